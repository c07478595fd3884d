"""kopf wiring (thin): settings, the pod index, and one daemon per PetsTrainingJob.

Everything the operator decides lives in `reconcile`; everything it does to one job lives in
`runner`. Importing this module registers the handlers with kopf's default registry.

Operator-wide state lives in kopf's `memo`, set up at startup (kopf hands each object a shallow
copy, so every handler shares these objects): the
configuration, the API client, the thread pools for blocking API calls (`apipools`: the jobs' steps, and
their epochs' status patches apart), the followed pod logs
(`logfollow`), the Prometheus metrics (`metrics`: fed by a job event handler), and the wakeups of the
job daemons. The pod index stays a pure function of the pods; waking a job's daemon when one of
its pods changes is a separate pod event handler, which kopf runs after the index is updated.

No finalizer: kopf puts its finalizer on every object a daemon runs for (so that it can stop the
daemon before the object goes), which would keep `kubectl delete ptj` waiting whenever the operator is
down or uninstalled. The job needs nothing done at its deletion (its pods, Service, NetworkPolicy and
PodGroup go by owner references, as a JobSet's or a Kubeflow TrainJob's do), so the daemon is
registered without one, and a job event handler stops a deleted job's daemon itself. A finalizer
left on a job by an older operator is removed by kopf when it next sees the job (its listing at startup).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Mapping
from concurrent.futures import Executor
from typing import Any

import kopf

from pets_api import GROUP, KIND, PLURAL, VERSION, names

from . import metrics
from .apipools import ApiPools
from .config import from_environ
from .kube import Kube, KubeError, load_api_client
from .logfollow import LogStreams
from .occupants import occupant
from .reconcile import Event
from .refusals import backoff_seconds
from .runner import JobRunner
from .status import pod_view
from .tlsbuffers import shrink_tls_read_buffers

# A job's daemon leaves by itself as soon as it is told to stop (the job is deleted, the operator exits):
# kopf waits this long for that before it cancels the daemon (which it logs as a warning).
DAEMON_STOP_GRACE_SECONDS = 10
DAEMON_CANCELLATION_SECONDS = 10
# How long kopf waits for a daemon told to stop before it polls again (its default: 10 event loop cycles);
# within it the daemon's current API call ends and it exits, so the job's finalizer goes at once.
DAEMON_INSTANT_EXIT_SECONDS = 2.0
WAKE_HANDLER_ID = "wake-job"
METRICS_HANDLER_ID = "job-metrics"
SPEC_WAKE_HANDLER_ID = "wake-on-spec-change"
DELETED_HANDLER_ID = "job-deleted"


class _QuietWakeups(logging.Filter):
    """Drops kopf's "Handler 'wake-job' (or 'job-metrics', 'job-deleted') is invoked / succeeded" lines: one per
    event, no news."""

    quiet = tuple(f"Handler {handler!r}" for handler in (WAKE_HANDLER_ID, METRICS_HANDLER_ID, DELETED_HANDLER_ID,
                                                          SPEC_WAKE_HANDLER_ID))

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.getMessage().startswith(self.quiet)


_QUIET_WAKEUPS = _QuietWakeups()


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger, **_: Any) -> None:
    config = from_environ(os.environ)
    logging.getLogger().setLevel(config.log_level_number)
    # Keep kopf's bookkeeping out of the job's status: annotations and an own finalizer name.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration")
    settings.persistence.finalizer = f"{GROUP}/operator"
    # Handler log lines become Events only from warnings up; our own Events are posted explicitly.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.background.instant_exit_timeout = DAEMON_INSTANT_EXIT_SECONDS
    # Serving named namespaces, kopf would still list namespaces and watch CRDs (both cluster-wide) to
    # notice them change; the chart's namespaced Roles grant neither, so each try is a 403. The
    # namespaces and the CRD are fixed at install: no scanning (docs/security.md, Least privilege).
    settings.scanning.disabled = not config.cluster_wide
    memo.config = config
    memo.metrics = metrics.default()
    api_client = await asyncio.to_thread(load_api_client)
    memo.kube = metrics.CountedKube(Kube(api_client), memo.metrics)  # failed calls counted by verb
    memo.pools = ApiPools.start()
    shrink_tls_read_buffers()  # before the followed logs' connections: one per job
    memo.log_streams = LogStreams(api_client.configuration, memo.pools.epochs, on_epoch=memo.metrics.epoch_to_status,
                                  on_delivery=memo.metrics.epoch_delivered,
                                  on_error=lambda verb, resource, error: memo.metrics.api_error(
                                      verb, resource, getattr(error, "status", None)))
    memo.metrics.followed_logs.set_function(lambda: len(memo.log_streams.followers))
    # (namespace, job) -> the wakeup of that job's running daemon.
    memo.wakeups = {}
    # job uid -> set when the job is deleted: its daemon stops (no finalizer makes kopf do it).
    memo.deletions = {}
    logging.getLogger("kopf.objects").addFilter(_QUIET_WAKEUPS)
    logger.info("pets-operator configured: %s", config)


@kopf.on.cleanup()
async def shut_down(memo: kopf.Memo, **_: Any) -> None:
    """kopf runs this after the daemons have stopped: no job needs the API threads any more."""
    streams: LogStreams | None = getattr(memo, "log_streams", None)
    if streams is not None:
        await streams.close()
    pools: ApiPools | None = getattr(memo, "pools", None)
    if pools is not None:
        pools.shutdown()
    logging.getLogger("kopf.objects").removeFilter(_QUIET_WAKEUPS)


@kopf.index("v1", "pods", labels={names.LABEL_JOB_NAME: kopf.PRESENT})
async def job_pods(namespace: str, body: kopf.Body, **_: Any):
    """(namespace, job uid) -> the job's pods as PodViews: only pods whose controller ownerReference is the job.
    A pod that merely carries the job's name label (a plain one, an earlier same-named job's) is never its own."""
    view = pod_view(body)
    owner = occupant(body)
    if view is None or owner.owner_kind != KIND or not owner.owner_uid:
        return None
    return {(namespace, owner.owner_uid): view}


@kopf.on.event("v1", "pods", labels={names.LABEL_JOB_NAME: kopf.PRESENT}, id=WAKE_HANDLER_ID)
async def wake_job(namespace: str, labels: dict[str, str], memo: kopf.Memo, **_: Any) -> None:
    """One of a job's pods changed (the index already has it): wake that job's daemon, if it runs."""
    _wake(memo, namespace, labels[names.LABEL_JOB_NAME])


def spec_ahead(meta: Mapping[str, Any], status: Mapping[str, Any], **_: Any) -> bool:
    """The job's spec has a generation its status has not observed yet (a change such as `suspend`, or a job no
    step has reported on): its daemon has news, which its own status patches never are (pure)."""
    generation, observed = meta.get("generation"), status.get("observedGeneration")
    return generation is not None and (observed is None or int(observed) < int(generation))


@kopf.on.event(GROUP, VERSION, PLURAL, id=SPEC_WAKE_HANDLER_ID, when=spec_ahead)
async def wake_on_spec_change(namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    """A spec change wakes the job's daemon at once, instead of at its next idle step."""
    _wake(memo, namespace, name)


