"""The group taken away and given back: spec.suspend, resume, requeue after a preemption (pure).

Requeue: someone else deleted a pod of the group before it finished (Kueue's preemption, Kueue's eviction of a
group whose pods were not all ready within waitForPodsReady's timeout, an eviction)."""
from __future__ import annotations

from ..status import PENDING, RUNNING, SUSPENDED, PodView, parse_timestamp, workers
from .group import Group, not_deleting
from .plan import Event, Plan
from .step import Step


def suspend(step: Step, group: Group) -> Plan:
    """spec.suspend: the group's pods go (its checkpoint stays) and the job waits, Suspended, until resumed.
    A group that existed is done with: the one created on resume is the next attempt."""
    plan = Plan(step.status)
    if not step.has("Suspended", True):
        message = "the job is suspended (spec.suspend): its pods are deleted" + \
            ("; its checkpoint stays" if step.spec.get("checkpoint") is not None else "")
        step.announce("Suspended", True, "JobSuspended", message, Event("Normal", "Suspended", message))
        step.clear(RUNNING, "Suspended", message)
        step.clear("Created", "Suspended", message)
        if group.current:
            step.status["attempt"] = plan.new_attempt = step.attempt + 1
            plan.clear_epochs = step.spec.get("checkpoint") is None
    step.status["phase"] = SUSPENDED
    step.status["message"] = "suspended" + (f"; {len(step.pods)} pod(s) still to go" if step.pods else "") + \
        "; resume with spec.suspend: false"
    step.status["workers"] = workers([], step.num_nodes)
    plan.delete_pods = not_deleting(step.pods)  # finished ones too: the next group needs the names
    return plan


def resume(step: Step) -> None:
    """spec.suspend turned false: the time suspended stops the deadline's clock; the group is created anew."""
    since = next((parse_timestamp(c.get("lastTransitionTime")) for c in step.status.get("conditions") or []
                  if c.get("type") == "Suspended"), None)
    if since is not None and step.status.get("startTime"):
        paused = max(0, int((step.now - since).total_seconds()))
        step.status["suspendedSeconds"] = int(step.status.get("suspendedSeconds") or 0) + paused
    message = f"the job is resumed (spec.suspend: false): the group is created again, {step.resumes()}"
    step.announce("Suspended", False, "JobResumed", message, Event("Normal", "Resumed", message))
    step.status.update(phase=PENDING, message=message)


# Kueue's waitForPodsReady: the Workload's eviction reason, which Kueue v0.17 passes to the pods it stops as
# their TerminationTarget reason "WorkloadEvictedDueTo" + the eviction's reason.
PODS_READY_TIMEOUT = "PodsReadyTimeout"


def requeue_reason(disruption: str | None) -> tuple[str, str]:
    """(the Requeued condition's reason, what the message leads with) for a pod's disruption text."""
    if disruption is not None and PODS_READY_TIMEOUT in disruption:
        return PODS_READY_TIMEOUT, ("Kueue evicted the group for not starting all its pods in time "
                                    "(waitForPodsReady's timeout): ")
    if disruption is not None and "preempt" in disruption.lower():
        return "Preempted", ""
    return "PodsDeleted", ""


def requeue(step: Step, taken: list[PodView]) -> Plan:
    """Pods of the group were deleted before they finished, by someone else (Kueue preempting the workload or
    evicting it after waitForPodsReady's timeout, an eviction, a person): the whole group goes and is created
    again as the next attempt, not counted against backoffLimit (Kueue recreates no pods: their owner does)."""
    attempt = step.attempt
    first = next((p for p in taken if p.disruption), taken[0])
    reason, lead = requeue_reason(first.disruption)
    why = f" ({first.disruption})" if first.disruption else ""
    message = (f"{lead}{len(taken)} pod(s) of attempt {attempt} deleted before they finished, {first.name} first{why}: "
               f"the group is recreated as attempt {attempt + 1} (not counted against backoffLimit, {step.resumes()})")
    step.status.update(attempt=attempt + 1, phase=PENDING, message=message)
    step.condition("Requeued", True, reason, message)
    step.clear(RUNNING, "Requeued", message)
    step.clear("Created", "Requeued", message)
    kind = "Warning" if reason == PODS_READY_TIMEOUT else "Normal"
    return Plan(step.status, delete_pods=not_deleting(step.pods),
                events=[Event(kind, "Requeued", message)], wake_at=step.wake_at,
                new_attempt=attempt + 1, clear_epochs=step.spec.get("checkpoint") is None)
