"""The running/pending ladder: Running once every worker runs, else what the group waits for (pure).

It waits for an earlier attempt's pods to go, the scheduler, a scheduling gate, its volumes, a container, or
downloads. A volume that cannot be mounted (a hostPath that is not there, say) is only a `FailedMount` Event on
the pod, the pod staying ContainerCreating: the runner reads those Events (`mount_failures`) and the job says so
(VolumesMounted=False/FailedMount, a Warning Event per new message) until every worker runs."""
from __future__ import annotations

from collections.abc import Callable

from pets_api import names

from ..initialization import DOWNLOADED, DOWNLOADING, needs_initialization
from ..status import PENDING, RUNNING, PodView
from .group import Group, not_deleting
from .plan import Event, Plan
from .step import INITIALIZED, Step

VOLUMES_MOUNTED, FAILED_MOUNT = "VolumesMounted", "FailedMount"


def for_stale_pods(step: Step, stale: list[PodView]) -> Plan:
    """Pods of an earlier attempt are still there: the new group waits for them to go."""
    held = sorted({f for p in stale for f in p.finalizers})
    step.status["message"] = f"waiting for {len(stale)} pod(s) of an earlier attempt to go" + \
        (f" (held by finalizer {', '.join(held)})" if held else "")
    step.status.setdefault("phase", PENDING)
    # Finished ones too: the new group needs their names.
    return Plan(step.status, delete_pods=not_deleting(stale), wake_at=step.wake_at)


def scheduling(step: Step, group: Group) -> None:
    """Scheduled=False (and a Warning Event per new reason) while a worker cannot be placed; True once all are."""
    unschedulable = _unschedulable(group)
    if unschedulable:
        message = _unschedulable_message(unschedulable[0])
        step.announce("Scheduled", False, "Unschedulable", message, Event("Warning", "Unschedulable", message))
    elif step.has("Scheduled", False):
        step.condition("Scheduled", True, "AllWorkersScheduled", "every worker is scheduled")


def mounting(step: Step, group: Group) -> None:
    """VolumesMounted=False (and a Warning Event per new message) while a worker's volumes cannot be mounted;
    True once none waits for them."""
    failing = _mount_failing(step, group)
    if failing:
        message = _mount_message(step, failing[0])
        step.announce(VOLUMES_MOUNTED, False, FAILED_MOUNT, message, Event("Warning", FAILED_MOUNT, message))
    elif step.has(VOLUMES_MOUNTED, False):
        step.condition(VOLUMES_MOUNTED, True, "AllVolumesMounted", "every worker's volumes are mounted")


def initialized(step: Step) -> None:
    """Initialized=True once pod 0 says its downloads are done (a job with downloads only)."""
    if needs_initialization(step.spec) and step.initialization.done:
        step.condition(INITIALIZED, True, DOWNLOADED, step.initialization.message())


def progress(step: Step, group: Group) -> Plan:
    """Running once every worker runs (or has succeeded) and has its downloads; else Pending's message says why."""
    num_nodes = step.num_nodes
    active = sum(1 for p in group.current.values() if p.phase == RUNNING or p.succeeded)
    if active == num_nodes and needs_initialization(step.spec) and not step.initialization.done:
        # The pods run, but pets-train is still downloading: no training yet.
        message = f"{num_nodes} of {num_nodes} worker(s) started; {step.initialization.message()}"
        step.status.update(phase=PENDING, message=message)
        step.condition(INITIALIZED, False, DOWNLOADING, step.initialization.message())
    elif active == num_nodes:
        message = f"{num_nodes} of {num_nodes} worker(s) running{step.attempt_note()}"
        step.status.update(phase=RUNNING, message=message)
        step.condition(RUNNING, True, "AllWorkersRunning", message)
        step.clear("Restarting", "GroupRunning", f"attempt {step.attempt} is running")
        step.clear("Requeued", "GroupRunning", f"attempt {step.attempt} is running")
    else:
        step.status["message"] = f"{active} of {num_nodes} worker(s) running{step.attempt_note()}{_detail(step, group)}"
    return Plan(step.status, wake_at=step.wake_at)


def _detail(step: Step, group: Group) -> str:
    """Why not every worker runs: the first that cannot be scheduled, the gated ones, or the first waiting container."""
    unschedulable, gated = _unschedulable(group), _pending(group, lambda p: bool(p.gates))
    if unschedulable:
        return f"; {_unschedulable_message(unschedulable[0])}"
    if gated:
        return f"; {_gated_message(gated)}"
    mounting = _mount_failing(step, group)
    if mounting:
        return f"; {_mount_message(step, mounting[0])}"
    waiting = [p for p in group.current.values() if p.phase == PENDING and p.reason]  # in the order the pods came
    return f" ({_waiting_message(waiting[0])})" if waiting else ""


def _pending(group: Group, which: Callable[[PodView], bool]) -> list[PodView]:
    return sorted((p for p in group.current.values() if p.phase == PENDING and which(p)), key=lambda p: p.index)


def _unschedulable(group: Group) -> list[PodView]:
    return _pending(group, lambda p: bool(p.unschedulable))


def _mount_failing(step: Step, group: Group) -> list[PodView]:
    return _pending(group, lambda p: p.name in step.mount_failures)


def _mount_message(step: Step, pod: PodView) -> str:
    return f"pod {pod.name} cannot mount its volumes: {step.mount_failures[pod.name]}"


def _unschedulable_message(pod: PodView) -> str:
    return f"pod {pod.name} cannot be scheduled: {pod.unschedulable}"


def _gated_message(gated: list[PodView]) -> str:
    """Which gates hold the pods; Kueue's admission gate: the Workload (the pods' group) and its queue."""
    gates = sorted({gate for pod in gated for gate in pod.gates})
    text = f"{len(gated)} pod(s) wait for scheduling gate {', '.join(gates)} to be removed"
    kueue = next((p for p in gated if names.KUEUE_ADMISSION_GATE in p.gates), None)
    if kueue is None:
        return text
    workload = f"Workload {kueue.kueue_group}" if kueue.kueue_group else "its Workload"
    queue = f" in LocalQueue {kueue.kueue_queue}" if kueue.kueue_queue else ""
    return (f"waiting for Kueue admission of {workload}{queue}: {text} "
            f"(Kueue admits the whole group once its queue has room for it)")


def _waiting_message(pod: PodView) -> str:
    """`pets-0: ErrImageNeverPull: Container image "x" is not present ...`: why a pod's container waits."""
    return ": ".join(part for part in (pod.name, pod.reason, pod.message) if part)
