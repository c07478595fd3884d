"""kopf wiring (thin): settings, the pod index, and one daemon per PetsTrainingJob.

Everything the operator decides lives in `reconcile`; everything it does to one job lives in
`runner`. Importing this module registers the handlers with kopf's default registry.

Operator-wide state lives in kopf's `memo`, set up at startup (kopf hands each object a shallow
copy, so every handler shares these objects): the
configuration, the API client, the thread pool for blocking API calls, and the wakeups of the
job daemons. The pod index stays a pure function of the pods; waking a job's daemon when one of
its pods changes is a separate pod event handler, which kopf runs after the index is updated.
"""
from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

from pets_operator import GROUP, PLURAL, VERSION

from . import names
from .config import from_environ
from .kube import Kube, load_api_client
from .reconcile import Event
from .runner import JobRunner
from .status import pod_view

DAEMON_CANCELLATION_SECONDS = 10
API_THREADS = 32  # blocking API calls of every job at once; log followers have their own threads
WAKE_HANDLER_ID = "wake-job"


class _QuietWakeups(logging.Filter):
    """Drops kopf's "Handler 'wake-job' is invoked / succeeded" lines: one per pod event, no news."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.getMessage().startswith(f"Handler {WAKE_HANDLER_ID!r}")


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
    memo.config = config
    memo.kube = Kube(await asyncio.to_thread(load_api_client))
    memo.api_executor = ThreadPoolExecutor(max_workers=API_THREADS, thread_name_prefix="kube")
    # (namespace, job) -> the wakeup of that job's running daemon.
    memo.wakeups = {}
    logging.getLogger("kopf.objects").addFilter(_QUIET_WAKEUPS)
    logger.info("pets-operator configured: %s", config)


@kopf.on.cleanup()
async def shut_down(memo: kopf.Memo, **_: Any) -> None:
    """kopf runs this after the daemons have stopped: no job needs the API threads any more."""
    executor: ThreadPoolExecutor | None = getattr(memo, "api_executor", None)
    if executor is not None:
        executor.shutdown(wait=False, cancel_futures=True)
    logging.getLogger("kopf.objects").removeFilter(_QUIET_WAKEUPS)


@kopf.index("v1", "pods", labels={names.LABEL_JOB_NAME: kopf.PRESENT})
async def job_pods(namespace: str, labels: dict[str, str], body: kopf.Body, **_: Any):
    """(namespace, job) -> the job's pods as PodViews."""
    view = pod_view(body)
    return {(namespace, labels[names.LABEL_JOB_NAME]): view} if view is not None else None


@kopf.on.event("v1", "pods", labels={names.LABEL_JOB_NAME: kopf.PRESENT}, id=WAKE_HANDLER_ID)
async def wake_job(namespace: str, labels: dict[str, str], memo: kopf.Memo, **_: Any) -> None:
    """One of a job's pods changed (the index already has it): wake that job's daemon, if it runs."""
    wakeup = memo.wakeups.get((namespace, labels[names.LABEL_JOB_NAME]))
    if wakeup is not None:
        wakeup.set()


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=DAEMON_CANCELLATION_SECONDS)
async def run_job(name: str, namespace: str, body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped,
                  job_pods: kopf.Index, logger, **_: Any) -> None:
    kube: Kube = memo.kube
    job = await asyncio.to_thread(kube.get_job, namespace, name)  # fresher than the watch's copy
    if job is None:
        return

    def pods():
        return list(job_pods.get((namespace, name), []))

    def post_event(event: Event) -> None:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
        (logger.warning if event.type == "Warning" else logger.info)("%s: %s", event.reason, event.message)

    key = (namespace, name)
    wakeup = memo.wakeups[key] = asyncio.Event()
    runner = JobRunner(kube, job, memo.config, pods, post_event, wakeup, logger, executor=memo.api_executor)
    try:
        await runner.run(stopped)
    finally:
        if memo.wakeups.get(key) is wakeup:  # a newer daemon of a same-named job keeps its own
            del memo.wakeups[key]
