"""Data set downloads against a local stand-in host: verify, resume, retry, refuse, once."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from pets_archive import MAT_FILES, QUIRKS, pets_images, tar_gz_bytes, zip_bytes  # noqa: E402

from pets_trainer.fetch import (  # noqa: E402
    MARKER,
    OXFORD_PETS_MD5,
    OXFORD_PETS_URL,
    Checksum,
    DataUnavailable,
    RetryPolicy,
    ensure_archive,
)
from pets_trainer.image_index import scan_images  # noqa: E402

FAST = RetryPolicy(attempts=4, first_delay=0.01, timeout=5)


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> bytes:
    root = tmp_path_factory.mktemp("pets-archive")
    pets_images(root)
    return tar_gz_bytes(root)


def sha256(data: bytes) -> Checksum:
    return Checksum("sha256", hashlib.sha256(data).hexdigest())


def gets(host, path):
    return [r for r in host.requests if r[0] == "GET" and r[1] == path]


def test_downloads_verifies_and_unpacks_the_pets_layout_once(host, archive, tmp_path):
    host.files["/pets/images.tar.gz"] = archive
    target = tmp_path / "data" / "pets"
    seen = []
    assert ensure_archive(f"{host.url}/pets/images.tar.gz", sha256(archive), target, retry=FAST,
                          progress=lambda done, total: seen.append((done, total))) is True
    index = scan_images(target / "images", verify=True)
    assert set(MAT_FILES).isdisjoint(p.name for p in index.files)
    assert "Abyssinian" in index.classes and "american_pit_bull_terrier" in index.classes
    assert QUIRKS.keys() <= {p.name for p in index.files} | set(index.skipped_unreadable)
    assert seen[-1] == (len(archive), len(archive))
    assert (target / MARKER).is_file()
    # Again (a restarted pod, another pod on the same volume): nothing is fetched.
    assert ensure_archive(f"{host.url}/pets/images.tar.gz", sha256(archive), target, retry=FAST) is False
    assert len(gets(host, "/pets/images.tar.gz")) == 1
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [".pets-download.lock", "pets"]


def test_md5_as_torchvision_publishes_it(host, archive, tmp_path):
    host.files["/images.tar.gz"] = archive
    checksum = Checksum("md5", hashlib.md5(archive).hexdigest().upper())
    assert ensure_archive(f"{host.url}/images.tar.gz", checksum, tmp_path / "pets", retry=FAST)
    assert OXFORD_PETS_URL.endswith("/images.tar.gz") and len(OXFORD_PETS_MD5) == 32


def test_a_wrong_checksum_unpacks_nothing(host, archive, tmp_path):
    host.files["/a.tgz"] = archive
    with pytest.raises(DataUnavailable, match=r"/a.tgz: sha256 is [0-9a-f]{64}, expected 0{64}"):
        ensure_archive(f"{host.url}/a.tgz", Checksum("sha256", "0" * 64), tmp_path / "pets", retry=FAST)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".pets-download.lock"]


def test_404_fails_at_once_naming_the_url(host, tmp_path):
    with pytest.raises(DataUnavailable, match=r"http://127.0.0.1:\d+/missing.tgz: HTTP 404"):
        ensure_archive(f"{host.url}/missing.tgz", Checksum("md5", "0" * 32), tmp_path / "pets", retry=FAST)
    assert len(gets(host, "/missing.tgz")) == 1


def test_a_dropped_connection_is_resumed_with_a_range_request(host, archive, tmp_path):
    host.files["/a.tgz"] = archive
    host.fail_next["/a.tgz"] = ["drop"]
    assert ensure_archive(f"{host.url}/a.tgz", sha256(archive), tmp_path / "pets", retry=FAST)
    first, second = gets(host, "/a.tgz")
    assert first[2] is None and second[2] == f"bytes={len(archive) // 2}-"


def test_server_errors_are_retried_then_reported(host, archive, tmp_path):
    host.files["/a.tgz"] = archive
    host.fail_next["/a.tgz"] = [500, 503]
    assert ensure_archive(f"{host.url}/a.tgz", sha256(archive), tmp_path / "ok", retry=FAST)
    host.fail_next["/b.tgz"] = [500] * 10
    host.files["/b.tgz"] = archive
    with pytest.raises(DataUnavailable, match="still failing after 4 attempts: HTTP 500"):
        ensure_archive(f"{host.url}/b.tgz", sha256(archive), tmp_path / "never", retry=FAST)


@pytest.mark.parametrize("kind", ["tar-dotdot", "tar-absolute", "tar-link-out", "zip-dotdot"])
def test_unsafe_members_are_refused(host, tmp_path, kind):
    root = tmp_path / "src"
    (root / "images").mkdir(parents=True)
    (root / "images" / "beagle_1.jpg").write_bytes(b"x")
    data = {
        "tar-dotdot": lambda: tar_gz_bytes(root, extra={"../escaped.txt": b"owned"}),
        "tar-absolute": lambda: tar_gz_bytes(root, extra={"/tmp/escaped.txt": b"owned"}),
        "tar-link-out": lambda: tar_gz_bytes(root, links={"images/passwd": "../../../../etc/passwd"}),
        "zip-dotdot": lambda: zip_bytes(root, extra={"../escaped.txt": b"owned"}),
    }[kind]()
    host.files["/evil"] = data
    with pytest.raises(DataUnavailable, match=r"http://127.0.0.1:\d+/evil: refused unsafe member"):
        ensure_archive(f"{host.url}/evil", sha256(data), tmp_path / "out" / "pets", retry=FAST)
    assert not (tmp_path / "out" / "pets").exists()
    assert not (tmp_path / "out" / "escaped.txt").exists() and not (tmp_path / "escaped.txt").exists()


def tar_with_link(kind: str) -> bytes:
    """A pets-style tar.gz whose `images/pug_2.jpg` is a link to `images/pug_1.jpg`, inside the tree."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        image = tarfile.TarInfo("images/pug_1.jpg")
        image.size = 1
        tar.addfile(image, io.BytesIO(b"x"))
        link = tarfile.TarInfo("images/pug_2.jpg")
        link.type = tarfile.SYMTYPE if kind == "symbolic" else tarfile.LNKTYPE
        link.linkname = "pug_1.jpg" if kind == "symbolic" else "images/pug_1.jpg"
        tar.addfile(link)
    return buffer.getvalue()


