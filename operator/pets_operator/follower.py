"""Pod 0's log -> `status.epochs`, live: one thread per followed pod, one epoch book per job.

The book starts from the epochs already in the job's status and merges every epoch line by
epoch number, so re-reading a log from its start (after an operator restart, or a dropped
connection) or a resumed group re-reporting epochs never doubles or loses one. Only changes
are patched, and this is the only writer of the epoch fields of the status.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterable, Iterator, Mapping

from .metrics import epoch_entries, epoch_status, merge_epochs
from .status import FINAL_PHASES

RETRY_SECONDS = 0.5
READ_SIZE = 65536
MAX_FAILURES = 120  # x RETRY_SECONDS: give up on a log that never becomes readable

log = logging.getLogger(__name__)


class EpochBook:
    """The job's epochs; `add` patches the status (through `publish`) when they change."""

    def __init__(self, known: Iterable[Mapping[str, Any]], publish: Callable[[dict[str, Any]], None]):
        self._epochs = merge_epochs([], known)
        self._publish = publish
        self._lock = threading.Lock()

    @property
    def epochs(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(entry) for entry in self._epochs]

    def add(self, entries: list[dict[str, Any]]) -> bool:
        if not entries:
            return False
        with self._lock:  # held while publishing, so patches leave in the order the epochs came
            merged = merge_epochs(self._epochs, entries)
            if merged == self._epochs:
                return False
            self._epochs = merged
            self._publish(epoch_status(merged))
            return True


def split_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Complete text lines of a byte stream; a last line without newline is yielded at the end."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", errors="replace")
    if pending:
        yield pending.decode("utf-8", errors="replace")


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
                 book: EpochBook, on_drained: Callable[[], None], name: str = ""):
        self.uid = uid
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
                        self._book.add(epoch_entries([line]))
                finally:
                    self._response.release_conn()
                    self._response = None
                # The server ends a followed log when the container ends, or when a connection drops.
                if self._container_ended():
                    break
            except Exception as error:  # noqa: BLE001 - an unreachable log is retried, never fatal
                failures += 1
                if self._stop.is_set() or failures >= MAX_FAILURES or self._gone_quietly():
                    log.info("stopped following pod %s: %s", self.uid, error)
                    break
                log.debug("log of pod %s not readable yet: %s", self.uid, error)
            self._stop.wait(RETRY_SECONDS)
        self.drained.set()
        self._on_drained()

    def _gone_quietly(self) -> bool:
        try:
            return self._pod_gone()
        except Exception:  # noqa: BLE001 - the API is unreachable too: keep trying
            return False
