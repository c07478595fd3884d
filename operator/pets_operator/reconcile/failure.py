"""The job failing: an invalid spec, a spec the cluster's policy refuses, a refused creation, a name taken by another object, a failed worker (pure).

A failed worker restarts the whole group while backoffLimit allows, after a back-off that doubles with
each restart (the Job controller's: 10 s, 20 s, ... at most 6 minutes); a permanent failure (a
DataUnavailable, ModelUnavailable, IncompatibleFunction or CheckpointConflict cause, or the trainer's
invalid-input exit status) fails the job at once, as a Job's podFailurePolicy FailJob rule does.
A job whose worker failed keeps its pods, and so their logs, until it is deleted or its TTL passes."""
from __future__ import annotations

from datetime import datetime, timedelta

from pets_api.phases import INVALID_INPUT_EXIT_CODE

from ..refusals import CONFLICT, REFUSED, CreateFailure
from ..status import FAILED, PENDING, RUNNING, PodView
from .finish import ttl_due
from .group import alive, not_deleting
from .plan import Event, Plan
from .step import CREATE_REFUSED, INITIALIZED, NAME_CONFLICT, Step

DATA_UNAVAILABLE, MODEL_UNAVAILABLE = "DataUnavailable", "ModelUnavailable"
POLICY_VIOLATION = "PolicyViolation"  # the admin's policy (`policy`) refuses the spec: nothing is created
INVALID_INPUT = "InvalidInput"  # the trainer refused its input (exit status 2): the spec or the data must change
RESTART_BACKOFF_MAX_SECONDS = 360.0
RESTARTING = "Restarting"


def invalid_spec(step: Step, problems: list[str]) -> Plan:
    message = "invalid spec: " + "; ".join(problems)
    step.finish(FAILED, message)
    step.condition(FAILED, True, "InvalidSpec", message)
    return Plan(step.status, events=[Event("Warning", "InvalidSpec", message)], finished=True)


def refused_by_policy(step: Step, problems: list[str]) -> Plan:
    """For good: only a new job (or the admin's policy) can change it. Asked only before the job's pods are
    created, as admission is: a group created under a looser policy runs on, and its restart is refused."""
    return _stop(step, POLICY_VIOLATION, "refused by the cluster's policy: " + "; ".join(problems))


def ends_the_job(step: Step, failure: CreateFailure) -> bool:
    """A refusal the API server will repeat, or a name taken by an object that is not this job's and not an
    earlier same-named job's (which goes with that job: the group waits for it, `creation.create`)."""
    if failure.kind == CONFLICT:
        return failure.occupant is None or not failure.occupant.of_earlier_job(step.name)
    return failure.kind == REFUSED


def creation_failed(step: Step, failure: CreateFailure) -> Plan:
    """The job fails: the API server refused one of the group's objects (CreateRefused), or its name is
    taken (NameConflict: the job never adopts an object that is not its own)."""
    if failure.kind == CONFLICT:
        return _stop(step, NAME_CONFLICT, f"cannot create {failure.what}: {failure.failure.message}; delete it, "
                                          "or recreate this job under another name")
    return _stop(step, CREATE_REFUSED, f"the API server refused to create {failure.what}: {failure.failure.describe()}")


def _stop(step: Step, reason: str, message: str) -> Plan:
    step.finish(FAILED, message)
    step.condition(FAILED, True, reason, message)
    step.clear("Created", reason, message)
    step.clear(RUNNING, "Failed", message)
    step.clear(RESTARTING, "Failed", message)
    return Plan(step.status, delete_pods=alive(step.pods), events=[Event("Warning", reason, message)],
                wake_at=ttl_due(step))


def permanent_reason(pod: PodView) -> str | None:
    """Why retrying the failed pod cannot help: its cause's reason or the trainer's invalid-input exit status;
    None for a crash, which a restart may get past."""
    if pod.failure_reason is not None:
        return pod.failure_reason
    return INVALID_INPUT if pod.exit_code == INVALID_INPUT_EXIT_CODE else None


def worker_failed(step: Step, failed: list[PodView]) -> Plan:
    """Workers of the current group failed: a permanent failure fails the job at once; a crash restarts
    the whole group while backoffLimit allows, else the job fails."""
    pod = next((p for p in failed if permanent_reason(p) is not None), failed[0])
    if permanent_reason(pod) is None and int(step.status["restarts"]) < int(step.spec.get("backoffLimit") or 0):
        return _restart(step, pod)
    return _give_up(step, pod)


def _restart(step: Step, pod: PodView) -> Plan:
    restarts, attempt = int(step.status["restarts"]), step.attempt
    limit = int(step.spec.get("backoffLimit") or 0)
    delay = restart_delay(step.restart_backoff, restarts + 1)
    message = f"{pod.describe_failure()}; restarting the whole group in {delay:g}s " \
              f"(restart {restarts + 1} of {limit}, {step.resumes()})"
    step.status.update(restarts=restarts + 1, attempt=attempt + 1, phase=PENDING, message=message)
    step.condition(RESTARTING, True, "WorkerFailed", message, anew=True)  # the back-off counts from now
    step.clear(RUNNING, RESTARTING, message)
    return Plan(step.status, delete_pods=not_deleting(step.pods),
                events=[Event("Warning", RESTARTING, message)], wake_at=step.wake_at,
                new_attempt=attempt + 1, clear_epochs=step.spec.get("checkpoint") is None)


def restart_delay(base: float, restarts: int) -> float:
    """The back-off before group restart number `restarts` (1, 2, ...): `base` doubling, at most 6 minutes."""
    return min(RESTART_BACKOFF_MAX_SECONDS, base * 2 ** max(0, restarts - 1))


def restart_at(step: Step) -> datetime | None:
    """When a group restarted after a worker failed may be created; None when it is not restarting."""
    since = step.since(RESTARTING)
    if since is None or not step.has(RESTARTING, True, "WorkerFailed"):
        return None
    return since + timedelta(seconds=restart_delay(step.restart_backoff, int(step.status.get("restarts") or 0)))


def _give_up(step: Step, pod: PodView) -> Plan:
    permanent = permanent_reason(pod)
    if permanent is not None:
        message = f"{pod.describe_failure()}; not restarted: a permanent error ({permanent})"
    else:
        message = f"{pod.describe_failure()}; backoffLimit ({int(step.spec.get('backoffLimit') or 0)}) reached"
    step.finish(FAILED, message)
    step.condition(FAILED, True, permanent or "BackoffLimitExceeded", message)
    if permanent in (DATA_UNAVAILABLE, MODEL_UNAVAILABLE):
        step.condition(INITIALIZED, False, permanent, message)
    step.clear(RUNNING, "Failed", message)
    step.clear(RESTARTING, "Failed", message)
    # The pods stay, and with them their logs (`kubectl logs`, job.logs()), until the job goes.
    return Plan(step.status, events=[Event("Warning", "Failed", message)], wake_at=ttl_due(step))
