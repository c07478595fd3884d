"""The real operator behind a proxy that throttles (429 + Retry-After) or fails (5xx bursts) its API calls.

Every call of the operator goes through the proxy: kopf's watches, patches and Events, its own
status patches and creations, pod 0's log, the leader election's lease. The proxy's request log
times each one, so the waits are measured where the server would see them.
"""
from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.fault_proxy import FaultProxy

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def api_errors(port: int) -> dict[tuple[str, str, str], float]:
    """pets_operator_api_errors_total by (verb, resource, code), from the operator's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {(s.labels["verb"], s.labels["resource"], s.labels["code"]): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "pets_operator_api_errors_total"}


@pytest.fixture
def proxy(cluster, tmp_path):
    with FaultProxy(cluster.url, tmp_path / "faults") as running:
        yield running


@pytest.fixture
def metrics_port():
    return free_port()


# The lease's renewals go through the proxy too. A burst counted in failures lasts as long as the calls
# take to use it up (the operator backs off, so longer on a loaded machine); past the default 10 s renew
# deadline the leader would exit, as it must (test_leader_election.py). These tests are about retries:
# their lease outlives any burst here.
BURST_PROOF_LEASE = {"PETS_OPERATOR_LEASE_DURATION_SECONDS": "90", "PETS_OPERATOR_LEASE_RENEW_DEADLINE_SECONDS": "60",
                     "PETS_OPERATOR_LEASE_RETRY_PERIOD_SECONDS": "2"}


@pytest.fixture
def operator(operator_process, stand_in_env, proxy, metrics_port):
    return operator_process({**stand_in_env, **BURST_PROOF_LEASE, "KUBECONFIG": str(proxy.kubeconfig),
                             "PETS_OPERATOR_METRICS_PORT": str(metrics_port)})


def job_spec(epochs: int, epoch_seconds: float = 0.2) -> dict:
    return {"numNodes": 2, "epochs": epochs, "model": "resnet10t", "data": {"synthetic": {}},
            "env": [{"name": "STAND_IN_EPOCH_SECONDS", "value": str(epoch_seconds)}]}


def status_of(api, name: str) -> dict:
    return (api.job(name) or {}).get("status") or {}


def succeeded(api, name: str):
    return lambda: status_of(api, name).get("phase") == "Succeeded" and status_of(api, name)


def assert_never_crashed(operator):
    assert operator.process.poll() is None and operator.starts == 1
    assert "Traceback" not in operator.logs(), operator.logs()[-4000:]


def next_after(requests, method: str, path: str, after: float):
    return next((r for r in requests if r.method == method and r.path == path and r.arrived > after), None)


# The job carries no finalizer (kopf's daemon is registered without one), so kopf's own writes are its Events.
@pytest.mark.parametrize("method, path, who, counted_as", [
    ("PATCH", r"/petstrainingjobs/throttled/status$", "the operator's status patch",
     ("patch", "petstrainingjobs/status", "429")),
    ("POST", r"/namespaces/default/events$", "kopf's post of an Event", ("create", "events", "429")),
])
def test_after_a_429_with_retry_after_the_next_try_waits_that_long(api, proxy, operator, metrics_port, wait_for,
                                                                    method, path, who, counted_as):
    throttled = proxy.fail(method, path, status=429, reason="TooManyRequests",
                           message="Too many requests, please try again later.", retry_after=2, times=1)
    api.create_job("throttled", job_spec(epochs=3))
    status = wait_for("Succeeded", succeeded(api, "throttled"), 90, operator.logs)
    assert throttled.hits == 1 and [e["epoch"] for e in status["epochs"]] == [0, 1, 2]
    refused = next(r for r in proxy.requests if r.status == 429)
    retried = wait_for(f"{who} to be tried again", lambda: next_after(proxy.requests, method, refused.path,
                                                                      refused.answered), 30, operator.logs)
    assert retried.arrived - refused.answered >= 2.0, (who, retried.arrived - refused.answered)
    assert "Failed" not in {c["type"] for c in status.get("conditions") or []}
    assert api_errors(metrics_port).get(counted_as) == 1
    assert_never_crashed(operator)


@pytest.mark.parametrize("fault", [
    {"status": 503, "reason": "ServiceUnavailable", "message": "the server is currently unable to handle the request",
     "times": 20},
    {"status": 500, "reason": "InternalError", "message": "etcdserver: leader changed", "times": None,
     "for_seconds": 3},
], ids=["a burst of 20 503s", "3 s of 500s"])
def test_server_errors_mid_run_neither_fail_the_job_nor_lose_an_epoch_and_are_counted(
        api, proxy, operator, metrics_port, wait_for, fault):
    api.create_job("bursty", job_spec(epochs=8, epoch_seconds=0.5))
    wait_for("two epochs", lambda: len(status_of(api, "bursty").get("epochs") or []) >= 2, 60, operator.logs)
    burst = proxy.fail("*", "", **fault)  # every call of the operator, whatever it is
    wait_for("the burst to pass", lambda: burst.hits == fault["times"] if fault["times"] else burst.hits > 0, 30)
    status = wait_for("Succeeded", succeeded(api, "bursty"), 120, operator.logs)
    assert [e["epoch"] for e in status["epochs"]] == list(range(8)) and status["restarts"] == 0
    assert "Failed" not in {c["type"] for c in status.get("conditions") or []}
    answered = [r for r in proxy.requests if r.status == fault["status"]]
    assert len(answered) == burst.hits
    counted = {key: value for key, value in api_errors(metrics_port).items() if key[2] == str(fault["status"])}
    assert sum(counted.values()) == burst.hits, (counted, sorted({(r.method, r.path) for r in answered}))
    assert_never_crashed(operator)


def test_kopf_s_own_failed_calls_are_retried_and_counted(api, proxy, operator, metrics_port, wait_for):
    events = proxy.fail("POST", r"/namespaces/default/events$", status=503, reason="ServiceUnavailable",
                        message="the server is currently unable to handle the request", times=3)
    api.create_job("kopf-calls", job_spec(epochs=3))
    status = wait_for("Succeeded", succeeded(api, "kopf-calls"), 90, operator.logs)
    assert [e["epoch"] for e in status["epochs"]] == [0, 1, 2]
    wait_for("the Created event, posted by kopf", lambda: [e for e in api.events("kopf-calls") if e.reason == "Created"],
             30, operator.logs)
    assert not (api.job("kopf-calls") or {}).get("metadata", {}).get("finalizers"), "the job carries no finalizer"
    assert events.hits == 3
    assert api_errors(metrics_port).get(("create", "events", "503")) == 3
    assert_never_crashed(operator)
