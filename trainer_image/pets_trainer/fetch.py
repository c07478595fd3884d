"""Data sets from the network: download (retries, HTTP Range resume), verify, unpack safely, once.

`ensure_archive(url, checksum, target)` leaves the archive's contents in `target` and returns it:
- the download goes to `<target>.download/` beside it, resumed with a Range request after a
  dropped connection, and retried with backoff on connection errors and 5xx answers; a 4xx
  (404: no such file) fails at once, naming the URL;
- the checksum (sha256 or md5) is verified before anything is unpacked;
- one rule for tar (plain, gz, bz2, xz) and zip: no absolute paths, no `..`, and no links at all
  (symbolic or hard: an image set has none, and a link inside the tree could still be pointed
  elsewhere later); tar members also pass tarfile's `data` filter (no devices); the archive is
  unpacked into a temporary directory that is renamed into place;
- a marker (`.pets-archive.json`) records which URL and checksum were unpacked, so a second call
  (another pod on a shared volume, a restarted pod) does nothing; an exclusive lock on the
  volume makes pods that share one download it once.

Written with the standard library (urllib, tarfile, zipfile, fcntl) so the trainer image needs
nothing more: torchvision's `download_and_extract_archive` has no resume, no lock and no
traversal check for zip archives.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pets_api.contract import OXFORD_PETS_MD5, OXFORD_PETS_URL  # noqa: F401 (data.oxfordPets: one source)

from .errors import TrainerError

MARKER = ".pets-archive.json"
CHUNK = 1 << 20

Progress = Callable[[int, int | None], None]  # (bytes done, total or None)


class DataUnavailable(TrainerError):
    """The archive cannot be had: the message names the URL and why."""

    reason = "DataUnavailable"  # the job's failure reason (pets_api.phases.FAILURE_REASONS)

    def __init__(self, message: str):
        super().__init__(f"{self.reason}: {message}")


@dataclass(frozen=True)
class Checksum:
    algorithm: str  # sha256 or md5
    hexdigest: str

    def __post_init__(self) -> None:
        if self.algorithm not in ("sha256", "md5"):
            raise ValueError(f"checksum algorithm must be sha256 or md5, got {self.algorithm!r}")
        object.__setattr__(self, "hexdigest", self.hexdigest.strip().lower())

    def of_file(self, path: Path) -> str:
        digest = hashlib.new(self.algorithm)
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(CHUNK), b""):
                digest.update(block)
        return digest.hexdigest()


def parse_checksum(text: str) -> Checksum:
    """`sha256:<hex>` or `md5:<hex>` (DATA_CHECKSUM) as a Checksum; DataUnavailable when it is neither."""
    algorithm, _, hexdigest = text.partition(":")
    length = {"sha256": 64, "md5": 32}.get(algorithm.strip().lower())
    digits = hexdigest.strip()
    if length is None or len(digits) != length or any(c not in "0123456789abcdefABCDEF" for c in digits):
        raise DataUnavailable(f"checksum {text!r} must be sha256:<64 hex digits> or md5:<32 hex digits>")
    return Checksum(algorithm.strip().lower(), digits)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6
    first_delay: float = 1.0
    max_delay: float = 30.0
    timeout: float = 60.0  # seconds without a byte before a connection counts as dropped

    def delays(self) -> Iterator[float]:
        delay = self.first_delay
        for _ in range(self.attempts - 1):
            yield delay
            delay = min(delay * 2, self.max_delay)


def _request(url: str, offset: int, headers: dict[str, str], timeout: float):
    request = urllib.request.Request(url, headers={**headers, **({"Range": f"bytes={offset}-"} if offset else {})})
    return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 (http and https only: checked by the caller)


def download(url: str, destination: Path, *, headers: dict[str, str] | None = None,
             retry: RetryPolicy = RetryPolicy(), progress: Progress | None = None) -> Path:
    """Download `url` to `destination`, resuming `<destination>.part` after dropped connections."""
    if not url.startswith(("http://", "https://")):
        raise DataUnavailable(f"{url}: only http and https URLs can be downloaded")
    partial = destination.with_name(destination.name + ".part")
    delays = retry.delays()
    while True:
        offset = partial.stat().st_size if partial.exists() else 0
        try:
            with _request(url, offset, headers or {}, retry.timeout) as response:
                resumed = response.status == 206
                length = response.headers.get("Content-Length")
                total = (offset if resumed else 0) + int(length) if length is not None else None
                done = offset if resumed else 0
                with open(partial, "ab" if resumed else "wb") as file:
                    for block in iter(lambda: response.read(CHUNK), b""):
                        file.write(block)
                        done += len(block)
                        if progress:
                            progress(done, total)
                if total is not None and done < total:
                    raise ConnectionError(f"connection closed after {done} of {total} bytes")
            os.replace(partial, destination)
            return destination
        except urllib.error.HTTPError as error:
            if error.code == 416 and offset:  # the partial file is already whole, or longer: start over
                partial.unlink(missing_ok=True)
                continue
            if 400 <= error.code < 500:
                raise DataUnavailable(f"{url}: HTTP {error.code} {error.reason}") from None
            cause = f"HTTP {error.code} {error.reason}"
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as error:
            cause = str(getattr(error, "reason", None) or error)
        delay = next(delays, None)
        if delay is None:
            raise DataUnavailable(f"{url}: still failing after {retry.attempts} attempts: {cause}")
        time.sleep(delay)


def _is_safe_member(name: str) -> bool:
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts and not name.startswith("\\")


def _refuse_unsafe(label: str, name: str, link: str | None = None) -> None:
    """DataUnavailable naming the member, when its path is unsafe or it is a link (`link` says which kind)."""
    if not _is_safe_member(name):
        raise DataUnavailable(f"{label}: refused unsafe member {name!r}")
    if link:
        raise DataUnavailable(f"{label}: refused unsafe member {name!r}: {link}; links are not unpacked from archives")


def _tar_link(member: tarfile.TarInfo) -> str | None:
    if member.issym():
        return f"a symbolic link to {member.linkname!r}"
    if member.islnk():
        return f"a hard link to {member.linkname!r}"
    return None


def _zip_link(member: zipfile.ZipInfo) -> str | None:
    return "a symbolic link" if (member.external_attr >> 16) & 0o170000 == 0o120000 else None


def unpack(archive: Path, target: Path, label: str | None = None) -> None:
    """Unpack a tar or zip archive into `target` (a new directory), refusing unsafe members and links.

    `label` names the archive in errors (its URL); default: the file name."""
    label = label or archive.name
    target.mkdir(parents=True)
    if tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():  # the data filter would strip a leading "/": refuse it instead
                _refuse_unsafe(label, member.name, _tar_link(member))
            try:
                tar.extractall(target, filter="data")
            except tarfile.FilterError as error:
                raise DataUnavailable(f"{label}: refused unsafe member: {error}") from None
    elif zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as bundle:
            for member in bundle.infolist():
                _refuse_unsafe(label, member.filename, _zip_link(member))
            bundle.extractall(target)
    else:
        raise DataUnavailable(f"{label}: not a tar or zip archive")


@contextlib.contextmanager
def volume_lock(directory: Path) -> Iterator[None]:
    """An exclusive lock that pods sharing `directory` (a ReadWriteMany volume) honour."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".pets-download.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _marker(url: str, checksum: Checksum) -> dict[str, str]:
    return {"url": url, checksum.algorithm: checksum.hexdigest}


