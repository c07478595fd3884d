"""Pod log files: the kubelet writes them; the emulated API server and the kubelet API serve them.

Both serve by the rules here (`LogOptions`, `stream`, `container_finished`): the emulated API
server's `/pods/{name}/log` and the kubelet API's `/containerLogs`, which kube-apiserver proxies.

One file per container under `<root>/<namespace>_<pod>_<uid>/<container>.log` (as in
/var/log/pods), each line prefixed by its RFC 3339 timestamp and a space, so `sinceTime`,
`sinceSeconds` and `timestamps` can be answered from the file alone.
"""
from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .storage import TERMINAL_POD_PHASES


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


# --- serving a container's log: the rules of GET .../pods/{name}/log and the kubelet's /containerLogs ---

POLL_INTERVAL = 0.1  # how often a followed log file is read again


def _flag(query: Mapping[str, str], name: str) -> bool:
    return str(query.get(name, "")).lower() in ("true", "1")


def _count(query: Mapping[str, str], name: str, minimum: int) -> int | None:
    text = query.get(name)
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"invalid {name} {text!r}: not an integer") from None
    if value < minimum:
        raise ValueError(f"invalid {name} {value}: must be {'positive' if minimum else 'non-negative'}")
    return value


@dataclass(frozen=True)
class LogOptions:
    """What a log request asks for (the query of `PodLogOptions`)."""
    since: datetime.datetime | None = None
    tail: int | None = None
    limit: int | None = None
    timestamps: bool = False
    follow: bool = False
    previous: bool = False

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> LogOptions:
        """ValueError with the message for a bad value."""
        since = None
        if query.get("sinceTime"):
            try:
                since = parse_time(query["sinceTime"])
            except ValueError:
                raise ValueError(f"invalid sinceTime {query['sinceTime']!r}") from None
        else:
            seconds = _count(query, "sinceSeconds", 1)
            if seconds is not None:
                since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=seconds)
        return cls(since=since, tail=_count(query, "tailLines", 0), limit=_count(query, "limitBytes", 1),
                   timestamps=_flag(query, "timestamps"), follow=_flag(query, "follow"), previous=_flag(query, "previous"))


async def stream(path: Path, options: LogOptions, write: Callable[[bytes], Awaitable[object]],
                 finished: Callable[[], bool], closing: asyncio.Event | None = None) -> None:
    """Write the log file at `path` as `options` select it. Following, new complete lines go out as
    they are written, until `finished()` says the container will write no more (then the rest goes
    out), `limitBytes` is reached, or `closing` is set (the server stops)."""
    sent = 0

    async def emit(lines: list[str]) -> bool:
        nonlocal sent
        data = "".join(render(line, options.timestamps) for line in lines).encode()
        if options.limit is not None:
            data = data[: max(0, options.limit - sent)]
        sent += len(data)
        if data:
            await write(data)
        return options.limit is None or sent < options.limit

    with path.open("r", encoding="utf-8", errors="replace") as source:
        existing = source.readlines()
        pending = existing[-1] if existing and not existing[-1].endswith("\n") else ""
        complete = existing[:-1] if pending else existing
        if not await emit(select_lines(complete, options.since, options.tail)) or not options.follow:
            if not options.follow and pending:
                await emit([pending])
            return
        while closing is None or not closing.is_set():
            chunk = source.readline()
            if chunk:
                pending += chunk
                if pending.endswith("\n"):
                    if not await emit(select_lines([pending], options.since)):
                        return
                    pending = ""
                continue
            if finished():
                rest = source.read()
                if pending or rest:
                    await emit(select_lines((pending + rest).splitlines(keepends=True), options.since))
                return
            await asyncio.sleep(POLL_INTERVAL)


def container_finished(pod: Mapping[str, Any] | None, uid: str, container: str) -> bool:
    """Whether a container's log is complete: its pod (`pod`, as now known; None when gone) is gone or
    another of that name, finished, or the container stopped for good."""
    if pod is None or pod["metadata"]["uid"] != uid:
        return True
    status = pod.get("status") or {}
    if status.get("phase") in TERMINAL_POD_PHASES:
        return True
    for entry in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        if entry.get("name") == container and "terminated" in (entry.get("state") or {}):
            return pod["spec"].get("restartPolicy") == "Never" or bool(pod["metadata"].get("deletionTimestamp"))
    return False
