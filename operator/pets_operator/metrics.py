"""Pod 0's metric lines -> `status.epochs` (pure).

A log line holds an event when it contains a JSON object with an `"event"` key; a prefix before
the object (a timestamp, a `[rank0]:` tag) is tolerated and every other line is skipped.
Epochs are merged by epoch number, so re-reading a log, or a resumed group re-reporting finished
epochs, never doubles or loses an entry.
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterable, Mapping


def parse_event(line: str) -> dict[str, Any] | None:
    start = line.find("{")
    if start < 0:
        return None
    try:
        value = json.loads(line[start:].strip())
    except (json.JSONDecodeError, ValueError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("event"), str):
        return None
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def epoch_entry(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `status.epochs` item of an epoch event; None for other events or a malformed one."""
    if event.get("event") != "epoch":
        return None
    epoch = event.get("epoch")
    accuracy = _number(event.get("accuracy"))
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0 or accuracy is None:
        return None
    entry: dict[str, Any] = {"epoch": epoch, "accuracy": accuracy}
    for source, target in (("train_loss", "trainLoss"), ("seconds", "seconds")):
        number = _number(event.get(source))
        if number is not None:
            entry[target] = number
    return entry


def epoch_entries(lines: Iterable[str]) -> list[dict[str, Any]]:
    entries = []
    for line in lines:
        event = parse_event(line)
        entry = epoch_entry(event) if event else None
        if entry:
            entries.append(entry)
    return entries


def merge_epochs(known: Iterable[Mapping[str, Any]], new: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per epoch number, sorted; a later report of an epoch replaces the earlier one."""
    by_epoch: dict[int, dict[str, Any]] = {}
    for entry in [*known, *new]:
        by_epoch[int(entry["epoch"])] = dict(entry)
    return [by_epoch[epoch] for epoch in sorted(by_epoch)]


def epoch_status(epochs: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The status fields derived from the epochs: latest accuracy, best accuracy, current epoch."""
    if not epochs:
        return {"epochs": []}
    latest = max(epochs, key=lambda entry: entry["epoch"])
    return {
        "epochs": [dict(entry) for entry in epochs],
        "accuracy": latest["accuracy"],
        "bestAccuracy": max(entry["accuracy"] for entry in epochs),
        "currentEpoch": latest["epoch"],
    }
