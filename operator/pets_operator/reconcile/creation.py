"""Creating the group: its missing pods and the Service, Created, the wait after a failed creation (pure).

A quota refusal, a resource the API does not serve (a gang scheduler's PodGroup CRD not installed), an
earlier same-named job's object still holding a name, or an unanswered call is retried once its backoff
has passed; the first three are said on the job (Created=False and one Warning Event per message). A
group restarted after a worker failed is created once its restart back-off has passed (`failure`)."""
from __future__ import annotations

from pets_api import names

from ..refusals import CONFLICT, NOT_SERVED, QUOTA, CreateFailure
from ..status import PENDING
from .failure import restart_at
from .plan import Event, Plan
from .step import NAME_CONFLICT, Step

POD_GROUP_APIS = {  # spec.gangScheduling.scheduler -> its PodGroup API and where it comes from
    "coscheduling": ("scheduling.x-k8s.io/v1alpha1", "scheduler-plugins (its controller and the Coscheduling "
                                                     "scheduler, which install the PodGroup CRD)"),
    "volcano": ("scheduling.volcano.sh/v1beta1", "Volcano"),
}


def created(step: Step) -> None:
    """Every pod of the attempt exists (the pod index shows it): Created, with an event the first time."""
    message = f"created Service {names.service_name(step.name)} and {step.num_nodes} pod(s), attempt {step.attempt}"
    step.announce("Created", True, "GroupCreated", message, Event("Normal", "Created", message))


def create(step: Step, missing: list[int]) -> Plan:
    """Create the missing pods (and the Service), or wait: for the restart back-off, or for the backoff of a
    failed creation to pass."""
    failure, wake_at = step.create_failure, step.wake_at
    step.status.setdefault("phase", PENDING)
    creating = f"creating {len(missing)} of {step.num_nodes} pod(s){step.attempt_note()}"
    not_before = restart_at(step)
    if not_before is not None and step.now < not_before:
        step.status["message"] = f"{creating}: restart back-off, the group is created again in " \
                                 f"{(not_before - step.now).total_seconds():.0f}s"
        return Plan(step.status, wake_at=not_before if wake_at is None else min(wake_at, not_before))
    if failure is None:
        step.status["message"] = creating
        return Plan(step.status, create_pods=missing, wake_at=wake_at)
    step.status["message"] = f"{creating}: {_failed(step, failure)}; retrying"
    if step.now < failure.retry_at:
        wake_at = failure.retry_at if wake_at is None else min(wake_at, failure.retry_at)
        return Plan(step.status, wake_at=wake_at)
    return Plan(step.status, create_pods=missing, wake_at=wake_at)


def _failed(step: Step, failure: CreateFailure) -> str:
    """What kept the group's objects from being created, said on the job (an Event per new message) unless
    the call only went unanswered."""
    if failure.kind == QUOTA:
        reason, message = "QuotaExceeded", f"cannot create {failure.what}: {failure.failure.message}"
    elif failure.kind == NOT_SERVED and failure.object_kind == "PodGroup":
        reason, message = "PodGroupAPINotInstalled", _pod_group_api_missing(step, failure)
    elif failure.kind == CONFLICT and failure.occupant is not None:
        reason = NAME_CONFLICT
        message = f"{failure.occupant.describe()}: waiting for it to go with the earlier job of this name"
    else:
        return f"the API server did not create {failure.what} ({failure.failure.describe()})"
    step.announce("Created", False, reason, message, Event("Warning", reason, message))
    return message


def _pod_group_api_missing(step: Step, failure: CreateFailure) -> str:
    scheduler = str((step.spec.get("gangScheduling") or {}).get("scheduler") or "coscheduling")
    api, source = POD_GROUP_APIS.get(scheduler, (scheduler, scheduler))
    return (f"cannot create {failure.what}: the cluster does not serve PodGroups of {api} "
            f"({failure.failure.describe()}): spec.gangScheduling.scheduler {scheduler} needs {source} installed; "
            "install it, or recreate the job without spec.gangScheduling")
