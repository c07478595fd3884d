"""kopf wiring (thin): settings, the pod index, and one daemon per PetsTrainingJob.

Everything the operator decides lives in `reconcile`; everything it does to one job lives in
`runner`. Importing this module registers the handlers with kopf's default registry.
"""
from __future__ import annotations

import asyncio
import logging
import os
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

# (namespace, job) -> wakeup of that job's daemon, set whenever one of its pods changes.
_wakeups: dict[tuple[str, str], asyncio.Event] = {}


def _wakeup(namespace: str, job: str) -> asyncio.Event:
    return _wakeups.setdefault((namespace, job), asyncio.Event())


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
    logger.info("pets-operator configured: %s", config)


@kopf.index("v1", "pods", labels={names.LABEL_JOB_NAME: kopf.PRESENT})
async def job_pods(namespace: str, labels: dict[str, str], body: kopf.Body, **_: Any):
    """(namespace, job) -> the job's pods as PodViews; wakes that job's daemon."""
    job = labels[names.LABEL_JOB_NAME]
    view = pod_view(body)
    _wakeup(namespace, job).set()
    return {(namespace, job): view} if view is not None else None


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

    runner = JobRunner(kube, job, memo.config, pods, post_event, _wakeup(namespace, name), logger)
    try:
        await runner.run(stopped)
    finally:
        _wakeups.pop((namespace, name), None)
