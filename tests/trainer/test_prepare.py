"""The step before the workers: downloads once per node, progress as metric lines, errors that name the URL."""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from pets_archive import pets_images, tar_gz_bytes  # noqa: E402

from pets_api import metric_lines  # noqa: E402
from pets_trainer.fetch import DataUnavailable  # noqa: E402
from pets_trainer.prepare import Downloads, Reporter, prepare_downloads  # noqa: E402


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> bytes:
    root = tmp_path_factory.mktemp("pets-archive")
    pets_images(root, classes=2, images_per_class=3, image_size=32)
    return tar_gz_bytes(root)


def test_the_archive_is_fetched_once_with_progress_lines_and_then_initialized(host, archive, tmp_path):
    host.files["/images.tar.gz"] = archive
    downloads = Downloads(data_url=f"{host.url}/images.tar.gz",
                          data_checksum="sha256:" + hashlib.sha256(archive).hexdigest(),
                          data_archive_dir=str(tmp_path / "datasets" / "pets"))
    events: list[dict] = []
    assert prepare_downloads(downloads, emit=events.append) is None  # no weights asked for
    assert (tmp_path / "datasets" / "pets" / "images").is_dir()
    assert events[0] == metric_lines.init_event("data", downloads.data_url, 0, None)
    assert events[-2] == metric_lines.init_event("data", downloads.data_url, len(archive), len(archive))
    assert events[-1] == metric_lines.initialized_event()
    # Every event is a metric line the operator reads back.
    assert metric_lines.parse_lines([metric_lines.format_line(e) for e in events]) == events
    again: list[dict] = []
    prepare_downloads(downloads, emit=again.append)  # another pod on the same volume: nothing fetched
    assert [r for r in host.requests if r[0] == "GET"] == [("GET", "/images.tar.gz", None)]
    assert again[-1] == metric_lines.initialized_event()


def test_a_wrong_checksum_and_a_bad_checksum_text_name_the_url(host, archive, tmp_path):
    host.files["/images.tar.gz"] = archive
    url = f"{host.url}/images.tar.gz"
    with pytest.raises(DataUnavailable, match=f"{url}: md5 is .*, expected {'0' * 32}"):
        prepare_downloads(Downloads(url, "md5:" + "0" * 32, str(tmp_path / "d")), emit=lambda event: None)
    with pytest.raises(DataUnavailable, match="must be sha256:<64 hex digits> or md5"):
        prepare_downloads(Downloads(url, "crc32:1234", str(tmp_path / "d")), emit=lambda event: None)


def test_progress_lines_are_throttled_but_the_last_one_always_comes():
    now = [0.0]
    lines: list[dict] = []
    report = Reporter("model", "timm/x", lines.append, interval=2.0, clock=lambda: now[0])
    for step in range(10):  # ten callbacks in one second: one line, then the finished one
        now[0] = step * 0.1
        report(step, 100)
    report(100, 100)
    now[0] = 5.0
    report(100, None)  # total unknown: a line once the interval has passed
    assert [(e["done"], e["total"]) for e in lines] == [(0, 100), (100, 100), (100, None)]


def test_nothing_to_fetch_prints_nothing():
    events: list[dict] = []
    assert prepare_downloads(Downloads(), emit=events.append) is None
    assert events == []


def test_an_archive_without_pet_images_where_data_path_points_is_data_unavailable(host, tmp_path):
    notes = tmp_path / "not-pets"
    (notes / "images").mkdir(parents=True)
    (notes / "images" / "README.txt").write_text("no pets here")
    served = tar_gz_bytes(notes)
    host.files["/other.tar.gz"] = served
    url = f"{host.url}/other.tar.gz"
    archive_dir = tmp_path / "datasets" / "other"
    downloads = Downloads(url, "sha256:" + hashlib.sha256(served).hexdigest(), str(archive_dir),
                          data_dir=str(archive_dir / "images"))
    with pytest.raises(DataUnavailable, match=rf"{url}: the unpacked archive has no usable images: no file in "
                                              rf".*images matches"):
        prepare_downloads(downloads, emit=lambda event: None)
    missing = Downloads(url, downloads.data_checksum, str(archive_dir), data_dir=str(archive_dir / "photos"))
    with pytest.raises(DataUnavailable, match=r"photos does not exist"):
        prepare_downloads(missing, emit=lambda event: None)
