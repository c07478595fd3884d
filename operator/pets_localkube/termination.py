"""Containers' termination messages: the file at `terminationMessagePath`, or the log's tail.

As the kubelet does: each container gets an empty file for its `terminationMessagePath` (default
/dev/termination-log; here a file in the pod directory that the path maps to, like a volume
mount, so env values naming it point at it), and when the container ends its content (up to
4096 bytes) is `state.terminated.message`. With `terminationMessagePolicy: FallbackToLogsOnError`
a failed container that wrote nothing gets the tail of its log instead (80 lines or 2048 bytes,
whichever is less).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from . import logs

DEFAULT_PATH = "/dev/termination-log"
FALLBACK_POLICY = "FallbackToLogsOnError"
MESSAGE_LIMIT = 4096
FALLBACK_LINES, FALLBACK_BYTES = 80, 2048


def container_path(container: dict[str, Any]) -> str:
    return container.get("terminationMessagePath") or DEFAULT_PATH


def local_file(pod_dir: Path, container_name: str) -> Path:
    return pod_dir / "termination-log" / container_name


def prepare(local: Path) -> None:
    """An empty message file before each run of the container."""
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(b"")


def read_message(container: dict[str, Any], local: Path, log_path: Path, log_offset: int, exit_code: int) -> str | None:
    """The container's termination message after a run whose log started at `log_offset`; None when empty."""
    try:
        data = local.read_bytes()[:MESSAGE_LIMIT]
    except OSError:
        data = b""
    text = data.decode("utf-8", errors="replace")
    if not text.strip() and exit_code != 0 and container.get("terminationMessagePolicy") == FALLBACK_POLICY:
        text = log_tail(log_path, log_offset)
    return text if text.strip() else None


def log_tail(log_path: Path, offset: int = 0) -> str:
    """The last lines of the log written since `offset`, without the timestamps of the log file."""
    try:
        with log_path.open("rb") as stream:
            stream.seek(offset)
            data = stream.read()
    except OSError:
        return ""
    lines = [logs.split_line(line)[1] for line in data.decode("utf-8", errors="replace").splitlines()]
    tail = "\n".join(lines[-FALLBACK_LINES:])
    return tail.encode("utf-8")[-FALLBACK_BYTES:].decode("utf-8", errors="ignore")
