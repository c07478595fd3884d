"""Issue 23: a permanent error ends the job at once, whatever backoffLimit allows (as a Job's podFailurePolicy
FailJob rule does): the real operator and the real trainer on the local cluster, the archive from a stand-in
host on 127.0.0.1."""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from http_hosts import FileHost  # noqa: E402

pytestmark = pytest.mark.e2e

ARCHIVE = "/data/pets.tar.gz"


@pytest.fixture
def host():
    server = FileHost()
    yield server
    server.close()


def status_of(api, name):
    return (api.job(name) or {}).get("status") or {}


def test_a_wrong_checksum_with_backoff_limit_2_downloads_once_and_fails_at_once(api, operator_process, wait_for, host):
    archive = b"an archive whose checksum is not the one the job names"
    host.files[ARCHIVE] = archive
    operator = operator_process()
    api.create_job("bad-sum", {"numNodes": 1, "epochs": 1, "model": "resnet10t", "backoffLimit": 2,
                               "data": {"download": {"url": host.url + ARCHIVE, "sha256": "0" * 64}},
                               "env": [{"name": "OMP_NUM_THREADS", "value": "1"}]})
    status = wait_for("Failed", lambda: status_of(api, "bad-sum").get("phase") == "Failed" and status_of(api, "bad-sum"),
                      180, operator.logs)
    assert sum(1 for method, path, _ in host.requests if method == "GET" and path == ARCHIVE) == 1, host.requests
    assert status["restarts"] == 0 and not [e for e in api.events("bad-sum") if e.reason == "Restarting"]
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "DataUnavailable"
    assert f"sha256 is {hashlib.sha256(archive).hexdigest()}, expected {'0' * 64}" in status["message"]
    assert "not restarted: a permanent error (DataUnavailable)" in status["message"]
