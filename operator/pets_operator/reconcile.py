"""One step of a PetsTrainingJob's life: (spec, status, pods, now) -> what to do (pure, no IO).

The job daemon calls `reconcile` whenever something may have changed and carries out the plan;
every plan is safe to carry out twice, so an operator restart at any point, or a repeated step,
never makes a duplicate pod or a second group.

Group attempts: `status.attempt` is the attempt number the pods must carry in their
`training.pets.dev/attempt` label (`status.restarts` where an older operator left none). A pod of
another attempt is stale: it is deleted and the current group is only created once all stale pods
are gone (pod names are stable). A new attempt starts when a worker fails (a restart, counted in
`status.restarts` against backoffLimit), when the group is taken away (a pod of it deleted by someone
else before it finished: Kueue's preemption, an eviction; condition Requeued, not counted) and when a
running job is suspended (`spec.suspend`; the group is created again on resume).

Conditions: Created and Restarting, and Running, Succeeded and Failed, which are named after (and
written with) the phase they report; Scheduled only once a worker could not be scheduled;
Initialized for a job with downloads (`initialization`): False (Downloading, phase Pending) until
pod 0's log says they are done; a failure whose cause is DataUnavailable or ModelUnavailable fails
the job with that reason.
Created is True only once every pod of the attempt exists (the pod index shows it); a refused
creation is False with the API's reason (QuotaExceeded) or fails the job (CreateRefused).

API refusals: the runner hands the last failed creation in (`create_failure`); a refusal that
retrying cannot change fails the job, a quota refusal or an unanswered call is retried with backoff.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping

from pets_api import names

from .initialization import DOWNLOADED, DOWNLOADING, Initialization, needs_initialization
from .refusals import QUOTA, REFUSED, CreateFailure
from .status import (FAILED, FINAL_PHASES, PENDING, RUNNING, SUCCEEDED, SUSPENDED, PodView, parse_timestamp,
                     set_condition, timestamp, workers)

INITIALIZED = "Initialized"  # a job with downloads: False (Downloading) until pod 0 has them, then True
DATA_UNAVAILABLE, MODEL_UNAVAILABLE = "DataUnavailable", "ModelUnavailable"
OWNED_STATUS_FIELDS = ("phase", "message", "conditions", "workers", "startTime", "completionTime", "restarts",
                       "attempt", "suspendedSeconds", "observedGeneration", "output")


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


@dataclass
class _Step:
    status: dict[str, Any]
    now: datetime
    events: list[Event] = field(default_factory=list)  # posted with whatever plan this step ends in

    def condition(self, type_: str, value: bool, reason: str, message: str) -> None:
        self.status["conditions"] = set_condition(self.status.get("conditions"), type_, value, reason, message, self.now)

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


def attempt_of(status: Mapping[str, Any] | None) -> int:
    """The group attempt the pods must belong to: status.attempt, else status.restarts (an older operator's)."""
    status = status or {}
    return int(status["attempt"] if status.get("attempt") is not None else status.get("restarts") or 0)


def reconcile(name: str, spec: Mapping[str, Any], status: Mapping[str, Any] | None, generation: int | None,
              pods: Iterable[PodView], now: datetime, problems: list[str], logs_drained: bool = True,
              create_failure: CreateFailure | None = None, initialization: Initialization | None = None) -> Plan:
    """`spec` has the defaults applied; `problems` are its validation problems (empty when valid);
    `create_failure`: how the last creation of the group's objects failed, None when it did not;
    `initialization`: what pod 0's log said of its downloads (the current attempt's)."""
    step = _Step({key: value for key, value in (status or {}).items() if key in OWNED_STATUS_FIELDS}, now)
    plan = _decide(step, name, spec, generation, list(pods), problems, logs_drained, create_failure,
                   initialization or Initialization())
    plan.events[:0] = step.events
    return plan


def _decide(step: _Step, name: str, spec: Mapping[str, Any], generation: int | None, pods: list[PodView],
            problems: list[str], logs_drained: bool, create_failure: CreateFailure | None,
            initialization: Initialization) -> Plan:
    now = step.now
    step.status.setdefault("restarts", 0)
    step.status["attempt"] = attempt_of(step.status)
    if generation is not None:  # this step acts on that generation's spec (its mutable fields included)
        step.status["observedGeneration"] = generation
    if step.status.get("phase") in FINAL_PHASES:
        return _finished(step, spec, pods)
    if problems:
        message = "invalid spec: " + "; ".join(problems)
        step.finish(FAILED, message)
        step.condition(FAILED, True, "InvalidSpec", message)
        return Plan(step.status, events=[Event("Warning", "InvalidSpec", message)], finished=True)

    num_nodes = int(spec["numNodes"])
    attempt = int(step.status["attempt"])
    current = {p.index: p for p in pods if p.attempt == attempt and 0 <= p.index < num_nodes}
    stale = [p for p in pods if current.get(p.index) is not p]
    done = len(current) == num_nodes and all(p.succeeded for p in current.values())
    if spec.get("suspend") and not done:  # a group that has done its work is let finish
        return _suspend(step, spec, current, pods)
    if step.has("Suspended", True):
        _resume(step, spec)
    step.status.setdefault("startTime", timestamp(now))
    step.status["workers"] = workers(current.values(), num_nodes)

    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None:
        # The clock stands still while the job is suspended (status.suspendedSeconds: the time it was).
        running_for = int(deadline) + int(step.status.get("suspendedSeconds") or 0)
        due = parse_timestamp(step.status["startTime"]) + timedelta(seconds=running_for)
        if now >= due:
            message = f"the job ran longer than activeDeadlineSeconds ({deadline}s); workers stopped"
            step.finish(FAILED, message)
            step.condition(FAILED, True, "DeadlineExceeded", message)
            step.clear(RUNNING, "DeadlineExceeded", message)
            return Plan(step.status, delete_pods=_alive(pods), events=[Event("Warning", "DeadlineExceeded", message)])
        wake_at = due
    else:
        wake_at = None

    if create_failure is not None and create_failure.attempt != attempt:
        create_failure = None  # an earlier group's
    if create_failure is not None and create_failure.kind == REFUSED:
        return _refused(step, spec, create_failure, pods)
    missing = [index for index in range(num_nodes) if index not in current]
    if not missing:
        message = f"created Service {names.service_name(name)} and {num_nodes} pod(s), attempt {attempt}"
        step.announce("Created", True, "GroupCreated", message, Event("Normal", "Created", message))

    # A pod of the group deleted before it finished was taken away (the operator deletes pods of the current
    # attempt only when the job ends): the group is requeued. This wins over a failure of another pod,
    # which may be the loss of its peer.
    taken = sorted((p for p in current.values() if p.deleting and not p.succeeded), key=lambda p: p.index)
    if taken:
        return _requeue(step, spec, taken, pods, wake_at)
    failed = sorted((p for p in current.values() if p.failed), key=lambda p: p.index)
    if failed:
        return _worker_failed(step, spec, failed[0], pods, wake_at)
    if stale:
        held = sorted({f for p in stale for f in p.finalizers})
        step.status["message"] = f"waiting for {len(stale)} pod(s) of an earlier attempt to go" + \
            (f" (held by finalizer {', '.join(held)})" if held else "")
        step.status.setdefault("phase", PENDING)
        # Finished ones too: the new group needs their names.
        return Plan(step.status, delete_pods=[p.name for p in stale if not p.deleting], wake_at=wake_at)

    if missing:
        return _create(step, spec, missing, create_failure, wake_at)

    group = list(current.values())
    _scheduling(step, group)
    initializing = needs_initialization(spec)
    if initializing and initialization.done:
        step.condition(INITIALIZED, True, DOWNLOADED, initialization.message())
    if all(p.succeeded for p in group):
        if not logs_drained:
            step.status["message"] = "all workers succeeded; reading the last metric lines"
            return Plan(step.status, wake_at=wake_at)
        message = f"all {num_nodes} worker(s) succeeded"
        if spec.get("output") is not None:
            step.status["output"] = output_status(spec["output"])
            message += f"; the model is in {_where(step.status['output'])}"
        step.finish(SUCCEEDED, message)
        step.condition(SUCCEEDED, True, "AllWorkersSucceeded", message)
        step.clear(RUNNING, "Completed", message)
        step.clear("Restarting", "Completed", message)
        due = _ttl_due(step, spec)
        return Plan(step.status, events=[Event("Normal", "Succeeded", message)], finished=due is None, wake_at=due)
    active = sum(1 for p in group if p.phase == RUNNING or p.succeeded)
    if active == num_nodes and initializing and not initialization.done:
        # The pods run, but pets-train is still downloading: no training yet.
        message = f"{num_nodes} of {num_nodes} worker(s) started; {initialization.message()}"
        step.status.update(phase=PENDING, message=message)
        step.condition(INITIALIZED, False, DOWNLOADING, initialization.message())
    elif active == num_nodes:
        message = f"{num_nodes} of {num_nodes} worker(s) running{_attempt_note(spec, step.status)}"
        step.status.update(phase=RUNNING, message=message)
        step.condition(RUNNING, True, "AllWorkersRunning", message)
        step.clear("Restarting", "GroupRunning", f"attempt {attempt} is running")
        step.clear("Requeued", "GroupRunning", f"attempt {attempt} is running")
    else:
        unschedulable = sorted((p for p in group if p.phase == PENDING and p.unschedulable), key=lambda p: p.index)
        gated = sorted((p for p in group if p.phase == PENDING and p.gates), key=lambda p: p.index)
        waiting = [p for p in group if p.phase == PENDING and p.reason]
        if unschedulable:
            detail = f"; {_unschedulable_message(unschedulable[0])}"
        elif gated:
            detail = f"; {_gated_message(gated)}"
        else:
            detail = f" ({_waiting_message(waiting[0])})" if waiting else ""
        step.status["message"] = f"{active} of {num_nodes} worker(s) running{_attempt_note(spec, step.status)}{detail}"
    return Plan(step.status, wake_at=wake_at)


def _waiting_message(pod: PodView) -> str:
    """`pets-0: ErrImageNeverPull: Container image "x" is not present ...`: why a pod's container waits."""
    return ": ".join(part for part in (pod.name, pod.reason, pod.message) if part)


def _attempt_note(spec: Mapping[str, Any], status: Mapping[str, Any]) -> str:
    """Which group attempt runs, once there has been another one."""
    attempt, restarts = attempt_of(status), int(status.get("restarts") or 0)
    return f" (attempt {attempt}, restart {restarts} of {int(spec.get('backoffLimit') or 0)})" if attempt else ""


def _gated_message(gated: list[PodView]) -> str:
    gates = sorted({gate for pod in gated for gate in pod.gates})
    text = f"{len(gated)} pod(s) wait for scheduling gate {', '.join(gates)} to be removed"
    if names.KUEUE_ADMISSION_GATE in gates:
        text += " (Kueue admits the whole group once its queue has room for it)"
    return text


def _unschedulable_message(pod: PodView) -> str:
    return f"pod {pod.name} cannot be scheduled: {pod.unschedulable}"


def _scheduling(step: _Step, group: list[PodView]) -> None:
    """Scheduled=False (and a Warning Event per new reason) while a worker cannot be placed; True once all are."""
    unschedulable = sorted((p for p in group if p.phase == PENDING and p.unschedulable), key=lambda p: p.index)
    if unschedulable:
        message = _unschedulable_message(unschedulable[0])
        step.announce("Scheduled", False, "Unschedulable", message, Event("Warning", "Unschedulable", message))
    elif step.has("Scheduled", False):
        step.condition("Scheduled", True, "AllWorkersScheduled", "every worker is scheduled")


def _create(step: _Step, spec: Mapping[str, Any], missing: list[int], failure: CreateFailure | None,
            wake_at: datetime | None) -> Plan:
    """Create the missing pods (and the Service), or wait for the backoff of a failed creation to pass."""
    num_nodes = int(spec["numNodes"])
    step.status.setdefault("phase", PENDING)
    creating = f"creating {len(missing)} of {num_nodes} pod(s){_attempt_note(spec, step.status)}"
    if failure is None:
        step.status["message"] = creating
        return Plan(step.status, create_pods=missing, wake_at=wake_at)
    if failure.kind == QUOTA:
        message = f"cannot create {failure.what}: {failure.failure.message}"
        step.announce("Created", False, "QuotaExceeded", message, Event("Warning", "QuotaExceeded", message))
        step.status["message"] = f"{creating}: {message}; retrying"
    else:
        step.status["message"] = f"{creating}: the API server did not create {failure.what} " \
                                 f"({failure.failure.describe()}); retrying"
    if step.now < failure.retry_at:
        wake_at = failure.retry_at if wake_at is None else min(wake_at, failure.retry_at)
        return Plan(step.status, wake_at=wake_at)
    return Plan(step.status, create_pods=missing, wake_at=wake_at)


def _refused(step: _Step, spec: Mapping[str, Any], failure: CreateFailure, pods: list[PodView]) -> Plan:
    """The API server refused one of the group's objects and will refuse it again: the job fails."""
    message = f"the API server refused to create {failure.what}: {failure.failure.describe()}"
    step.finish(FAILED, message)
    step.condition(FAILED, True, "CreateRefused", message)
    step.clear("Created", "CreateRefused", message)
    step.clear(RUNNING, "Failed", message)
    step.clear("Restarting", "Failed", message)
    return Plan(step.status, delete_pods=_alive(pods), events=[Event("Warning", "CreateRefused", message)],
                wake_at=_ttl_due(step, spec))


def _alive(pods: Iterable[PodView]) -> list[str]:
    return [p.name for p in pods if not p.finished and not p.deleting]


def _resumes(spec: Mapping[str, Any]) -> str:
    return "resuming from the last checkpoint" if spec.get("checkpoint") is not None else \
        "no checkpoint: training starts again from epoch 0"


def _suspend(step: _Step, spec: Mapping[str, Any], current: dict[int, PodView], pods: list[PodView]) -> Plan:
    """spec.suspend: the group's pods go (its checkpoint stays) and the job waits, Suspended, until resumed.
    A group that existed is done with: the one created on resume is the next attempt."""
    plan = Plan(step.status)
    if not step.has("Suspended", True):
        message = "the job is suspended (spec.suspend): its pods are deleted" + \
            ("; its checkpoint stays" if spec.get("checkpoint") is not None else "")
        step.announce("Suspended", True, "JobSuspended", message, Event("Normal", "Suspended", message))
        step.clear(RUNNING, "Suspended", message)
        step.clear("Created", "Suspended", message)
        if current:
            attempt = int(step.status["attempt"]) + 1
            step.status["attempt"] = plan.new_attempt = attempt
            plan.clear_epochs = spec.get("checkpoint") is None
    step.status["phase"] = SUSPENDED
    step.status["message"] = "suspended" + (f"; {len(pods)} pod(s) still to go" if pods else "") + \
        "; resume with spec.suspend: false"
    step.status["workers"] = workers([], int(spec["numNodes"]))
    plan.delete_pods = [p.name for p in pods if not p.deleting]  # finished ones too: the next group needs the names
    return plan


def _resume(step: _Step, spec: Mapping[str, Any]) -> None:
    """spec.suspend turned false: the time suspended stops the deadline's clock; the group is created anew."""
    since = next((parse_timestamp(c.get("lastTransitionTime")) for c in step.status.get("conditions") or []
                  if c.get("type") == "Suspended"), None)
    if since is not None and step.status.get("startTime"):
        paused = max(0, int((step.now - since).total_seconds()))
        step.status["suspendedSeconds"] = int(step.status.get("suspendedSeconds") or 0) + paused
    message = f"the job is resumed (spec.suspend: false): the group is created again, {_resumes(spec)}"
    step.announce("Suspended", False, "JobResumed", message, Event("Normal", "Resumed", message))
    step.status.update(phase=PENDING, message=message)


def _requeue(step: _Step, spec: Mapping[str, Any], taken: list[PodView], pods: list[PodView],
             wake_at: datetime | None) -> Plan:
    """Pods of the group were deleted before they finished, by someone else (Kueue preempting the workload,
    an eviction, a person): the whole group goes and is created again as the next attempt, not counted
    against backoffLimit (Kueue recreates no pods: their owner does)."""
    attempt = int(step.status["attempt"])
    first = taken[0]
    preempted = first.disruption is not None and "preempt" in first.disruption.lower()
    why = f" ({first.disruption})" if first.disruption else ""
    message = (f"{len(taken)} pod(s) of attempt {attempt} deleted before they finished, {first.name} first{why}: "
               f"the group is recreated as attempt {attempt + 1} (not counted against backoffLimit, {_resumes(spec)})")
    step.status.update(attempt=attempt + 1, phase=PENDING, message=message)
    step.condition("Requeued", True, "Preempted" if preempted else "PodsDeleted", message)
    step.clear(RUNNING, "Requeued", message)
    step.clear("Created", "Requeued", message)
    return Plan(step.status, delete_pods=[p.name for p in pods if not p.deleting],
                events=[Event("Normal", "Requeued", message)], wake_at=wake_at,
                new_attempt=attempt + 1, clear_epochs=spec.get("checkpoint") is None)


def _worker_failed(step: _Step, spec: Mapping[str, Any], pod: PodView, pods: list[PodView],
                   wake_at: datetime | None) -> Plan:
    restarts, attempt = int(step.status["restarts"]), int(step.status["attempt"])
    limit = int(spec.get("backoffLimit") or 0)
    failure = pod.describe_failure()
    if restarts < limit:
        message = f"{failure}; restarting the whole group (restart {restarts + 1} of {limit}, {_resumes(spec)})"
        step.status.update(restarts=restarts + 1, attempt=attempt + 1, phase=PENDING, message=message)
        step.condition("Restarting", True, "WorkerFailed", message)
        step.clear(RUNNING, "Restarting", message)
        return Plan(step.status, delete_pods=[p.name for p in pods if not p.deleting],
                    events=[Event("Warning", "Restarting", message)], wake_at=wake_at,
                    new_attempt=attempt + 1, clear_epochs=spec.get("checkpoint") is None)
    message = f"{failure}; backoffLimit ({limit}) reached"
    step.finish(FAILED, message)
    step.condition(FAILED, True, pod.failure_reason or "BackoffLimitExceeded", message)
    if pod.failure_reason in (DATA_UNAVAILABLE, MODEL_UNAVAILABLE):
        step.condition(INITIALIZED, False, pod.failure_reason, message)
    step.clear(RUNNING, "Failed", message)
    step.clear("Restarting", "Failed", message)
    # The others would wait in the rendezvous forever: stop them; the failed pods stay for their logs.
    return Plan(step.status, delete_pods=_alive(pods), events=[Event("Warning", "Failed", message)],
                wake_at=_ttl_due(step, spec))


def output_status(output: Mapping[str, Any]) -> dict[str, str]:
    """status.output: where the trained model is (spec.output's volume and the path inside the pods)."""
    where = {"path": str(output["path"])}
    if output.get("persistentVolumeClaim") is not None:
        where["persistentVolumeClaim"] = str(output["persistentVolumeClaim"]["claimName"])
    elif output.get("hostPath") is not None:
        where["hostPath"] = str(output["hostPath"])
    return where


def _where(output: Mapping[str, str]) -> str:
    if "persistentVolumeClaim" in output:
        return f"PVC {output['persistentVolumeClaim']} ({output['path']} in the pods)"
    if "hostPath" in output:
        return f"{output['hostPath']} on the node of pod 0 ({output['path']} in the pods)"
    return f"{output['path']} of pod 0 (an emptyDir: set output.persistentVolumeClaim or hostPath to keep it)"


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