def _wake(memo: kopf.Memo, namespace: str, name: str) -> None:
    wakeup = memo.wakeups.get((namespace, name))
    if wakeup is not None:
        wakeup.set()


@kopf.on.event(GROUP, VERSION, PLURAL, id=METRICS_HANDLER_ID)
async def job_metrics(type: str | None, namespace: str, name: str, status: kopf.Status, memo: kopf.Memo,
                      **_: Any) -> None:
    """Every change of a job, as the API has it: phases, totals, epochs and accuracy in the metrics."""
    memo.metrics.job_event(type, namespace, name, status)


@kopf.on.event(GROUP, VERSION, PLURAL, id=DELETED_HANDLER_ID)
async def job_deleted(type: str | None, uid: str, memo: kopf.Memo, **_: Any) -> None:
    """The job is gone: its daemon stops now (kopf would, were there a finalizer)."""
    deleted = memo.deletions.get(uid) if type == "DELETED" else None
    if deleted is not None:
        deleted.set()


class JobStopped:
    """What ends a job's daemon: kopf's stop (the operator stops or pauses) or the job's deletion."""

    def __init__(self, daemon: kopf.DaemonStopped, deleted: asyncio.Event):
        self.daemon, self.deleted = daemon, deleted

    def __bool__(self) -> bool:
        return bool(self.daemon) or self.deleted.is_set()

    @property
    def job_deleted(self) -> bool:
        reason = self.daemon.reason
        return self.deleted.is_set() or bool(reason and reason & kopf.DaemonStoppingReason.RESOURCE_DELETED)

    async def wait(self, timeout: float | None = None) -> bool:
        waits = [asyncio.ensure_future(self.daemon.wait()), asyncio.ensure_future(self.deleted.wait())]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        return bool(self)


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_backoff=DAEMON_STOP_GRACE_SECONDS,
             cancellation_timeout=DAEMON_CANCELLATION_SECONDS)
