"""Pod log files, shared by the kubelet (writes) and the API server (serves `/pods/{name}/log`).

One file per container under `<root>/<namespace>_<pod>_<uid>/<container>.log` (as in
/var/log/pods), each line prefixed by its RFC 3339 timestamp and a space, so `sinceTime`,
`sinceSeconds` and `timestamps` can be answered from the file alone.
"""
from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any, Iterable


def pod_log_dir(root: Path, pod: dict[str, Any]) -> Path:
    meta = pod["metadata"]
    return root / f"{meta.get('namespace', 'default')}_{meta['name']}_{meta['uid']}"


def container_log_path(root: Path, pod: dict[str, Any], container: str) -> Path:
    return pod_log_dir(root, pod) / f"{container}.log"


def timestamp(moment: datetime.datetime | None = None) -> str:
    moment = moment or datetime.datetime.now(datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def parse_time(value: str) -> datetime.datetime:
    """RFC 3339 with or without (nano)seconds fractions."""
    text = value.strip().replace("Z", "+00:00")
    if "." in text:
        head, rest = text.split(".", 1)
        digits = "".join(c for c in rest if c.isdigit())
        zone = rest[len(digits):]
        text = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    parsed = datetime.datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def format_line(text: str) -> str:
    return f"{timestamp()} {text.rstrip(chr(10))}\n"


def split_line(line: str) -> tuple[datetime.datetime | None, str]:
    stamp, _, text = line.partition(" ")
    try:
        return parse_time(stamp), text
    except ValueError:
        return None, line


def select_lines(lines: Iterable[str], since: datetime.datetime | None = None, tail: int | None = None) -> list[str]:
    chosen = [line for line in lines if since is None or (split_line(line)[0] or since) >= since]
    if tail is not None:
        chosen = chosen[-tail:] if tail > 0 else []
    return chosen


def render(line: str, timestamps: bool) -> str:
    return line if timestamps else split_line(line)[1]
