"""Connection faults between the operator and kube-apiserver (Toxiproxy), while a 2-node job trains.

The operator's kubeconfig points at a Toxiproxy proxy (tests/support/toxiproxy.py, the server that
hack/toxiproxy.sh builds; tests/conftest.py's `toxiproxy_binary` builds it when
Go is there and skips the test when neither the build nor Go is) in front of kube-apiserver: a TCP proxy, so TLS passes through untouched
and the operator checks the API server's own certificate (it names 127.0.0.1, whatever the port).
Every call of the operator goes through it: kopf's watches, patches and Events, its own status
patches and creations, pod 0's followed log, the lease. The kubelet, the scheduler and the test's
own client talk to kube-apiserver directly.

While a job of stand-in trainers (real processes printing real epoch lines) trains, the proxy
adds, one phase after the other and then removes:

- latency: 300 ms ± 100 ms each way; the operator must keep recording epochs through it;
- reset_peer: every connection reset as soon as data crosses it, either way;
- timeout: the operator's bytes held, each connection closed after 2 s (watches included);
- bandwidth: 16 KB/s from the server; the operator must keep recording epochs through it.

The job must end Succeeded with every epoch once in status.epochs and no group restart, the
operator process never exited (one start, no Traceback in its log), and its /metrics must count the calls that got no
answer (`pets_operator_api_errors_total{code="none"}`) during the reset and timeout phases.
The lease is tests/e2e/test_api_retries.py's BURST_PROOF_LEASE (90/60/2 s): the renewals go
through the proxy too, and with the chart's 10 s renew deadline a leader that cannot renew for
that long exits by design (docs/operations.md, "Fencing"), which is test_leader_election.py's
subject, not this one's. Here one process must ride every fault.

HTTP answers that Toxiproxy cannot give (429 with Retry-After, 5xx bursts) are
tests/support/fault_proxy.py's, in tests/e2e/test_api_retries.py.
"""
from __future__ import annotations

import time
from urllib.parse import urlsplit

import pytest
import yaml

from tests.e2e.test_api_retries import BURST_PROOF_LEASE, api_errors, assert_never_crashed, free_port
from tests.support.toxiproxy import ToxiproxyServer

pytestmark = [pytest.mark.e2e, pytest.mark.realcluster,
              pytest.mark.parametrize("cluster", ["kubernetes"], indirect=True)]

JOB = "faulted"
EPOCHS, EPOCH_SECONDS = 60, 1.0
PHASE_SECONDS = 5  # how long reset_peer and timeout stay on


@pytest.fixture
def toxiproxy(toxiproxy_binary, cluster, tmp_path):
    with ToxiproxyServer(toxiproxy_binary, tmp_path / "toxiproxy") as server:
        yield server


@pytest.fixture
def apiserver_proxy(cluster, toxiproxy, tmp_path):
    """A Toxiproxy proxy to kube-apiserver, and a copy of the admin kubeconfig that points at it."""
    upstream = urlsplit(cluster.url).netloc
    proxy = toxiproxy.proxy("kube-apiserver", upstream=upstream)
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for entry in config["clusters"]:
        entry["cluster"]["server"] = f"https://{proxy.listen}"
    proxy.kubeconfig = tmp_path / "toxiproxy.kubeconfig"
    proxy.kubeconfig.write_text(yaml.safe_dump(config))
    proxy.kubeconfig.chmod(0o600)
    return proxy


def epochs_of(api) -> list[int]:
    return [e["epoch"] for e in ((api.job(JOB) or {}).get("status") or {}).get("epochs") or []]


def unanswered(metrics_port: int) -> float:
    """Calls that got no answer, counted by the operator (its own, kopf's, the lease's)."""
    return sum(value for (_, _, code), value in api_errors(metrics_port).items() if code == "none")


def test_latency_resets_timeouts_and_a_bandwidth_limit_mid_run_the_job_ends_complete(
        toxiproxy_binary, cluster, api, apiserver_proxy, toxiproxy, operator_process, stand_in_env, wait_for):
    proxy, metrics_port = apiserver_proxy, free_port()
    operator = operator_process({**stand_in_env, **BURST_PROOF_LEASE, "KUBECONFIG": str(proxy.kubeconfig),
                                 "PETS_OPERATOR_METRICS_PORT": str(metrics_port)})
    describe = lambda: f"{operator.logs()[-6000:]}\ntoxiproxy:\n{toxiproxy.log()[-2000:]}"  # noqa: E731
    api.create_job(JOB, {"numNodes": 2, "epochs": EPOCHS, "model": "resnet10t", "data": {"synthetic": {}},
                         "env": [{"name": "STAND_IN_EPOCH_SECONDS", "value": str(EPOCH_SECONDS)}]})
    wait_for("two epochs recorded", lambda: len(epochs_of(api)) >= 2, 120, describe)
    phases: dict[str, float] = {}  # phase -> calls without an answer counted during it

    def progress_under(phase: str, *toxics: dict) -> None:
        """Toxics on; the operator must record two more epochs through them; toxics off."""
        before, errors = len(epochs_of(api)), unanswered(metrics_port)
        for toxic in toxics:
            proxy.add(**toxic)
        wait_for(f"two more epochs recorded under {phase}", lambda: len(epochs_of(api)) >= min(before + 2, EPOCHS),
                 60, describe)
        proxy.clear()
        phases[phase] = unanswered(metrics_port) - errors

    def broken_by(phase: str, *toxics: dict) -> None:
        """Toxics on for PHASE_SECONDS, then off; then the operator must record epochs again."""
        errors = unanswered(metrics_port)
        for toxic in toxics:
            proxy.add(**toxic)
        time.sleep(PHASE_SECONDS)
        phases[phase] = unanswered(metrics_port) - errors
        proxy.clear()
        after = len(epochs_of(api))
        wait_for(f"epochs recorded again after {phase}", lambda: len(epochs_of(api)) > after or after == EPOCHS,
                 90, describe)

    progress_under("latency", {"type": "latency", "stream": "downstream", "latency": 300, "jitter": 100},
                   {"type": "latency", "stream": "upstream", "latency": 300, "jitter": 100})
    broken_by("reset_peer", {"type": "reset_peer", "stream": "downstream", "timeout": 0},
              {"type": "reset_peer", "stream": "upstream", "timeout": 0})
    broken_by("timeout", {"type": "timeout", "stream": "upstream", "timeout": 2000})
    progress_under("bandwidth", {"type": "bandwidth", "stream": "downstream", "rate": 16})
    assert not proxy.toxics()
    # Every fault came while the group trained: its pods were still running when the last one was removed.
    assert {pod.status.phase for pod in api.pods(JOB)} == {"Running"}, describe()

    status = wait_for("Succeeded", lambda: ((api.job(JOB) or {}).get("status") or {}).get("phase") == "Succeeded"
                      and api.job(JOB)["status"], 180, describe)
    assert [e["epoch"] for e in status["epochs"]] == list(range(EPOCHS)), status["epochs"]
    assert status["restarts"] == 0
    assert "Failed" not in {c["type"] for c in status.get("conditions") or []}
    assert phases["reset_peer"] > 0 and phases["timeout"] > 0, phases
    assert_never_crashed(operator)  # one process, still running, no Traceback in its log
    print(f"calls without an answer, by phase: {phases}; api errors: {api_errors(metrics_port)}")
