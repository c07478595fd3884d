"""The operator's two pools for blocking API calls (`apipools`): an epoch's status patch never waits behind the
jobs' steps, and the handlers hand each pool its callers."""
from __future__ import annotations

import asyncio
import logging
import threading

import kopf
import kubernetes
import pytest

from pets_operator import handlers
from pets_operator.apipools import ApiPools
from pets_operator.epochs import EpochBook
from pets_operator.logfollow import add_entries


async def test_an_epoch_patch_never_waits_behind_the_jobs_steps():
    pools = ApiPools.start(step_threads=2, epoch_threads=1)
    loop = asyncio.get_running_loop()
    release = threading.Event()
    try:
        busy = [loop.run_in_executor(pools.steps, release.wait, 10) for _ in range(3)]  # every step thread, and one queued
        published = []
        book = EpochBook([], published.append)
        recorded = await asyncio.wait_for(
            loop.run_in_executor(pools.epochs, add_entries, book, [{"epoch": 0, "accuracy": 0.5}], None, False), 5)
        assert recorded == {0} and published[0]["currentEpoch"] == 1
        assert not any(call.done() for call in busy)
    finally:
        release.set()
        pools.shutdown()


async def test_shutdown_drops_the_calls_still_queued():
    pools = ApiPools.start(step_threads=1, epoch_threads=1)
    release = threading.Event()
    running = pools.steps.submit(release.wait, 10)
    queued = pools.steps.submit(lambda: "ran")
    pools.shutdown()
    release.set()
    assert running.result(5) is True and queued.cancelled()


@pytest.fixture
def configured(monkeypatch):
    monkeypatch.setattr(handlers, "load_api_client",
                        lambda: kubernetes.client.ApiClient(kubernetes.client.Configuration(host="http://127.0.0.1:9")))
    monkeypatch.setattr(handlers, "shrink_tls_read_buffers", lambda: None)  # process-wide: its own test's
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", root.level)  # configure sets the operator's log level

    async def configure():
        memo = kopf.Memo()
        await handlers.configure(settings=kopf.OperatorSettings(), memo=memo, logger=logging.getLogger(__name__))
        return memo

    return configure


async def test_the_followed_logs_patch_epochs_in_their_own_pool(configured):
    memo = await configured()
    try:
        assert memo.log_streams.executor is memo.pools.epochs
        assert memo.pools.epochs is not memo.pools.steps
    finally:
        await handlers.shut_down(memo=memo)
    for pool in (memo.pools.steps, memo.pools.epochs):
        with pytest.raises(RuntimeError):
            pool.submit(print)
