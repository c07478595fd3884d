"""The life of one PetsTrainingJob inside the operator: reconcile, act, follow pod 0's log.

One `JobRunner` per job runs in a kopf daemon. Its status is the one it last wrote (the API's
answer to its own patch), not the possibly older copy from the watch, so a step is never
taken twice on stale information; on a fresh start it reads the job from the API.

Spec changes: the API server lets only the mutable fields change (`spec.MUTABLE_FIELDS`:
activeDeadlineSeconds, ttlSecondsAfterFinished, suspend). kopf's daemon `body` is a live view,
refreshed on every watch event; each step takes those fields and `metadata.generation` from it,
and the step's status records that generation as `observedGeneration`. A finished job keeps its
daemon, idle, so a TTL set afterwards is still acted on.

A failed API call never ends the daemon: a failed creation of the group's objects goes to the
next reconcile step (`create_failure`), which fails the job, waits for quota or retries; any
other failed call (a status patch, a delete) is logged in one line and the step is retried
after a backoff.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor
from datetime import datetime, timezone
from typing import Any

from pets_api import contract

from . import builders
from .config import OperatorConfig
from .epochs import EPOCH_FIELDS, EpochBook
from .expectations import Expectations
from .kube import Kube, KubeError
from .logfollow import AsyncPodLogFollower, LogStreams
from .occupants import Occupant, occupant
from .policy import policy_problems
from .reconcile import OWNED_STATUS_FIELDS, Event, Plan, attempt_of, reconcile
from .refusals import TRANSIENT, ApiFailure, CreateFailure, backoff_seconds, most_severe
from .spec import epoch_limit, with_changes, with_defaults
from .status import FINAL_PHASES, PENDING, RUNNING, PodView
from .tracking import fold_into as fold_tracking
from .validation import spec_problems

# Reconcile at least this often without news. News wakes a job at once: its pods' events, a spec change
# (handlers.wake_on_spec_change), pod 0's log drained, and the plan's own timers (`Plan.wake_at`). What
# waits for this step: pod 0's download and tracking lines reaching the status. Every job's step costs
# the operator's one event loop; at 1,000 jobs a 2-s step instead of 1 s took 16% off the operator's CPU
# per job at the same latencies (docs/performance-operator.md).
IDLE_RECHECK_SECONDS = 2.0
MOUNT_CHECK_SECONDS = 5.0  # while a pod waits in ContainerCreating: how often its FailedMount Events are read
CONTAINER_CREATING = "ContainerCreating"
SETTLE_SECONDS = 0.02  # let the other pods' events of the same moment in before the next step
# A status change that is only news of the worker counts or the message, in the same phase (pod 0 done
# before pod 1, a pod ready before the other), waits this long for the next change, so that the group's
# pods ending or starting together cost one status patch instead of one per pod.
MINOR_SETTLE_SECONDS = 1.0
MINOR_FIELDS = frozenset({"workers", "message"})

log = logging.getLogger(__name__)


def minor_change(patch: Mapping[str, Any], owned: Mapping[str, Any]) -> bool:
    """Only the worker counts or the message differ, the phase stays and is not a final one (pure)."""
    changed = {key for key in set(patch) | set(owned) if patch.get(key) != owned.get(key)}
    return bool(changed) and changed <= MINOR_FIELDS and patch.get("phase") not in FINAL_PHASES


class NameTaken(KubeError):
    """A create answered 409 and the object there is not this job's: a name conflict (`occupants`)."""

    def __init__(self, there: Occupant):
        super().__init__(ApiFailure(409, "AlreadyExists", there.describe()))
        self.occupant = there


def _what(body: Mapping[str, Any]) -> str:
    """How a creation names its object: "Pod pets-0", "Service pets-workers"."""
    return f"{body['kind']} {body['metadata']['name']}"


