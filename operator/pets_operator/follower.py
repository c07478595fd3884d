"""Pod 0's log -> `status.epochs`, live: one epoch book per job; a thread per followed pod (the `threads` follower).

The operator follows logs on its event loop (`logstreams.py`) unless PETS_OPERATOR_LOG_FOLLOWER=threads
selects `PodLogFollower` here: a thread and a blocking connection per followed pod, the design before,
kept as the baseline of benchmarks/operator_scale.py. Both feed the same `EpochBook`.

The book starts from the epochs already in the job's status and merges every epoch line by
epoch number, so re-reading a log from its start (after an operator restart, or a dropped
connection) or a resumed group re-reporting epochs never doubles or loses one. Only changes
are patched, and this is the only writer of the epoch fields of the status (the runner asks it
to clear them at a restart without a checkpoint, in the restart's own status patch).

Group attempts: the book follows one attempt (status.restarts) at a time and ignores lines of
pods of any other. At a restart with a checkpoint the finished epochs stay, as provisional: the
new group re-reports the ones its checkpoint holds (`"resumed": true`), and its first freshly
trained epoch drops those it did not re-report (they are trained again). Epochs at or beyond
spec.epochs are never kept (a log of a run with another epoch count).
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterable, Iterator, Mapping

from .initialization import Initialization, fold, is_init_event
from pets_api.metric_lines import parse_progress_lines, split_lines
from .metrics import epoch_entry, epoch_status, merge_epochs
from .status import FINAL_PHASES
from .tracking import Tracking, fold_tracking, is_tracking_event

RETRY_SECONDS = 0.5
READ_SIZE = 65536
MAX_FAILURES = 120  # x RETRY_SECONDS: give up on a log that never becomes readable

log = logging.getLogger(__name__)
EPOCH_FIELDS = ("epochs", "accuracy", "bestAccuracy", "currentEpoch")


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
        self._lock = threading.Lock()
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
        with self._lock:  # held while publishing, so patches leave in the order the epochs came
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
            self._publish(epoch_fields(merged))  # raises when the patch fails: nothing recorded, a re-read retries
            self._epochs, self._provisional = merged, provisional
            return True

    def start_attempt(self, attempt: int, keep: bool) -> None:
        """From now on only `attempt`'s lines count. `keep=False`: the epochs are gone (the runner clears the
        status fields in its restart patch); `keep=True`: they stay until the new group's lines replace them."""
        with self._lock:
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


def _chunks(response) -> Iterator[bytes]:
    while True:
        chunk = response.read1(READ_SIZE)  # returns as soon as some bytes are there
        if not chunk:
            return
        yield chunk


class PodLogFollower:
    """Follows one pod (by uid) from the start of its log until its container has ended.

    `open_log()` returns a streaming response; `pod_state()` returns (uid, phase) of the pod by
    name, or None when it is gone. `on_drained` is called once the whole log has been read.
    """

    def __init__(self, uid: str, open_log: Callable[[], Any], pod_state: Callable[[], tuple[str, str] | None],
                 book: EpochBook, on_drained: Callable[[], None], name: str = "", attempt: int | None = None):
        self.uid = uid
        self.attempt = attempt
        self._open_log = open_log
        self._pod_state = pod_state
        self._book = book
        self._on_drained = on_drained
        self._stop = threading.Event()
        self._response = None
        self.drained = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"log-{name or uid}", daemon=True)

    def start(self) -> "PodLogFollower":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            try:
                response.close()  # unblocks the reading thread
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _container_ended(self) -> bool:
        state = self._pod_state()
        return state is None or state[0] != self.uid or state[1] in FINAL_PHASES

    def _pod_gone(self) -> bool:
        state = self._pod_state()
        return state is None or state[0] != self.uid

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._response = self._open_log()
                try:
                    for line in split_lines(_chunks(self._response)):
                        self._read(line)
                finally:
                    self._response.release_conn()
                    self._response = None
                # The server ends a followed log when the container ends, or when a connection drops.
                if self._container_ended():
                    break
            except Exception as error:  # noqa: BLE001 - an unreachable log is retried, never fatal
                failures += 1
                if self._stop.is_set():  # stop() closed the stream under the reader: nothing went wrong
                    log.debug("stopped following pod %s", self.uid)
                    break
                if failures >= MAX_FAILURES or self._gone_quietly():
                    log.info("stopped following pod %s: %s", self.uid, error)
                    break
                log.debug("log of pod %s not readable yet: %s", self.uid, error)
            self._stop.wait(RETRY_SECONDS)
        self.drained.set()
        self._on_drained()

    def _read(self, line: str) -> None:
        for event in parse_progress_lines([line]):  # JSON metric lines and printed `epoch N: P` lines
            if is_init_event(event):
                self._book.note_init(event, attempt=self.attempt)
                continue
            if is_tracking_event(event):
                self._book.note_tracking(event, attempt=self.attempt)
                continue
            entry = epoch_entry(event)
            if entry is not None:
                self._book.add([entry], attempt=self.attempt, resumed=bool(event.get("resumed")))

    def _gone_quietly(self) -> bool:
        try:
            return self._pod_gone()
        except Exception:  # noqa: BLE001 - the API is unreachable too: keep trying
            return False
