"""The life of one PetsTrainingJob inside the operator: reconcile, act, follow pod 0's log.

One `JobRunner` per job runs in a kopf daemon. Its status is the one it last wrote (the API's
answer to its own patch), not the possibly older copy from the watch, so a step is never
taken twice on stale information; on a fresh start it reads the job from the API.
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from . import builders, contract
from .config import OperatorConfig
from .follower import EpochBook, PodLogFollower
from .kube import Kube
from .reconcile import OWNED_STATUS_FIELDS, Event, Plan, reconcile
from .spec import with_defaults
from .status import FINAL_PHASES, PENDING, RUNNING, PodView
from .validation import spec_problems

IDLE_RECHECK_SECONDS = 1.0  # reconcile at least this often even without pod events
SETTLE_SECONDS = 0.02  # let the other pods' events of the same moment in before the next step

log = logging.getLogger(__name__)


class JobRunner:
    def __init__(self, kube: Kube, job: dict[str, Any], config: OperatorConfig,
                 pods: Callable[[], Iterable[PodView]], post_event: Callable[[Event], None],
                 wakeup: asyncio.Event, logger: logging.Logger | logging.LoggerAdapter = log,
                 executor: Executor | None = None):
        """`executor` runs the blocking API calls (the operator's pool, made at startup); None: the loop's default."""
        self.kube = kube
        self.executor = executor
        self.job = job
        self.name = job["metadata"]["name"]
        self.namespace = job["metadata"]["namespace"]
        self.spec = with_defaults(job.get("spec"), config.trainer_image)
        self.command = list(config.trainer_command)
        self.status = dict(job.get("status") or {})
        self._pods = pods
        self._post_event = post_event
        self.wakeup = wakeup
        self.log = logger
        self._loop = asyncio.get_running_loop()
        self._followers: dict[str, PodLogFollower] = {}
        self._deleted: set[str] = set()  # uids already asked to go
        self.book = EpochBook(self.status.get("epochs") or [], self._publish_epochs)

    async def call(self, function, *args):
        return await self._loop.run_in_executor(self.executor, function, *args)

    def _publish_epochs(self, fields: dict[str, Any]) -> None:  # runs in a follower thread
        self.kube.patch_job_status(self.namespace, self.name, fields)
        self.log.info("epoch %s: accuracy %.4f", fields.get("currentEpoch"), fields.get("accuracy", float("nan")))

    async def run(self, stopped) -> None:
        try:
            while not stopped:
                plan = self.step()
                if not await self.carry_out(plan) or plan.finished:
                    return
                await self._sleep(plan, stopped)
        finally:
            for follower in self._followers.values():
                follower.stop()

    def step(self) -> Plan:
        pods = list(self._pods())
        self._follow_pod0(pods)
        problems = spec_problems(self.name, self.spec, contract.RESERVED_ENV)
        return reconcile(self.name, self.spec, self.status, self.job["metadata"].get("generation"), pods,
                         datetime.now(timezone.utc), problems, logs_drained=self._pod0_drained(pods))

    async def carry_out(self, plan: Plan) -> bool:
        """False when the job is gone."""
        owned = {key: self.status.get(key) for key in OWNED_STATUS_FIELDS if key in self.status}
        if plan.status != owned:
            stored = await self.call(self.kube.patch_job_status, self.namespace, self.name, plan.status)
            if stored is None:
                return False
            self.status = dict(stored.get("status") or {})
        for event in plan.events:
            self._post_event(event)
        if plan.create_pods:
            await self.call(self.kube.create_service, builders.service_body(self.job, self.spec))
            attempt = int(self.status.get("restarts") or 0)
            bodies = [builders.pod_body(self.job, self.spec, index, attempt, self.command) for index in plan.create_pods]
            await asyncio.gather(*(self.call(self.kube.create_pod, body) for body in bodies))
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

    async def _sleep(self, plan: Plan, stopped) -> None:
        timeout = IDLE_RECHECK_SECONDS
        if plan.wake_at is not None:
            timeout = min(timeout, max(0.0, (plan.wake_at - datetime.now(timezone.utc)).total_seconds()))
        if plan.create_pods or plan.delete_pods:
            timeout = min(timeout, 0.2)  # the index catches up within moments
        try:
            await asyncio.wait_for(self.wakeup.wait(), timeout)
            await asyncio.sleep(SETTLE_SECONDS)
        except asyncio.TimeoutError:
            pass
        self.wakeup.clear()

    def _pod0(self, pods: list[PodView]) -> PodView | None:
        attempt = int(self.status.get("restarts") or 0)
        return next((p for p in pods if p.index == 0 and p.attempt == attempt), None)

    def _follow_pod0(self, pods: list[PodView]) -> None:
        pod0 = self._pod0(pods)
        # The log exists once the container has started; until then the API answers 400.
        if pod0 is None or pod0.uid in self._followers or pod0.phase not in (RUNNING, *FINAL_PHASES):
            return
        self._followers[pod0.uid] = PodLogFollower(
            pod0.uid,
            open_log=lambda: self.kube.open_pod_log(self.namespace, pod0.name, builders.CONTAINER_NAME),
            pod_state=lambda: self._pod_state(pod0.name),
            book=self.book,
            on_drained=lambda: self._loop.call_soon_threadsafe(self.wakeup.set),
            name=pod0.name,
        ).start()

    def _pod_state(self, pod: str) -> tuple[str, str] | None:
        body = self.kube.read_pod(self.namespace, pod)
        if body is None:
            return None
        return body["metadata"].get("uid", ""), (body.get("status") or {}).get("phase", PENDING)

    def _pod0_drained(self, pods: list[PodView]) -> bool:
        pod0 = self._pod0(pods)
        if pod0 is None:
            return True
        follower = self._followers.get(pod0.uid)
        return follower is not None and follower.drained.is_set()
