"""The metric lines, written once: the trainer prints them, the operator reads them (pure, stdlib only).

The trainer image ships this package's source without the operator's dependencies, so this
module imports nothing but the standard library.

Global rank 0 prints one JSON object per line on stdout, flushed at once:

    {"event": "epoch", "epoch": 0, "accuracy": 0.8812, "train_loss": 0.41, "seconds": 12.3}
    {"event": "done", "epochs": 2, "accuracy": 0.9, "best_accuracy": 0.91}

Before training, `pets-train` prints its downloads' progress (`pets_trainer.prepare`), then that they are done:

    {"event": "init", "artefact": "data", "source": "https://.../images.tar.gz", "done": 1048576, "total": 791918971}
    {"event": "initialized"}

With spec.tracking, the main process says where each of its trackers logs once it has started, and
when one fails (it logs nothing more; the training goes on):

    {"event": "tracking", "tracker": "mlflow", "run_id": "3f2a...", "experiment_id": "1", "run_name": "pets",
     "tracking_uri": "http://mlflow:5000", "url": "http://mlflow:5000/#/experiments/1/runs/3f2a..."}
    {"event": "tracking", "tracker": "tensorboard", "log_dir": "/output/tensorboard/pets"}
    {"event": "tracking_degraded", "tracker": "mlflow", "cause": "API request to ... failed: Connection refused"}

A line holds an event when the text from its first `{` on is one JSON object with a string
`"event"`. Text before the object is tolerated (a timestamp, a `[rank0]:` tag that a launcher
may put on a process's output); every other line (human text, warnings) is skipped. Epoch events may
carry more fields than these (`train_seconds`, `eval_seconds`, `resumed`); readers ignore them.

The operator also reads the tutorial's own progress line, `accelerator.print(f"epoch {epoch}:
{100 * eval_metric:.2f}")`, so a function shipped from a notebook reports its accuracy unchanged:
a line that ends in `epoch <N>: <percent>` (`epoch 0: 88.12`, also behind a `[rank0]:` tag or a
timestamp) is an epoch event `{"event": "epoch", "epoch": 0, "accuracy": 0.8812, "printed": true}`
(`parse_progress_line`). The JSON line of the same epoch, when there is one, is the exact figure and
wins (`pets_operator.epochs.merge_epochs`).
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

EVENT = "event"  # the key that makes a JSON object a metric event
EPOCH = "epoch"  # one finished epoch: epoch (from 0), accuracy, train_loss, seconds
DONE = "done"  # the end of training: epochs, accuracy (the last epoch's), best_accuracy
INIT = "init"  # download progress before training: artefact (data, model), source, done, total (bytes; None)
INITIALIZED = "initialized"  # the downloads are done (or there were none to do)
TRACKING = "tracking"  # a tracker started: tracker (mlflow, tensorboard) and where it logs (run id, URL, log dir)
TRACKING_DEGRADED = "tracking_degraded"  # a tracker failed and logs nothing more: tracker, cause
PRINTED = "printed"  # marks an epoch event read from a plain `epoch N: P` line (two decimals of a percent)
# The tutorial's `epoch 0: 88.12`: the whole rest of the line, after the start, a space, `:` or `]`.
_PRINTED_EPOCH = re.compile(r"(?:^|[\s:\]])epoch\s+(\d+)\s*:\s*(\d+(?:\.\d*)?)\s*%?\s*$", re.IGNORECASE)


def epoch_event(epoch: int, accuracy: float, train_loss: float, seconds: float, **extra: Any) -> dict[str, Any]:
    return {EVENT: EPOCH, "epoch": epoch, "accuracy": accuracy, "train_loss": train_loss, "seconds": seconds,
            **extra}


def done_event(epochs: int, accuracy: float | None, best_accuracy: float | None) -> dict[str, Any]:
    return {EVENT: DONE, "epochs": epochs, "accuracy": accuracy, "best_accuracy": best_accuracy}


def init_event(artefact: str, source: str, done: int, total: int | None) -> dict[str, Any]:
    return {EVENT: INIT, "artefact": artefact, "source": source, "done": done, "total": total}


def initialized_event() -> dict[str, Any]:
    return {EVENT: INITIALIZED}


def tracking_event(tracker: str, **where: Any) -> dict[str, Any]:
    return {EVENT: TRACKING, "tracker": tracker, **where}


def tracking_degraded_event(tracker: str, cause: str) -> dict[str, Any]:
    return {EVENT: TRACKING_DEGRADED, "tracker": tracker, "cause": cause}


def format_line(event: Mapping[str, Any]) -> str:
    """The line (without its newline) that carries `event`."""
    if not isinstance(event.get(EVENT), str):
        raise ValueError(f"a metric event needs a string {EVENT!r}: {event!r}")
    return json.dumps(dict(event))  # no indent: always one line


def parse_line(line: str) -> dict[str, Any] | None:
    """The event a log line carries, or None for any other line."""
    start = line.find("{")
    if start < 0:
        return None
    try:
        value = json.loads(line[start:].strip())
    except ValueError:  # json.JSONDecodeError included
        return None
    if not isinstance(value, dict) or not isinstance(value.get(EVENT), str):
        return None
    return value


def parse_lines(lines: str | Iterable[str]) -> list[dict[str, Any]]:
    """The events of a log, given as one text or as lines, in order."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    return [event for event in map(parse_line, lines) if event is not None]


def parse_printed_epoch(line: str) -> dict[str, Any] | None:
    """The epoch event of a tutorial-style `epoch 0: 88.12` line (accuracy in percent), or None."""
    text = line.rsplit("\r", 1)[-1]  # a progress bar may have drawn over the start of the line
    match = _PRINTED_EPOCH.search(text)
    if match is None:
        return None
    percent = float(match.group(2))
    if not 0.0 <= percent <= 100.0:
        return None
    return {EVENT: EPOCH, "epoch": int(match.group(1)), "accuracy": round(percent / 100.0, 6), PRINTED: True}


def parse_progress_line(line: str) -> dict[str, Any] | None:
    """What the operator takes from a log line: its JSON event, else a printed epoch line's event."""
    event = parse_line(line)
    return event if event is not None else parse_printed_epoch(line)


def parse_progress_lines(lines: str | Iterable[str]) -> list[dict[str, Any]]:
    """`parse_progress_line` over a log, given as one text or as lines, in order."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    return [event for event in map(parse_progress_line, lines) if event is not None]


class LineSplitter:
    """Complete text lines of a byte stream fed in chunks; `rest()` is the last line without its newline."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[str]:
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        return [line.decode("utf-8", errors="replace") for line in lines]

    def rest(self) -> list[str]:
        pending, self._pending = self._pending, b""
        return [pending.decode("utf-8", errors="replace")] if pending else []


def split_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Complete text lines of a byte stream; a last line without newline is yielded at the end."""
    splitter = LineSplitter()
    for chunk in chunks:
        yield from splitter.feed(chunk)
    yield from splitter.rest()