class JobRunner:
    def __init__(self, kube: Kube, job: dict[str, Any], config: OperatorConfig,
                 pods: Callable[[], Iterable[PodView]], post_event: Callable[[Event], None],
                 wakeup: asyncio.Event, logger: logging.Logger | logging.LoggerAdapter = log,
                 executor: Executor | None = None, live: Callable[[], Mapping[str, Any]] | None = None,
                 *, log_streams: LogStreams):
        """`executor` runs the blocking API calls (the operator's pool, made at startup); None: the loop's default.
        `live`: the job as the watch last saw it (kopf's live `body`), read at each step for spec changes;
        None: `job` itself. `log_streams`: where pod 0's log is followed (the operator's, on its event loop)."""
        self.kube = kube
        self.executor = executor
        self.log_streams = log_streams
        self.job = job
        self.name = job["metadata"]["name"]
        self.namespace = job["metadata"]["namespace"]
        self.trainer_image = config.trainer_image
        self.spec = with_defaults(job.get("spec"), config.trainer_image)
        self.generation = job["metadata"].get("generation")
        self._live = live or (lambda: self.job)
        self.command = list(config.trainer_command)
        self.policy = config.policy
        self.network_policy = config.network_policy
        self.scheduler_names = config.gang_scheduler_names
        self.status = dict(job.get("status") or {})
        self._pods = pods
        self._post_event = post_event
        self.wakeup = wakeup
        self.log = logger
        self._loop = asyncio.get_running_loop()
        self._followers: dict[str, AsyncPodLogFollower] = {}
        self._deleted: set[str] = set()  # uids already asked to go
        self._expected = Expectations()  # pods created that the index does not show yet
        self.book = EpochBook(self.status.get("epochs") or [], self._publish_epochs,
                              attempt=attempt_of(self.status), limit=epoch_limit(self.spec))
        # The status's epochs as the book keeps them, when they differ (epochs beyond spec.epochs): patched first.
        stored = {key: self.status.get(key) for key in EPOCH_FIELDS}
        self._epoch_repair = self.book.fields() if self.status.get("epochs") and self.book.fields() != stored else None
        self.create_failure: CreateFailure | None = None  # the last creation of the group's objects, when it failed
        self.restart_backoff = config.restart_backoff_seconds
        self.mount_failures: dict[str, str] = {}  # pod name -> its latest FailedMount message, while it waits
        self._mounts_read_at = float("-inf")
        self._logged_epochs = {int(e["epoch"]): e.get("accuracy") for e in self.book.epochs}  # known or logged
        self._api_failures = 0  # consecutive failed steps (other calls than the creation)
        self._minor_since: float | None = None  # when a status change that can wait (`minor_change`) was first held

    async def call(self, function, *args):
        return await self._loop.run_in_executor(self.executor, function, *args)

    def _publish_epochs(self, fields: dict[str, Any]) -> None:  # runs in the API thread pool
        self.kube.patch_job_status(self.namespace, self.name, fields)
        for entry in fields.get("epochs") or []:  # one line per epoch the status gains (or that changed), once
            epoch, accuracy = int(entry["epoch"]), entry.get("accuracy")
            if self._logged_epochs.get(epoch, ...) != accuracy:
                self._logged_epochs[epoch] = accuracy
                self.log.info("epoch %s: accuracy %.4f", epoch, float("nan") if accuracy is None else accuracy)

    async def run(self, stopped) -> None:
        try:
            while not stopped:
                try:
                    await self._repair_epochs()
                    await self._read_mount_failures()
                    plan = self.step()
                    if not await self.carry_out(plan):
                        return
                    if plan.status.get("phase") in FINAL_PHASES:  # a failed job's pods may run on: not its news
                        self._stop_following()
                    if plan.finished:  # nothing to do unless the spec changes (a TTL set now, say)
                        await self._until_spec_changes(stopped)
                        continue
                except KubeError as error:
                    self._api_failures += 1
                    delay = backoff_seconds(self._api_failures)
                    self.log.warning("API call failed: %s; retrying in %gs", error, delay)
                    await self._wait(delay, stopped)
                    continue
                self._api_failures = 0
                await self._sleep(plan, stopped)
        finally:
            self._stop_following()

    def _stop_following(self) -> None:
        for follower in self._followers.values():
            follower.stop()

    async def _repair_epochs(self) -> None:
        """A status with epochs the book does not keep (at or beyond spec.epochs: another run's) is corrected once."""
        if self._epoch_repair is None:
            return
        self.log.info("status.epochs: keeping only epochs below spec.epochs (%s)", self.spec["epochs"])
        stored = await self.call(self.kube.patch_job_status, self.namespace, self.name, self._epoch_repair)
        self._epoch_repair = None
        if stored is not None:
            self.status = dict(stored.get("status") or {})

    async def _read_mount_failures(self) -> None:
        """The FailedMount Events of the current group's pods that wait in ContainerCreating, every
        MOUNT_CHECK_SECONDS while any does (one list per job, whatever its size); a failed read is logged."""
        attempt = attempt_of(self.status)
        waiting = {p.uid: p.name for p in self._pods()
                   if p.attempt == attempt and p.phase == PENDING and p.reason == CONTAINER_CREATING and not p.deleting}
        self.mount_failures = {name: text for name, text in self.mount_failures.items() if name in waiting.values()}
        if not waiting or time.monotonic() - self._mounts_read_at < MOUNT_CHECK_SECONDS:
            return
        self._mounts_read_at = time.monotonic()
        try:
            found = await self.call(self.kube.failed_mounts, self.namespace)
        except KubeError as error:
            self.log.warning("reading the pods' FailedMount events failed: %s", error)
            return
        self.mount_failures = {name: found[uid] for uid, name in waiting.items() if uid in found}

    def follow_spec(self) -> None:
        """Take the mutable fields, the generation and the labels from the live job, unless it is older than
        what the runner has (the watch can lag behind the read the runner started from)."""
        body = self._live()
        meta = body.get("metadata") or {}
        generation = meta.get("generation")
        if generation is None or (self.generation is not None and int(generation) < int(self.generation)):
            return
        if generation != self.generation:
            self.log.info("spec generation %s: applying its changes to %s", generation,
                          ", ".join(f"{field}" for field in self._changed_fields(body.get("spec"))) or "nothing")
        self.spec = with_changes(self.spec, body.get("spec"), self.trainer_image)
        self.generation = generation
        self.job["metadata"]["labels"] = dict(meta.get("labels") or {})  # a queue-name label counts at creation

    def _changed_fields(self, spec: Mapping[str, Any] | None) -> list[str]:
        fresh = with_changes(self.spec, spec, self.trainer_image)
        return sorted(key for key in set(fresh) | set(self.spec) if fresh.get(key) != self.spec.get(key))

    def spec_changed(self) -> bool:
        generation = (self._live().get("metadata") or {}).get("generation")
        return generation is not None and generation != self.generation and \
            (self.generation is None or int(generation) > int(self.generation))

    async def _until_spec_changes(self, stopped) -> None:
        while not stopped and not self.spec_changed():
            await self._wait(IDLE_RECHECK_SECONDS, stopped)
            self.wakeup.clear()

    def step(self) -> Plan:
        self.follow_spec()
        pods = list(self._pods())
        if self.status.get("phase") not in FINAL_PHASES:
            self._follow_pod0(pods)
        problems = spec_problems(self.name, self.spec, contract.RESERVED_ENV)
        plan = reconcile(self.name, self.spec, self.status, self.generation, pods,
                         datetime.now(timezone.utc), problems, logs_drained=self._pod0_drained(pods),
                         create_failure=self.create_failure, initialization=self.book.initialization,
                         mount_failures=self.mount_failures, restart_backoff=self.restart_backoff,
                         forbidden=policy_problems(self.spec, self.policy, self.trainer_image))
        plan = fold_tracking(plan, self.book.tracking, self.status, self.spec, datetime.now(timezone.utc))
        return self._unless_expected(plan, pods)

    def _unless_expected(self, plan: Plan, pods: list[PodView]) -> Plan:
        """Pods an earlier step created that the index does not show yet are not created again (`expectations`)."""
        self._expected.seen((p.attempt, p.index) for p in pods)
        if not plan.create_pods:
            return plan
        create = self._expected.to_create(attempt_of(plan.status), plan.create_pods, time.monotonic())
        return plan if create == plan.create_pods else dataclasses.replace(plan, create_pods=create)

    async def carry_out(self, plan: Plan) -> bool:
        """False when the job is gone."""
        owned = {key: self.status.get(key) for key in OWNED_STATUS_FIELDS if key in self.status}
        patch = dict(plan.status)
        if plan.new_attempt is not None:
            # Before the patch: from now on no line of the old group's pod 0 reaches the status.
            await self.call(self.book.start_attempt, plan.new_attempt, not plan.clear_epochs)
            if plan.clear_epochs:
                self._logged_epochs = {}  # the new attempt's epochs are news
                patch.update({key: None for key in EPOCH_FIELDS[1:]}, epochs=[])
        if patch != owned and not self._hold(plan, patch, owned):
            stored = await self.call(self.kube.patch_job_status, self.namespace, self.name, patch)
            if stored is None:
                return False
            self.status = dict(stored.get("status") or {})
            self._minor_since = None
        for event in plan.events:
            self._post_event(event)
        if plan.create_pods:
            await self._create_group(plan.create_pods)
        live = {p.name: p.uid for p in self._pods()}
        for pod in plan.delete_pods:
            uid = live.get(pod)
            if uid is not None and uid not in self._deleted:
                self._deleted.add(uid)
                await self.call(self.kube.delete_pod, self.namespace, pod)
        if plan.delete_job:
            self.log.info("ttlSecondsAfterFinished passed: deleting the job")
            await self.call(self.kube.delete_job, self.namespace, self.name)
            return False
        return True

    def _hold(self, plan: Plan, patch: Mapping[str, Any], owned: Mapping[str, Any]) -> bool:
        """True: leave this status change for a later step (at most MINOR_SETTLE_SECONDS after it was first
        held), because it is a `minor_change` and the step does nothing else."""
        if plan.events or plan.create_pods or plan.delete_pods or plan.delete_job or plan.new_attempt is not None \
                or not minor_change(patch, owned):
            return False
        now = time.monotonic()
        if self._minor_since is None:
            self._minor_since = now
        return now - self._minor_since < MINOR_SETTLE_SECONDS

    async def _create_group(self, indexes: list[int]) -> None:
        """The Service, the NetworkPolicy (unless turned off) and the gang scheduler's PodGroup (with
        spec.gangScheduling), created together, then the pods, together; how it failed, if it did, is the
        next step's `create_failure`."""
        attempt = attempt_of(self.status)
        shared = [(self.kube.create_service, builders.service_body(self.job, self.spec))]
        if self.network_policy:  # before the pods: none of them is ever open to other pods than its job's
            shared.append((self.kube.create_network_policy, builders.network_policy_body(self.job)))
        group = builders.pod_group_body(self.job, self.spec)
        if group is not None:  # before the pods, which the gang scheduler places only with their group
            shared.append((self.kube.create_pod_group, group))
        failed = await self._create_each(shared)
        if not failed:
            pods = {index: builders.pod_body(self.job, self.spec, index, attempt, self.command, self.scheduler_names)
                    for index in indexes}
            failed = await self._create_each([(self.kube.create_pod, body) for body in pods.values()])
            for index, body in pods.items():
                if _what(body) not in failed:  # created, or already this job's: not created again until indexed
                    self._expected.created(attempt, [index], time.monotonic())
        self._note_create_failure(attempt, failed)

    async def _create_each(self, creations: list[tuple[Callable[[dict[str, Any]], bool], dict[str, Any]]]) \
            -> dict[str, KubeError]:
        """Each (create, body) at once (`_create`); "<kind> <name>" -> the error of each that failed."""
        results = await asyncio.gather(*(self._create(create, body) for create, body in creations),
                                       return_exceptions=True)
        failed: dict[str, KubeError] = {}
        for (_, body), result in zip(creations, results):
            if isinstance(result, KubeError):
                failed[_what(body)] = result
            elif isinstance(result, BaseException):
                raise result
        return failed

    def _note_create_failure(self, attempt: int, failed: Mapping[str, KubeError]) -> None:
        """The most severe of the creation's failures becomes `create_failure` (None when all went well)."""
        worst = most_severe([(what, error.failure) for what, error in failed.items()])
        if worst is None:
            self.create_failure = None
            return
        what, failure = worst
        previous = self.create_failure
        count = previous.failures + 1 if previous is not None and previous.attempt == attempt else 1
        self.create_failure = CreateFailure(what, failure, attempt, count, datetime.now(timezone.utc),
                                            occupant=getattr(failed[what], "occupant", None))
        # A refusal and a quota reach the job's status and Events in the next step; a transient failure only the log.
        (self.log.warning if failure.kind == TRANSIENT else self.log.info)(
            "creating %s: %s (%s, try %d)", what, failure.describe(), failure.kind, count)

    async def _create(self, create: Callable[[dict[str, Any]], bool], body: dict[str, Any]) -> None:
        """Create one object of the group. One that is there already counts only when it is this job's (its
        controller ownerReference has the job's uid); another's is a NameTaken error naming it."""
        if await self.call(create, body):
            return
        found = await self.call(self.kube.existing, body)
        if found is None:  # gone between the two calls: the next step creates it
            raise KubeError(ApiFailure(None, "Gone", f"{body['kind']} {body['metadata']['name']} was being deleted"))
        there = occupant(found)
        if not there.owned_by(self.job["metadata"].get("uid", "")):
            raise NameTaken(there)

    async def _sleep(self, plan: Plan, stopped) -> None:
        timeout = IDLE_RECHECK_SECONDS
        if plan.wake_at is not None:
            timeout = min(timeout, max(0.0, (plan.wake_at - datetime.now(timezone.utc)).total_seconds()))
        if plan.create_pods or plan.delete_pods:
            timeout = min(timeout, 0.2)  # the index catches up within moments
        if self._minor_since is not None:  # a held status change goes out by its deadline
            timeout = min(timeout, max(0.0, self._minor_since + MINOR_SETTLE_SECONDS - time.monotonic()))
        if await self._wait(timeout, stopped):
            await asyncio.sleep(SETTLE_SECONDS)
        self.wakeup.clear()

    async def _wait(self, timeout: float, stopped) -> bool:
        """Until a pod event wakes the job, the daemon is asked to stop, or `timeout`; True when woken."""
        waits = [asyncio.ensure_future(self.wakeup.wait())]
        if hasattr(stopped, "wait"):  # kopf's DaemonStopped: leave at once when the job goes or the operator stops
            waits.append(asyncio.ensure_future(stopped.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        return self.wakeup.is_set()

    def _pod0(self, pods: list[PodView]) -> PodView | None:
        attempt = attempt_of(self.status)
        return next((p for p in pods if p.index == 0 and p.attempt == attempt), None)

    def _follow_pod0(self, pods: list[PodView]) -> None:
        pod0 = self._pod0(pods)
        # The log exists once the container has started; until then the API answers 400.
        if pod0 is None or pod0.uid in self._followers or pod0.phase not in (RUNNING, *FINAL_PHASES):
            return
        self._followers[pod0.uid] = self.log_streams.follow(
            self.namespace, pod0.name, builders.CONTAINER_NAME, pod0.uid, self.book, on_drained=self.wakeup.set,
            attempt=pod0.attempt)

    def _pod0_drained(self, pods: list[PodView]) -> bool:
        pod0 = self._pod0(pods)
        if pod0 is None:
            return True
        follower = self._followers.get(pod0.uid)
        return follower is not None and follower.drained.is_set()