def zip_with_symlink() -> bytes:
    import io
    import stat
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        bundle.writestr("images/pug_1.jpg", b"x")
        link = zipfile.ZipInfo("images/pug_2.jpg")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        bundle.writestr(link, "pug_1.jpg")
    return buffer.getvalue()


@pytest.mark.parametrize("kind, data, what", [
    ("tar-symlink", lambda: tar_with_link("symbolic"), "a symbolic link to 'pug_1.jpg'"),
    ("tar-hardlink", lambda: tar_with_link("hard"), "a hard link to 'images/pug_1.jpg'"),
    ("zip-symlink", zip_with_symlink, "a symbolic link"),
])
def test_links_inside_the_tree_are_refused_in_tar_and_zip_alike(host, tmp_path, kind, data, what):
    data = data()
    host.files["/linked"] = data
    with pytest.raises(DataUnavailable) as refused:
        ensure_archive(f"{host.url}/linked", sha256(data), tmp_path / "out" / "pets", retry=FAST)
    assert str(refused.value) == (f"DataUnavailable: {host.url}/linked: refused unsafe member 'images/pug_2.jpg': {what}; "
                                  "links are not unpacked from archives")
    assert not (tmp_path / "out" / "pets").exists()


FETCH_SCRIPT = """
import sys
from pathlib import Path
from pets_trainer.fetch import Checksum, RetryPolicy, ensure_archive
print(ensure_archive(sys.argv[1], Checksum("sha256", sys.argv[2]), Path(sys.argv[3]), retry=RetryPolicy(first_delay=0.01)))
"""


def test_pods_sharing_a_volume_download_once(host, archive, tmp_path):
    host.files["/a.tgz"] = archive
    args = [f"{host.url}/a.tgz", hashlib.sha256(archive).hexdigest(), str(tmp_path / "shared" / "pets")]
    pods = [subprocess.Popen([sys.executable, "-c", FETCH_SCRIPT, *args], stdout=subprocess.PIPE, text=True)
            for _ in range(3)]
    outputs = sorted(pod.communicate(timeout=120)[0].strip() for pod in pods)
    assert outputs == ["False", "False", "True"]
    assert len(gets(host, "/a.tgz")) == 1
