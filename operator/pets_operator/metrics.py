"""Pod 0's metric lines -> `status.epochs` (pure).

The lines' format and which lines carry an event are `metric_lines`' (the trainer writes them
with the same module). Epochs are merged by epoch number, so re-reading a log, or a resumed group
re-reporting finished epochs, never doubles or loses an entry. An epoch read from a printed
`epoch N: P` line (the tutorial's) is kept only until a metric line reports that epoch, and never
replaces one: the metric line is the exact figure.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from pets_api.metric_lines import EPOCH, EVENT, PRINTED, parse_progress_lines


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def epoch_entry(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `status.epochs` item of an epoch event; None for other events or a malformed one."""
    if event.get(EVENT) != EPOCH:
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
    if event.get(PRINTED):
        entry[PRINTED] = True  # for merge_epochs only; epoch_status leaves it out of the status
    return entry


def epoch_entries(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The `status.epochs` items of the well-formed epoch events among `lines` (printed epoch lines too), in order."""
    return [entry for entry in map(epoch_entry, parse_progress_lines(lines)) if entry is not None]


def merge_epochs(known: Iterable[Mapping[str, Any]], new: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per epoch number, sorted; a later report of an epoch replaces the earlier one,
    except that a printed line never replaces an entry (it adds nothing to what a metric line said)."""
    by_epoch: dict[int, dict[str, Any]] = {}
    for entry in [*known, *new]:
        if entry.get(PRINTED) and int(entry["epoch"]) in by_epoch:
            continue
        by_epoch[int(entry["epoch"])] = dict(entry)
    return [by_epoch[epoch] for epoch in sorted(by_epoch)]


def epoch_status(epochs: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The status fields derived from the epochs: latest accuracy, best accuracy, epochs completed (from 1)."""
    if not epochs:
        return {"epochs": []}
    latest = max(epochs, key=lambda entry: entry["epoch"])
    return {
        "epochs": [{key: value for key, value in entry.items() if key != PRINTED} for entry in epochs],
        "accuracy": latest["accuracy"],
        "bestAccuracy": max(entry["accuracy"] for entry in epochs),
        "currentEpoch": latest["epoch"] + 1,
    }
