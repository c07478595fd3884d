"""Finding labelled images, and every bad-data case: a clear error or a counted skip."""
from __future__ import annotations

import pytest

from pets_trainer.errors import DataError
from pets_trainer.image_index import label_of, scan_images
from pets_trainer.synthetic import generate_synthetic_pets


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("Abyssinian_1.jpg", "Abyssinian"),
        ("great_pyrenees_173.jpg", "great_pyrenees"),
        ("american_pit_bull_terrier_12.jpg", "american_pit_bull_terrier"),
        ("beagle.jpg", None),
        ("beagle_1.png", None),
        ("beagle_x.jpg", None),
        ("beagle_1.JPG", None),
        ("Abyssinian_100.mat", None),
    ],
)
def test_label_is_the_name_before_the_trailing_number(name, label):
    assert label_of(name) == label


def test_index_sorts_files_and_labels_by_sorted_class_name(tmp_path):
    generate_synthetic_pets(tmp_path, classes=3, images_per_class=2, image_size=16)
    index = scan_images(tmp_path)
    assert index.classes == tuple(sorted(index.classes)) == ("Abyssinian", "Bengal", "american_bulldog")
    assert [path.name for path in index.files] == sorted(path.name for path in tmp_path.iterdir())
    assert [index.classes[label] for label in index.labels] == [label_of(path.name) for path in index.files]
    assert index.skipped_names == () and index.skipped_unreadable == ()


def test_missing_directory_is_an_error(tmp_path):
    with pytest.raises(DataError, match=r"data directory .*nowhere does not exist"):
        scan_images(tmp_path / "nowhere")


def test_a_file_instead_of_a_directory_is_an_error(tmp_path):
    (tmp_path / "beagle_1.jpg").write_bytes(b"x")
    with pytest.raises(DataError, match="is not a directory"):
        scan_images(tmp_path / "beagle_1.jpg")


def test_empty_directory_is_an_error(tmp_path):
    (tmp_path / ".hidden").write_text("not a candidate")
    with pytest.raises(DataError, match=r"is empty: expected <breed>_<n>\.jpg images"):
        scan_images(tmp_path)


def test_no_matching_names_is_an_error_naming_the_pattern(tmp_path):
    (tmp_path / "cat.png").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("y")
    with pytest.raises(DataError, match=r"no file in .* matches <breed>_<n>\.jpg \(2 file\(s\) with other names"):
        scan_images(tmp_path)


def test_non_matching_names_are_counted_skips(tmp_path):
    generate_synthetic_pets(tmp_path, classes=2, images_per_class=3, image_size=16)
    (tmp_path / "README.txt").write_text("about")
    (tmp_path / "Abyssinian_1.mat").write_bytes(b"\0")
    index = scan_images(tmp_path)
    assert len(index.files) == 6
    assert sorted(index.skipped_names) == ["Abyssinian_1.mat", "README.txt"]
    assert index.skip_summary() == [
        "skipped 2 file(s) whose names do not match <breed>_<n>.jpg (e.g. 'Abyssinian_1.mat')"
    ]


def test_a_single_class_is_an_error(tmp_path):
    generate_synthetic_pets(tmp_path, classes=2, images_per_class=3, image_size=16)
    for path in tmp_path.glob("american_bulldog_*.jpg"):
        path.unlink()
    with pytest.raises(DataError, match=r"found only one class \('Abyssinian'\) .* at least two breeds"):
        scan_images(tmp_path)


def test_corrupt_and_truncated_images_are_counted_skips(tmp_path):
    generate_synthetic_pets(tmp_path, classes=2, images_per_class=4, image_size=64)
    (tmp_path / "Abyssinian_90.jpg").write_bytes(b"this is not a jpeg")
    whole = (tmp_path / "american_bulldog_1.jpg").read_bytes()
    (tmp_path / "american_bulldog_91.jpg").write_bytes(whole[: len(whole) // 2])
    index = scan_images(tmp_path)
    assert sorted(index.skipped_unreadable) == ["Abyssinian_90.jpg", "american_bulldog_91.jpg"]
    assert len(index.files) == 8
    assert "skipped 2 unreadable or corrupt image(s)" in index.skip_summary()[0]


def test_only_unreadable_images_is_an_error(tmp_path):
    for name in ("beagle_1.jpg", "pug_1.jpg"):
        (tmp_path / name).write_bytes(b"\xff\xd8garbage")
    with pytest.raises(DataError, match=r"none of the 2 image\(s\) .* could be read"):
        scan_images(tmp_path)


def test_corruption_that_leaves_one_class_is_reported_as_one_class(tmp_path):
    generate_synthetic_pets(tmp_path, classes=2, images_per_class=2, image_size=16)
    for path in tmp_path.glob("american_bulldog_*.jpg"):
        path.write_bytes(b"broken")
    with pytest.raises(DataError, match="found only one class"):
        scan_images(tmp_path)


def test_without_verification_names_alone_decide(tmp_path):
    generate_synthetic_pets(tmp_path, classes=2, images_per_class=2, image_size=16)
    (tmp_path / "american_bulldog_9.jpg").write_bytes(b"broken")
    assert len(scan_images(tmp_path, verify=False).files) == 5
