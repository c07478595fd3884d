"""One reconcile step's inputs and the status it builds up, condition by condition (pure)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..initialization import Initialization
from ..refusals import CreateFailure
from ..status import PodView, parse_timestamp, set_condition, timestamp
from .plan import Event

INITIALIZED = "Initialized"  # a job with downloads: False (Downloading) until pod 0 has them, then True
# Failed reasons for which the operator ends the group itself: its pods are stopped. A job whose worker
# failed keeps its pods (and their logs) until it is deleted or its TTL passes.
DEADLINE_EXCEEDED, CREATE_REFUSED, NAME_CONFLICT = "DeadlineExceeded", "CreateRefused", "NameConflict"
STOPS_THE_GROUP = (DEADLINE_EXCEEDED, CREATE_REFUSED, NAME_CONFLICT)
RESTART_BACKOFF_SECONDS = 10.0  # before the first group restart; doubling, as the Job controller's pod back-off
OWNED_STATUS_FIELDS = ("phase", "message", "conditions", "workers", "startTime", "completionTime", "restarts",
                       "attempt", "suspendedSeconds", "observedGeneration", "output")


def attempt_of(status: Mapping[str, Any] | None) -> int:
    """The group attempt the pods must belong to: status.attempt, else status.restarts (an older operator's)."""
    status = status or {}
    return int(status["attempt"] if status.get("attempt") is not None else status.get("restarts") or 0)


@dataclass
class Step:
    """`spec` has the defaults applied; `status` holds the operator-owned fields only and is what the step
    writes; `create_failure`: how the last creation of the current group's objects failed, None when it did
    not; `initialization`: what pod 0's log said of its downloads (the current attempt's); `mount_failures`:
    pod name -> the kubelet's last FailedMount message, for pods that wait for their volumes;
    `restart_backoff`: seconds before the first group restart (the operator's configuration)."""
    name: str
    spec: Mapping[str, Any]
    status: dict[str, Any]
    now: datetime
    pods: list[PodView]
    logs_drained: bool = True
    create_failure: CreateFailure | None = None
    initialization: Initialization = field(default_factory=Initialization)
    mount_failures: Mapping[str, str] = field(default_factory=dict)
    restart_backoff: float = RESTART_BACKOFF_SECONDS
    events: list[Event] = field(default_factory=list)  # posted with whatever plan this step ends in
    wake_at: datetime | None = None  # the deadline once it is known: reconcile again by then

    @classmethod
    def begin(cls, name: str, spec: Mapping[str, Any], status: Mapping[str, Any] | None, generation: int | None,
              now: datetime, pods: list[PodView], logs_drained: bool, create_failure: CreateFailure | None,
              initialization: Initialization, **observed: Any) -> Step:
        """`observed`: `mount_failures`, `restart_backoff` (see the class)."""
        owned = {key: value for key, value in (status or {}).items() if key in OWNED_STATUS_FIELDS}
        step = cls(name, spec, owned, now, pods, logs_drained, create_failure, initialization, **observed)
        step.status.setdefault("restarts", 0)
        step.status["attempt"] = attempt_of(step.status)
        if generation is not None:  # this step acts on that generation's spec (its mutable fields included)
            step.status["observedGeneration"] = generation
        if create_failure is not None and create_failure.attempt != step.attempt:
            step.create_failure = None  # an earlier group's
        return step

    @property
    def num_nodes(self) -> int:
        return int(self.spec["numNodes"])

    @property
    def attempt(self) -> int:
        return int(self.status["attempt"])

    def condition(self, type_: str, value: bool, reason: str, message: str, anew: bool = False) -> None:
        """`anew`: lastTransitionTime is now even when the value stays (a second restart begins)."""
        self.status["conditions"] = set_condition(self.status.get("conditions"), type_, value, reason, message, self.now)
        if anew:
            for condition in self.status["conditions"]:
                if condition["type"] == type_:
                    condition["lastTransitionTime"] = timestamp(self.now)

    def since(self, type_: str) -> datetime | None:
        """The lastTransitionTime of a condition that is True; None otherwise."""
        return next((parse_timestamp(c.get("lastTransitionTime")) for c in self.status.get("conditions") or []
                     if c.get("type") == type_ and c.get("status") == "True"), None)

    def failed_reason(self) -> str | None:
        return next((c.get("reason") for c in self.status.get("conditions") or []
                     if c.get("type") == "Failed" and c.get("status") == "True"), None)

    def clear(self, type_: str, reason: str, message: str) -> None:
        """Set a condition False only if it was ever reported."""
        if any(c.get("type") == type_ for c in self.status.get("conditions") or []):
            self.condition(type_, False, reason, message)

    def finish(self, phase: str, message: str) -> None:
        self.status.update(phase=phase, message=message)
        self.status.setdefault("completionTime", timestamp(self.now))

    def has(self, type_: str, value: bool, reason: str | None = None, message: str | None = None) -> bool:
        wanted = "True" if value else "False"
        return any(c.get("type") == type_ and c.get("status") == wanted
                   and (reason is None or c.get("reason") == reason) and (message is None or c.get("message") == message)
                   for c in self.status.get("conditions") or [])

    def announce(self, type_: str, value: bool, reason: str, message: str, event: Event) -> None:
        """Set a condition; post `event` only when the condition changes (a repeated step posts nothing)."""
        if not self.has(type_, value, reason, message):
            self.events.append(event)
        self.condition(type_, value, reason, message)

    def attempt_note(self) -> str:
        """Which group attempt runs, once there has been another one."""
        attempt, restarts = attempt_of(self.status), int(self.status.get("restarts") or 0)
        if not attempt:
            return ""
        return f" (attempt {attempt}, restart {restarts} of {int(self.spec.get('backoffLimit') or 0)})"

    def resumes(self) -> str:
        """How the next group attempt trains: from the checkpoint, or from the start."""
        return "resuming from the last checkpoint" if self.spec.get("checkpoint") is not None else \
            "no checkpoint: training starts again from epoch 0"
