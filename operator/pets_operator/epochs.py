"""Epoch lines -> `status.epochs`: the entries and their merge (pure), and the job's epoch book.

The lines' format and which lines carry an event are `metric_lines`' (the trainer writes them
with the same module; `logfollow` reads them from pod 0's log and hands the entries here). Epochs
are merged by epoch number, so re-reading a log from its start (after an operator restart, or a
dropped connection) or a resumed group re-reporting finished epochs never doubles or loses one. An
epoch read from a printed `epoch N: P` line (the tutorial's) is kept only until a metric line
reports that epoch, and never replaces one: the metric line is the exact figure.

`EpochBook`: one per job. It starts from the epochs already in the job's status, patches only
changes (through the runner's `publish`), and is the only writer of the epoch fields of the
status (the runner asks it to clear them at a restart without a checkpoint, in the restart's own
status patch). It follows one group attempt (status.restarts) at a time and ignores lines of pods
of any other. At a restart with a checkpoint the finished epochs stay, as provisional: the new
group re-reports the ones its checkpoint holds (`"resumed": true`), and its first freshly trained
epoch drops those it did not re-report (they are trained again). Epochs at or beyond spec.epochs
are never kept (a log of a run with another epoch count). Its adds run in the API thread pool,
hence the locks: `_publishing` keeps the adds (and a new attempt) in order across their status
patch; `_lock` guards the state and is never held across an API call, because the runner's step
reads the book on the operator's event loop, and a step that waited for a patch in flight (seconds
on a busy API server) would stall every job's handling with it.
"""
from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pets_api.metric_lines import EPOCH, EVENT, PRINTED, parse_progress_lines

from .initialization import Initialization, fold
from .tracking import Tracking, fold_tracking

EPOCH_FIELDS = ("epochs", "accuracy", "bestAccuracy", "currentEpoch")


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


def epoch_fields(epochs: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The epoch fields of the status for `epochs`, as a merge patch: fields that no longer apply are removed (None)."""
    return {**{key: None for key in EPOCH_FIELDS}, **epoch_status(list(epochs))}


class EpochBook:
    """The job's epochs; `add` patches the status (through `publish`) when they change."""

    def __init__(self, known: Iterable[Mapping[str, Any]], publish: Callable[[dict[str, Any]], None],
                 attempt: int = 0, limit: int | None = None):
        """`attempt`: the group attempt whose lines count; `limit`: spec.epochs (entries from it on are dropped)."""
        self._limit = limit
        self._epochs = self._within(merge_epochs([], known))
        self._publish = publish
        self._lock = threading.Lock()  # the state below; held briefly, never across `publish`
        self._publishing = threading.Lock()  # one add (or new attempt) at a time, its patch included
        self.attempt = attempt
        self._provisional: set[int] = set()  # epochs of an earlier attempt, kept until the new one says otherwise
        self._initialization = Initialization()  # the current attempt's downloads, as pod 0 reports them
        self._tracking = Tracking()  # the current attempt's trackers, as pod 0 reports them

    @property
    def initialization(self) -> Initialization:
        with self._lock:
            return self._initialization

    def note_init(self, event: Mapping[str, Any], attempt: int | None = None) -> None:
        """An `init` / `initialized` line of group `attempt` (None: the current one); kept, not patched: the
        runner's next step turns it into the Initialized condition."""
        with self._lock:
            if attempt is None or attempt == self.attempt:
                self._initialization = fold(self._initialization, event)

    @property
    def tracking(self) -> Tracking:
        with self._lock:
            return self._tracking

    def note_tracking(self, event: Mapping[str, Any], attempt: int | None = None) -> None:
        """A `tracking` / `tracking_degraded` line of group `attempt` (None: the current one); kept, not patched:
        the runner's next step folds it into status.tracking and the TrackingDegraded condition."""
        with self._lock:
            if attempt is None or attempt == self.attempt:
                self._tracking = fold_tracking(self._tracking, event)

    def _within(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [e for e in entries if self._limit is None or int(e["epoch"]) < self._limit]

    @property
    def epochs(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(entry) for entry in self._epochs]

    def add(self, entries: list[dict[str, Any]], attempt: int | None = None, resumed: bool = False) -> bool:
        """Merge epoch entries of group `attempt` (None: the current one); `resumed`: re-reported from a checkpoint."""
        entries = self._within(entries)
        if not entries:
            return False
        with self._publishing:  # held while publishing, so patches leave in the order the epochs came
            with self._lock:
                if attempt is not None and attempt != self.attempt:
                    return False  # a log of an earlier (or, briefly, a later) group
                known, provisional = self._epochs, self._provisional
                if not resumed and provisional:  # the new group trains again what it did not re-report
                    known = [e for e in known if int(e["epoch"]) not in provisional]
                    provisional = set()
                merged = merge_epochs(known, entries)
                provisional = provisional - {int(e["epoch"]) for e in entries}
                if merged == self._epochs:
                    self._provisional = provisional
                    return False
            # Without the state's lock: readers (the runner's step, on the event loop) do not wait for the patch.
            self._publish(epoch_fields(merged))  # raises when the patch fails: nothing recorded, a re-read retries
            with self._lock:
                self._epochs, self._provisional = merged, provisional
            return True

    def start_attempt(self, attempt: int, keep: bool) -> None:
        """From now on only `attempt`'s lines count. `keep=False`: the epochs are gone (the runner clears the
        status fields in its restart patch); `keep=True`: they stay until the new group's lines replace them."""
        with self._publishing, self._lock:  # after an add in flight, whose attempt it checked
            self.attempt = attempt
            self._initialization = Initialization()  # the new group downloads (or finds its cache) anew
            self._tracking = Tracking()  # and starts runs of its own
            if keep:
                self._provisional = {int(e["epoch"]) for e in self._epochs}
            else:
                self._epochs, self._provisional = [], set()

    def fields(self) -> dict[str, Any]:
        """The epoch fields of the status as the book has them (for a status that disagrees, e.g. over the limit)."""
        with self._lock:
            return epoch_fields(self._epochs)
