"""Pods the operator created that its pod index has not shown yet: not created again meanwhile (pure).

Kubernetes' own controllers keep such "expectations" (ReplicaSet, Job): a controller that reacts to
its cache creates a pod, and until the watch delivers it the cache says the pod is missing. Without
them, a job's runner that steps again before the index has caught up creates the whole group again
(Service, NetworkPolicy, pods: all answered 409 AlreadyExists). On a loaded cluster the index lags by
seconds, each step re-creates, and the extra requests load the API server further: at 300 jobs that was
9 creations of each job's group (benchmarks/operator_scale.py). A pod is expected from its creation
(created, or found existing) until the index shows it, or for `EXPECTATION_SECONDS` at most, after which
it is created again (it may have been deleted before the index ever saw it).
"""
from __future__ import annotations

from collections.abc import Iterable

EXPECTATION_SECONDS = 30.0


class Expectations:
    """(attempt, index) -> when its pod was created; one per job runner."""

    def __init__(self, timeout: float = EXPECTATION_SECONDS):
        self.timeout = timeout
        self._created: dict[tuple[int, int], float] = {}

    def created(self, attempt: int, indexes: Iterable[int], now: float) -> None:
        for index in indexes:
            self._created[(attempt, index)] = now

    def seen(self, pods: Iterable[tuple[int, int]]) -> None:
        """The index shows these (attempt, index) pods: nothing is expected of them any more."""
        for key in pods:
            self._created.pop(key, None)

    def to_create(self, attempt: int, missing: Iterable[int], now: float) -> list[int]:
        """The missing indexes to create now: those not created within the timeout (other attempts' are forgotten)."""
        self._created = {key: at for key, at in self._created.items() if key[0] == attempt and now - at < self.timeout}
        return [index for index in missing if (attempt, index) not in self._created]
