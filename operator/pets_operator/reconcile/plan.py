"""What one reconcile step decides: the status to write, the objects to create and delete, the events (pure)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass
class Plan:
    status: dict[str, Any]  # the operator-owned status fields (OWNED_STATUS_FIELDS) after this step
    create_pods: list[int] = field(default_factory=list)  # indexes, current attempt; with the Service
    delete_pods: list[str] = field(default_factory=list)
    delete_job: bool = False
    events: list[Event] = field(default_factory=list)
    finished: bool = False  # nothing left to do, ever
    wake_at: datetime | None = None  # reconcile again by then even if nothing changes
    new_attempt: int | None = None  # this step starts group attempt N (a restart): the runner re-aims its epoch book
    clear_epochs: bool = False  # with new_attempt: no checkpoint to resume from, the finished epochs go
