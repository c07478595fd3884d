"""A pod's volumes as local paths: hostPath type checks as the kubelet makes them, read-only mounts.

hostPath `type` (pkg/volume/hostpath in the kubelet):
- `DirectoryOrCreate`: created (0755, with parents) when missing, else it must be a directory;
- `Directory`: must exist and be a directory;
- `FileOrCreate`: created empty (0644) when missing (its directory must exist), else must not be a directory;
- `File`: must exist and not be a directory;
- `Socket`, `CharDevice`, `BlockDevice`: must exist and be one;
- `""` (unset): no check; a missing path is created as a directory, as containerd does for a bind
  mount source.
A failed check is a `MountError` with the kubelet's message; the kubelet posts it as a
`FailedMount` Warning Event and retries, the pod staying `ContainerCreating`.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

# Volume sources a kubelet always mounts read-only.
ALWAYS_READ_ONLY = ("configMap", "secret", "downwardAPI", "projected")


class MountError(Exception):
    def __init__(self, volume: str, message: str):
        super().__init__(message)
        self.volume = volume
        self.message = message

    @property
    def event_message(self) -> str:
        return f'MountVolume.SetUp failed for volume "{self.volume}" : {self.message}'


def _exists(path: Path) -> bool:
    return os.path.lexists(path) and path.exists()


def check_host_path(volume: str, path: Path, kind: str) -> None:
    """Raise MountError where the kubelet's hostPath type check fails; create what the *OrCreate types create."""
    def failed(what: str) -> MountError:
        return MountError(volume, f"hostPath type check failed: {path} is not {what}")

    def mode() -> int | None:
        try:
            return os.stat(path).st_mode
        except OSError:
            return None

    if kind in ("", None):
        if not _exists(path):
            try:
                path.mkdir(mode=0o755, parents=True, exist_ok=True)
            except OSError as error:
                raise MountError(volume, f"mkdir {path}: {error.strerror}") from None
        return
    if kind == "DirectoryOrCreate":
        if not _exists(path):
            try:
                path.mkdir(mode=0o755, parents=True, exist_ok=True)
            except OSError as error:
                raise MountError(volume, f"mkdir {path}: {error.strerror}") from None
            return
        kind = "Directory"
    if kind == "FileOrCreate":
        if not _exists(path):
            try:
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
            except OSError as error:
                raise MountError(volume, f"open {path}: {(error.strerror or str(error)).lower()}") from None
            return
        kind = "File"
    found = mode()
    checks = {
        "Directory": (lambda m: stat.S_ISDIR(m), "a directory"),
        "File": (lambda m: not stat.S_ISDIR(m), "a file"),
        "Socket": (lambda m: stat.S_ISSOCK(m), "a socket file"),
        "CharDevice": (lambda m: stat.S_ISCHR(m), "a character device"),
        "BlockDevice": (lambda m: stat.S_ISBLK(m), "a block device"),
    }
    if kind not in checks:
        raise MountError(volume, f"{kind} is an invalid volume type")
    test, what = checks[kind]
    if found is None or not test(found):
        raise failed(what)


def is_read_only(volume: dict[str, Any], mount: dict[str, Any]) -> bool:
    """Whether a container sees this mount read-only: asked by the mount, by a read-only claim, or by the source."""
    if mount.get("readOnly"):
        return True
    if (volume.get("persistentVolumeClaim") or {}).get("readOnly"):
        return True
    return any(source in volume for source in ALWAYS_READ_ONLY)
