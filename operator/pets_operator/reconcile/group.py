"""The job's pods sorted once per step: the current attempt's by index, the stale, the missing, the lost (pure)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..status import PodView


@dataclass(frozen=True)
class Group:
    current: dict[int, PodView]  # index -> the pod of the current attempt, in the order the pods came
    stale: list[PodView]  # of another attempt, or not of the group at all: they go before the group is created
    missing: list[int]  # indexes of the current attempt without a pod
    taken: list[PodView]  # deleted before they finished, by someone else (the operator deletes them only at the end)
    failed: list[PodView]

    @classmethod
    def of(cls, pods: list[PodView], attempt: int, num_nodes: int) -> Group:
        current = {p.index: p for p in pods if p.attempt == attempt and 0 <= p.index < num_nodes}
        return cls(current=current,
                   stale=[p for p in pods if current.get(p.index) is not p],
                   missing=[index for index in range(num_nodes) if index not in current],
                   taken=_by_index(p for p in current.values() if p.deleting and not p.succeeded),
                   failed=_by_index(p for p in current.values() if p.failed))

    @property
    def done(self) -> bool:
        """Every pod of the attempt exists and succeeded."""
        return not self.missing and all(p.succeeded for p in self.current.values())


def _by_index(pods: Iterable[PodView]) -> list[PodView]:
    return sorted(pods, key=lambda p: p.index)


def alive(pods: Iterable[PodView]) -> list[str]:
    """Names of the pods still running or waiting (not finished, not already being deleted)."""
    return [p.name for p in pods if not p.finished and not p.deleting]


def not_deleting(pods: Iterable[PodView]) -> list[str]:
    """Names of the pods not already being deleted, finished ones too (a new group needs their names)."""
    return [p.name for p in pods if not p.deleting]
