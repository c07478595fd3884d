"""One step of a PetsTrainingJob's life: (spec, status, pods, now) -> what to do (pure, no IO).

The job daemon calls `reconcile` whenever something may have changed and carries out the plan;
every plan is safe to carry out twice, so an operator restart at any point, or a repeated step,
never makes a duplicate pod or a second group.

Group attempts: `status.restarts` is the attempt number the pods must carry in their
`training.pets.dev/attempt` label. A pod of another attempt is stale: it is deleted and the
current group is only created once all stale pods are gone (pod names are stable).

Conditions: Created and Restarting, and Running, Succeeded and Failed, which are named after (and
written with) the phase they report.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping

from . import names
from .status import (FAILED, FINAL_PHASES, PENDING, RUNNING, SUCCEEDED, PodView, parse_timestamp, set_condition,
                     timestamp, workers)

OWNED_STATUS_FIELDS = ("phase", "message", "conditions", "workers", "startTime", "completionTime", "restarts",
                       "observedGeneration")


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


@dataclass
class _Step:
    status: dict[str, Any]
    now: datetime

    def condition(self, type_: str, value: bool, reason: str, message: str) -> None:
        self.status["conditions"] = set_condition(self.status.get("conditions"), type_, value, reason, message, self.now)

    def clear(self, type_: str, reason: str, message: str) -> None:
        """Set a condition False only if it was ever reported."""
        if any(c.get("type") == type_ for c in self.status.get("conditions") or []):
            self.condition(type_, False, reason, message)

    def finish(self, phase: str, message: str) -> None:
        self.status.update(phase=phase, message=message)
        self.status.setdefault("completionTime", timestamp(self.now))


def reconcile(name: str, spec: Mapping[str, Any], status: Mapping[str, Any] | None, generation: int | None,
              pods: Iterable[PodView], now: datetime, problems: list[str], logs_drained: bool = True) -> Plan:
    """`spec` has the defaults applied; `problems` are its validation problems (empty when valid)."""
    step = _Step({key: value for key, value in (status or {}).items() if key in OWNED_STATUS_FIELDS}, now)
    step.status.setdefault("restarts", 0)
    if generation is not None:
        step.status.setdefault("observedGeneration", generation)
    pods = list(pods)
    if step.status.get("phase") in FINAL_PHASES:
        return _finished(step, spec, pods)
    if problems:
        message = "invalid spec: " + "; ".join(problems)
        step.finish(FAILED, message)
        step.condition(FAILED, True, "InvalidSpec", message)
        return Plan(step.status, events=[Event("Warning", "InvalidSpec", message)], finished=True)

    step.status.setdefault("startTime", timestamp(now))
    num_nodes = int(spec["numNodes"])
    attempt = int(step.status["restarts"])
    current = {p.index: p for p in pods if p.attempt == attempt and 0 <= p.index < num_nodes}
    stale = [p for p in pods if current.get(p.index) is not p]
    step.status["workers"] = workers(current.values(), num_nodes)

    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None:
        due = parse_timestamp(step.status["startTime"]) + timedelta(seconds=int(deadline))
        if now >= due:
            message = f"the job ran longer than activeDeadlineSeconds ({deadline}s); workers stopped"
            step.finish(FAILED, message)
            step.condition(FAILED, True, "DeadlineExceeded", message)
            step.clear(RUNNING, "DeadlineExceeded", message)
            return Plan(step.status, delete_pods=_alive(pods), events=[Event("Warning", "DeadlineExceeded", message)])
        wake_at = due
    else:
        wake_at = None

    failed = sorted((p for p in current.values() if p.failed), key=lambda p: p.index)
    if failed:
        return _worker_failed(step, spec, failed[0], pods, wake_at)
    if stale:
        step.status["message"] = f"waiting for {len(stale)} pod(s) of an earlier attempt to go"
        step.status.setdefault("phase", PENDING)
        return Plan(step.status, delete_pods=_alive(stale), wake_at=wake_at)

    missing = [index for index in range(num_nodes) if index not in current]
    if missing:
        message = f"created Service {names.service_name(name)} and {num_nodes} pod(s), attempt {attempt}"
        # Once per attempt: a repeated step (the pod index not caught up yet) posts no second Event.
        announced = any(c.get("type") == "Created" and c.get("message") == message
                        for c in step.status.get("conditions") or [])
        step.condition("Created", True, "GroupCreated", message)
        step.status.setdefault("phase", PENDING)
        step.status["message"] = f"creating {len(missing)} of {num_nodes} pod(s)"
        events = [] if announced else [Event("Normal", "Created", message)]
        return Plan(step.status, create_pods=missing, events=events, wake_at=wake_at)

    group = list(current.values())
    if all(p.succeeded for p in group):
        if not logs_drained:
            step.status["message"] = "all workers succeeded; reading the last metric lines"
            return Plan(step.status, wake_at=wake_at)
        message = f"all {num_nodes} worker(s) succeeded"
        step.finish(SUCCEEDED, message)
        step.condition(SUCCEEDED, True, "AllWorkersSucceeded", message)
        step.clear(RUNNING, "Completed", message)
        step.clear("Restarting", "Completed", message)
        due = _ttl_due(step, spec)
        return Plan(step.status, events=[Event("Normal", "Succeeded", message)], finished=due is None, wake_at=due)
    active = sum(1 for p in group if p.phase == RUNNING or p.succeeded)
    if active == num_nodes:
        message = f"{num_nodes} of {num_nodes} worker(s) running"
        step.status.update(phase=RUNNING, message=message)
        step.condition(RUNNING, True, "AllWorkersRunning", message)
        step.clear("Restarting", "GroupRunning", f"attempt {attempt} is running")
    else:
        waiting = [p for p in group if p.phase == PENDING and p.reason]
        detail = f" ({waiting[0].name}: {waiting[0].reason})" if waiting else ""
        step.status["message"] = f"{active} of {num_nodes} worker(s) running{detail}"
    return Plan(step.status, wake_at=wake_at)


def _alive(pods: Iterable[PodView]) -> list[str]:
    return [p.name for p in pods if not p.finished and not p.deleting]


def _worker_failed(step: _Step, spec: Mapping[str, Any], pod: PodView, pods: list[PodView],
                   wake_at: datetime | None) -> Plan:
    attempt = int(step.status["restarts"])
    limit = int(spec.get("backoffLimit") or 0)
    failure = pod.describe_failure()
    if attempt < limit:
        message = f"{failure}; restarting the whole group (restart {attempt + 1} of {limit})"
        step.status.update(restarts=attempt + 1, phase=PENDING, message=message)
        step.condition("Restarting", True, "WorkerFailed", message)
        step.clear(RUNNING, "Restarting", message)
        return Plan(step.status, delete_pods=[p.name for p in pods if not p.deleting],
                    events=[Event("Warning", "Restarting", message)], wake_at=wake_at)
    message = f"{failure}; backoffLimit ({limit}) reached"
    step.finish(FAILED, message)
    step.condition(FAILED, True, "BackoffLimitExceeded", message)
    step.clear(RUNNING, "Failed", message)
    step.clear("Restarting", "Failed", message)
    # The others would wait in the rendezvous forever: stop them; the failed pods stay for their logs.
    return Plan(step.status, delete_pods=_alive(pods), events=[Event("Warning", "Failed", message)],
                wake_at=_ttl_due(step, spec))


def _ttl_due(step: _Step, spec: Mapping[str, Any]) -> datetime | None:
    ttl = spec.get("ttlSecondsAfterFinished")
    if ttl is None:
        return None
    completed = parse_timestamp(step.status.get("completionTime")) or step.now
    return completed + timedelta(seconds=int(ttl))


def _finished(step: _Step, spec: Mapping[str, Any], pods: list[PodView]) -> Plan:
    leftovers = _alive(pods) if step.status.get("phase") == FAILED else []
    due = _ttl_due(step, spec)
    if due is not None and step.now >= due:
        return Plan(step.status, delete_job=True, finished=True)
    return Plan(step.status, delete_pods=leftovers, finished=due is None and not leftovers, wake_at=due)
