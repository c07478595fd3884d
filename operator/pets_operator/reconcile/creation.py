"""Creating the group: its missing pods and the Service, Created, the wait after a failed creation (pure).

A quota refusal or an unanswered call is retried once its backoff has passed."""
from __future__ import annotations

from pets_api import names

from ..refusals import QUOTA
from ..status import PENDING
from .plan import Event, Plan
from .step import Step


def created(step: Step) -> None:
    """Every pod of the attempt exists (the pod index shows it): Created, with an event the first time."""
    message = f"created Service {names.service_name(step.name)} and {step.num_nodes} pod(s), attempt {step.attempt}"
    step.announce("Created", True, "GroupCreated", message, Event("Normal", "Created", message))


def create(step: Step, missing: list[int]) -> Plan:
    """Create the missing pods (and the Service), or wait for the backoff of a failed creation to pass."""
    failure, wake_at = step.create_failure, step.wake_at
    step.status.setdefault("phase", PENDING)
    creating = f"creating {len(missing)} of {step.num_nodes} pod(s){step.attempt_note()}"
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