async def run_job(name: str, namespace: str, uid: str, body: kopf.Body, memo: kopf.Memo,
                  stopped: kopf.DaemonStopped, job_pods: kopf.Index, logger, **_: Any) -> None:
    deleted = memo.deletions[uid] = asyncio.Event()
    try:
        await _run_job(name, namespace, uid, body, memo, JobStopped(stopped, deleted), job_pods, logger)
    finally:
        if memo.deletions.get(uid) is deleted:
            del memo.deletions[uid]


def _without_finalizer(daemon: Any, registry: Any = None) -> None:
    """Register `daemon` so that kopf puts no finalizer on its objects (kopf offers no switch for daemons:
    nolar/kopf#896 and #1183 were declined; the handler's `requires_finalizer` is what it reads)."""
    spawning = (registry or kopf.get_default_registry())._spawning
    spawning._handlers = [dataclasses.replace(handler, requires_finalizer=False) if handler.fn is daemon else handler
                          for handler in spawning._handlers]


_without_finalizer(run_job)


async def _run_job(name: str, namespace: str, uid: str, body: kopf.Body, memo: kopf.Memo, stopped: JobStopped,
                   job_pods: kopf.Index, logger) -> None:
    kube: Kube = memo.kube
    job = await _read_job(kube, namespace, name, stopped, logger, memo.pools.steps)  # fresher than the watch's copy
    if job is None or job["metadata"].get("uid") != uid:  # gone, or already a new job of the same name
        return

    def pods():
        return list(job_pods.get((namespace, uid), []))

    def post_event(event: Event) -> None:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
        (logger.warning if event.type == "Warning" else logger.info)("%s: %s", event.reason, event.message)

    key = (namespace, name)
    wakeup = memo.wakeups[key] = asyncio.Event()
    # kopf keeps `body` current with every watch event of the job: the runner follows its spec changes there.
    runner = JobRunner(kube, job, memo.config, pods, post_event, wakeup, logger, executor=memo.pools.steps,
                       live=lambda: body, log_streams=memo.log_streams)
    try:
        await runner.run(stopped)
    finally:
        if memo.wakeups.get(key) is wakeup:  # a newer daemon of a same-named job keeps its own
            del memo.wakeups[key]
    # Without a stop, the runner ended because the job is gone (its status patch found nothing).
    logger.info("stopped following the job (%s)",
                "the operator stops or pauses" if stopped and not stopped.job_deleted else "the job is deleted")


async def _read_job(kube: Kube, namespace: str, name: str, stopped: JobStopped, logger,
                    executor: Executor) -> dict | None:
    """The job from the API; a failed read is retried with backoff (one log line each), never a daemon crash.

    In the jobs' own pool (`executor`), not `asyncio.to_thread`'s default pool of cpu_count + 4 threads
    (6 on 2 cores), so no second queue stands in front of a job's start when many jobs arrive at once
    (at 1,000 jobs on kube-apiserver it made no measurable difference: docs/performance-operator.md)."""
    failures = 0
    while not stopped:
        try:
            return await asyncio.get_running_loop().run_in_executor(executor, kube.get_job, namespace, name)
        except KubeError as error:
            failures += 1
            delay = backoff_seconds(failures)
            logger.warning("reading the job failed: %s; retrying in %gs", error, delay)
            await stopped.wait(delay)
    return None
