"""One step of a PetsTrainingJob's life: (spec, status, pods, now) -> what to do (pure, no IO).

The job daemon calls `reconcile` whenever something may have changed and carries out the plan;
every plan is safe to carry out twice, so an operator restart at any point, or a repeated step,
never makes a duplicate pod or a second group. `_decide` is a ladder of policies, each in its own
module: `finish` (success, TTL), `failure`, `disruption` (suspend, resume, requeue), `deadline`,
`creation` and `waiting` (the running/pending messages); `step` holds the step's inputs and `group`
the pods, sorted once.

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
retrying cannot change fails the job, and so does a name taken by an object that is not the job's
(`NameConflict`) unless that object belongs to an earlier job of the same name (it goes with that job:
the group waits); a quota refusal, a resource the API does not serve (a PodGroup CRD not installed)
or an unanswered call is retried with backoff, the first two said on the job.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from ..initialization import Initialization
from ..refusals import CreateFailure
from ..status import FINAL_PHASES, PodView, timestamp, workers
from . import creation, deadline, disruption, failure, finish, waiting
from .group import Group
from .plan import Event, Plan
from .step import OWNED_STATUS_FIELDS, RESTART_BACKOFF_SECONDS, Step, attempt_of

__all__ = ["OWNED_STATUS_FIELDS", "Event", "Plan", "attempt_of", "reconcile"]


def reconcile(name: str, spec: Mapping[str, Any], status: Mapping[str, Any] | None, generation: int | None,
              pods: Iterable[PodView], now: datetime, problems: list[str], logs_drained: bool = True,
              create_failure: CreateFailure | None = None, initialization: Initialization | None = None,
              mount_failures: Mapping[str, str] | None = None,
              restart_backoff: float = RESTART_BACKOFF_SECONDS, forbidden: list[str] | None = None) -> Plan:
    """`spec` has the defaults applied; `problems` are its validation problems (empty when valid);
    `forbidden`: the rules of the cluster's policy it breaks (`policy`);
    `create_failure`: how the last creation of the group's objects failed, None when it did not;
    `initialization`: what pod 0's log said of its downloads (the current attempt's); `mount_failures`:
    pod name -> the kubelet's FailedMount message; `restart_backoff`: seconds before the first restart."""
    step = Step.begin(name, spec, status, generation, now, list(pods), logs_drained, create_failure,
                      initialization or Initialization(), mount_failures=dict(mount_failures or {}),
                      restart_backoff=restart_backoff)
    plan = _decide(step, problems, forbidden or [])
    plan.events[:0] = step.events
    return plan


def _decide(step: Step, problems: list[str], forbidden: list[str]) -> Plan:
    if step.status.get("phase") in FINAL_PHASES:
        return finish.finished(step)
    if forbidden and not step.pods:  # checked before pods are created: a running group is left to finish
        return failure.refused_by_policy(step, forbidden)
    if problems:
        return failure.invalid_spec(step, problems)
    group = Group.of(step.pods, step.attempt, step.num_nodes)
    if step.spec.get("suspend") and not group.done:  # a group that has done its work is let finish
        return disruption.suspend(step, group)
    if step.has("Suspended", True):
        disruption.resume(step)
    step.status.setdefault("startTime", timestamp(step.now))
    step.status["workers"] = workers(group.current.values(), step.num_nodes)
    step.wake_at = deadline.due(step)
    if step.wake_at is not None and step.now >= step.wake_at:
        return deadline.exceeded(step)
    if step.create_failure is not None and failure.ends_the_job(step, step.create_failure):
        return failure.creation_failed(step, step.create_failure)
    return _decide_for_group(step, group)


def _decide_for_group(step: Step, group: Group) -> Plan:
    if not group.missing:
        creation.created(step)
    # A pod taken away wins over a failure of another pod, which may be the loss of its peer.
    if group.taken:
        return disruption.requeue(step, group.taken)
    if group.failed:
        return failure.worker_failed(step, group.failed)
    if group.stale:
        return waiting.for_stale_pods(step, group.stale)
    if group.missing:
        return creation.create(step, group.missing)
    waiting.scheduling(step, group)
    waiting.mounting(step, group)
    waiting.initialized(step)
    if group.done:
        return finish.succeeded(step)
    return waiting.progress(step, group)
