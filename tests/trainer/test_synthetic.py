"""The synthetic pets-style data set: real JPEGs, deterministic, safe to generate concurrently, learnable."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from pets_trainer.image_index import label_of, scan_images
from pets_trainer.synthetic import BREEDS, generate_synthetic_pets


def test_writes_real_jpegs_named_like_oxford_pets(tmp_path):
    paths = generate_synthetic_pets(tmp_path, classes=3, images_per_class=5, image_size=40)
    assert len(paths) == 15
    assert {label_of(path.name) for path in paths} == set(BREEDS[:3])
    with Image.open(paths[0]) as image:
        assert image.format == "JPEG"
        assert image.size == (40, 40)
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".")]


def test_same_parameters_give_the_same_bytes(tmp_path):
    first = generate_synthetic_pets(tmp_path / "a", classes=2, images_per_class=3, image_size=24, seed=5)
    second = generate_synthetic_pets(tmp_path / "b", classes=2, images_per_class=3, image_size=24, seed=5)
    other = generate_synthetic_pets(tmp_path / "c", classes=2, images_per_class=3, image_size=24, seed=6)
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
    assert [p.read_bytes() for p in first] != [p.read_bytes() for p in other]


def test_two_processes_can_generate_into_one_directory_at_once(tmp_path):
    code = (
        "import sys; from pets_trainer.synthetic import generate_synthetic_pets;"
        "generate_synthetic_pets(sys.argv[1], classes=3, images_per_class=40, image_size=48, seed=1)"
    )
    processes = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)]) for _ in range(2)]
    assert [process.wait(timeout=120) for process in processes] == [0, 0]
    index = scan_images(tmp_path)
    assert len(index.files) == 120 and not index.skipped_names and not index.skipped_unreadable
    reference = generate_synthetic_pets(tmp_path / "reference", classes=3, images_per_class=40, image_size=48, seed=1)
    assert {p.name: p.read_bytes() for p in index.files} == {p.name: p.read_bytes() for p in reference}


def test_classes_differ_in_colour_more_than_images_within_a_class(tmp_path):
    paths = generate_synthetic_pets(tmp_path, classes=4, images_per_class=6, image_size=32)
    means = np.array([np.asarray(Image.open(path), dtype=np.float32).mean(axis=(0, 1)) for path in paths])
    per_class = means.reshape(4, 6, 3)
    centroids = per_class.mean(axis=1)
    within = np.linalg.norm(per_class - centroids[:, None, :], axis=2).mean()
    between = np.mean([np.linalg.norm(a - b) for i, a in enumerate(centroids) for b in centroids[i + 1:]])
    assert between > 2 * within


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (dict(classes=1), "classes must be between 2 and 37"),
        (dict(classes=38), "classes must be between 2 and 37"),
        (dict(images_per_class=0), "images_per_class must be >= 1"),
        (dict(image_size=4), "image_size must be >= 8"),
    ],
)
def test_bad_parameters_are_refused(tmp_path, arguments, message):
    with pytest.raises(ValueError, match=message):
        generate_synthetic_pets(tmp_path, **arguments)
