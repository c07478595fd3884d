"""kill -9 of kube-apiserver, then of etcd, while jobs train: the watches resume, every job ends complete.

Kubernetes' own control plane only (`KubernetesCluster`): the emulated API server has no etcd and
no restart. Two jobs of stand-in trainers (real processes printing real epoch lines) train while
`KubernetesControlPlane.kill` ends kube-apiserver with SIGKILL and `start_again` runs it again on
its port, certificates and etcd data; then the same for etcd, under a running kube-apiserver. The
operator runs as the chart runs it, leader election on with the default lease, and is started again
whenever it exits, as the kubelet would (restartPolicy Always): an outage longer than the renew
deadline (10 s) makes the leader exit 1 without another write (docs/operations.md, "Fencing"); it
must not exit for any other reason, nor more than once per outage (no crash loop).

Every job must end Succeeded with every epoch once in status.epochs, no group restart and the pods
it started with: pod 0's log broke with each restart and was read again, the kopf watches resumed
(a relist where the resourceVersion was gone), and no transient error was taken for a failure.
"""
from __future__ import annotations

import threading
import time

import pytest

from pets_localkube.control_plane import APISERVER, ETCD
from tests.e2e.conftest import OperatorProcess

pytestmark = [pytest.mark.e2e, pytest.mark.realcluster,
              pytest.mark.parametrize("cluster", ["kubernetes"], indirect=True)]

JOBS = ("restart-a", "restart-b")
EPOCHS, EPOCH_SECONDS = 50, 1.2
DOWN_SECONDS = 4  # each component stays dead this long: epochs are printed meanwhile
LOST_LEADERSHIP = "lost the leadership"


class Supervised:
    """An operator process started again whenever it exits, as a Deployment's pod is: each exit recorded."""

    def __init__(self, operator: OperatorProcess):
        self.operator = operator
        self.exits: list[int] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(0.5):
            process = self.operator.process
            if process is not None and process.poll() is not None:
                self.exits.append(process.returncode)
                self.operator.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def job_spec() -> dict:
    return {"numNodes": 2, "epochs": EPOCHS, "model": "resnet10t", "data": {"synthetic": {}},
            "env": [{"name": "STAND_IN_EPOCH_SECONDS", "value": str(EPOCH_SECONDS)}]}


def epochs_of(api, name: str) -> list[int]:
    return [e["epoch"] for e in ((api.job(name) or {}).get("status") or {}).get("epochs") or []]


def readable(read):
    """`read()`, or None while the API server cannot answer (the test's own client rides the outage too)."""
    try:
        return read()
    except Exception:  # noqa: BLE001 - refused connections, 5xx, timeouts: ask again
        return None


def restart(cluster, component: str) -> float:
    """kill -9 of `component`, DOWN_SECONDS dead, started again: seconds until it was ready again."""
    killed_at = time.monotonic()
    cluster.plane.kill(component)
    time.sleep(DOWN_SECONDS)
    cluster.plane.start_again(component)
    return time.monotonic() - killed_at


def progressed(api, before: dict[str, int]):
    """True once every job's status has more epochs than `before` (the operator follows again), or finished."""
    def check():
        now = {name: readable(lambda name=name: epochs_of(api, name)) for name in JOBS}
        return all(n is not None and (len(n) > before[name] or len(n) == EPOCHS) for name, n in now.items())
    return check


def test_kill_9_of_kube_apiserver_then_etcd_mid_run_every_job_ends_complete(
        cluster, api, operator_process, stand_in_env, wait_for):
    operator = Supervised(operator_process(stand_in_env))
    describe = lambda: f"exits {operator.exits}\n{operator.operator.logs()[-6000:]}"  # noqa: E731
    try:
        for name in JOBS:
            api.create_job(name, job_spec())
        wait_for("two epochs of each job", lambda: all(len(epochs_of(api, n)) >= 2 for n in JOBS), 120, describe)
        pods = {name: sorted(p.metadata.uid for p in api.pods(name)) for name in JOBS}

        outages = {}
        for component in (APISERVER, ETCD):
            before = {name: len(epochs_of(api, name)) for name in JOBS}
            assert all(n < EPOCHS - 5 for n in before.values()), f"the jobs ran out before {component}'s kill: {before}"
            outages[component] = restart(cluster, component)
            wait_for(f"epochs after {component}'s restart", progressed(api, before), 120, describe)

        wait_for("every job Succeeded",
                 lambda: all((readable(lambda n=n: api.job(n)) or {}).get("status", {}).get("phase") == "Succeeded"
                             for n in JOBS), 180, describe)
    finally:
        operator.stop()
    for name in JOBS:
        status = api.job(name)["status"]
        assert [e["epoch"] for e in status["epochs"]] == list(range(EPOCHS)), (name, status["epochs"])  # no gap, no double
        assert status["restarts"] == 0, (name, status)
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        assert conditions.get("Succeeded") == "True" and conditions.get("Failed", "False") == "False", status
        assert sorted(p.metadata.uid for p in api.pods(name)) == pods[name]  # no pod replaced
    # The operator exits only on a lost lease (an outage past the renew deadline), once per outage at most.
    assert all(code == 1 for code in operator.exits), (operator.exits, describe())
    assert len(operator.exits) <= len(outages), (operator.exits, outages, describe())
    assert operator.operator.logs().count(LOST_LEADERSHIP) == len(operator.exits), describe()
    print(f"outages (kill to ready again, s): {outages}; operator exits: {operator.exits}")
