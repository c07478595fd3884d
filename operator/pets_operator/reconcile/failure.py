"""The job failing: an invalid spec, a refused creation, a failed worker (restarted within backoffLimit) (pure).

A worker whose cause is DataUnavailable or ModelUnavailable fails the job with that reason."""
from __future__ import annotations

from ..refusals import CreateFailure
from ..status import FAILED, PENDING, RUNNING, PodView
from .finish import ttl_due
from .group import alive, not_deleting
from .plan import Event, Plan
from .step import INITIALIZED, Step

DATA_UNAVAILABLE, MODEL_UNAVAILABLE = "DataUnavailable", "ModelUnavailable"


def invalid_spec(step: Step, problems: list[str]) -> Plan:
    message = "invalid spec: " + "; ".join(problems)
    step.finish(FAILED, message)
    step.condition(FAILED, True, "InvalidSpec", message)
    return Plan(step.status, events=[Event("Warning", "InvalidSpec", message)], finished=True)


def refused(step: Step, failure: CreateFailure) -> Plan:
    """The API server refused one of the group's objects and will refuse it again: the job fails."""
    message = f"the API server refused to create {failure.what}: {failure.failure.describe()}"
    step.finish(FAILED, message)
    step.condition(FAILED, True, "CreateRefused", message)
    step.clear("Created", "CreateRefused", message)
    step.clear(RUNNING, "Failed", message)
    step.clear("Restarting", "Failed", message)
    return Plan(step.status, delete_pods=alive(step.pods), events=[Event("Warning", "CreateRefused", message)],
                wake_at=ttl_due(step))


def worker_failed(step: Step, pod: PodView) -> Plan:
    """A worker of the current group failed: the whole group restarts while backoffLimit allows, else the job fails."""
    if int(step.status["restarts"]) < int(step.spec.get("backoffLimit") or 0):
        return _restart(step, pod)
    return _give_up(step, pod)


def _restart(step: Step, pod: PodView) -> Plan:
    restarts, attempt = int(step.status["restarts"]), step.attempt
    limit = int(step.spec.get("backoffLimit") or 0)
    message = f"{pod.describe_failure()}; restarting the whole group " \
              f"(restart {restarts + 1} of {limit}, {step.resumes()})"
    step.status.update(restarts=restarts + 1, attempt=attempt + 1, phase=PENDING, message=message)
    step.condition("Restarting", True, "WorkerFailed", message)
    step.clear(RUNNING, "Restarting", message)
    return Plan(step.status, delete_pods=not_deleting(step.pods),
                events=[Event("Warning", "Restarting", message)], wake_at=step.wake_at,
                new_attempt=attempt + 1, clear_epochs=step.spec.get("checkpoint") is None)


def _give_up(step: Step, pod: PodView) -> Plan:
    message = f"{pod.describe_failure()}; backoffLimit ({int(step.spec.get('backoffLimit') or 0)}) reached"
    step.finish(FAILED, message)
    step.condition(FAILED, True, pod.failure_reason or "BackoffLimitExceeded", message)
    if pod.failure_reason in (DATA_UNAVAILABLE, MODEL_UNAVAILABLE):
        step.condition(INITIALIZED, False, pod.failure_reason, message)
    step.clear(RUNNING, "Failed", message)
    step.clear("Restarting", "Failed", message)
    # The others would wait in the rendezvous forever: stop them; the failed pods stay for their logs.
    return Plan(step.status, delete_pods=alive(step.pods), events=[Event("Warning", "Failed", message)],
                wake_at=ttl_due(step))
