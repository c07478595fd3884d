"""The kubelet's pod status writes (`pets_localkube.status_report`): again until they land, the newest last."""
from __future__ import annotations

import asyncio

import aiohttp
import pytest

from pets_localkube import status_report
from pets_localkube.client import ApiStatusError
from pets_localkube.status_report import StatusReporter, transient


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(status_report, "RETRY_FIRST", 0.01)
    monkeypatch.setattr(status_report, "RETRY_MAX", 0.02)


class FlakyApi:
    """Fails the first `failures` writes with `error`, then records each status written."""

    def __init__(self, failures: int, error: BaseException):
        self.failures = failures
        self.error = error
        self.tries: list[str] = []
        self.written: list[str] = []

    async def write(self, status: dict) -> None:
        self.tries.append(status["phase"])
        if self.failures:
            self.failures -= 1
            raise self.error
        self.written.append(status["phase"])


@pytest.mark.parametrize("error", [aiohttp.ClientConnectionError("refused"), ApiStatusError(503, {"message": "etcd"}),
                                   ApiStatusError(429, {"message": "slow down"}), asyncio.TimeoutError()],
                         ids=["no-answer", "503", "429", "timeout"])
async def test_a_transient_failure_is_written_again_until_it_lands(error):
    api = FlakyApi(failures=3, error=error)
    await StatusReporter(api.write, "pod p").send({"phase": "Succeeded"})
    assert api.tries == ["Succeeded"] * 4
    assert api.written == ["Succeeded"]


@pytest.mark.parametrize("code", [404, 422])
async def test_a_refusal_is_not_tried_again(code):
    api = FlakyApi(failures=1, error=ApiStatusError(code, {"message": "no"}))
    await StatusReporter(api.write, "pod p").send({"phase": "Running"})
    assert api.tries == ["Running"] and api.written == []


async def test_a_newer_status_replaces_the_waiting_one_and_the_older_never_lands_after_it():
    api = FlakyApi(failures=3, error=aiohttp.ClientConnectionError("refused"))
    reporter = StatusReporter(api.write, "pod p")
    running = asyncio.create_task(reporter.send({"phase": "Running"}))
    while not api.tries:
        await asyncio.sleep(0.001)
    await reporter.send({"phase": "Succeeded"})
    await running
    assert api.written == ["Succeeded"]
    assert api.tries[-1] == "Succeeded" and api.tries[0] == "Running"


def test_what_is_transient():
    assert transient(aiohttp.ServerDisconnectedError()) and transient(ConnectionRefusedError())
    assert transient(ApiStatusError(500, {})) and transient(ApiStatusError(429, {}))
    assert not transient(ApiStatusError(409, {})) and not transient(ValueError("bad"))