def is_unpacked(target: Path, url: str, checksum: Checksum) -> bool:
    try:
        return json.loads((target / MARKER).read_text()) == _marker(url, checksum)
    except (OSError, ValueError):
        return False


def ensure_archive(url: str, checksum: Checksum, target: Path, *, headers: dict[str, str] | None = None,
                   retry: RetryPolicy = RetryPolicy(), progress: Progress | None = None) -> bool:
    """The archive's contents in `target`; True when this call downloaded it, False when it was there."""
    target = Path(target)
    with volume_lock(target.parent):
        if is_unpacked(target, url, checksum):
            return False
        work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            archive = download(url, target.parent / f".{target.name}.archive", headers=headers, retry=retry,
                               progress=progress)
            actual = checksum.of_file(archive)
            if actual != checksum.hexdigest:
                archive.unlink()
                raise DataUnavailable(f"{url}: {checksum.algorithm} is {actual}, expected {checksum.hexdigest}")
            unpacked = work / "contents"
            unpack(archive, unpacked, label=url)
            (unpacked / MARKER).write_text(json.dumps(_marker(url, checksum)))
            if target.exists():
                shutil.rmtree(target)  # an older archive, or a half-written one from before this code
            os.replace(unpacked, target)
            archive.unlink()
            return True
        finally:
            shutil.rmtree(work, ignore_errors=True)
