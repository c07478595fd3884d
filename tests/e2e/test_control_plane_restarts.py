"""kill -9 of kube-apiserver, then of etcd, while jobs train: the watches resume, every job ends complete.

Kubernetes' own control plane only (`KubernetesCluster`): the emulated API server has no etcd and
no restart. Two jobs of stand-in trainers (real processes printing real epoch lines) train while
`KubernetesControlPlane.kill` ends kube-apiserver with SIGKILL and `start_again` runs it again on
its port, certificates and etcd data; meanwhile etcd's history is compacted (`compact_etcd`, what
kube-apiserver does every 5 minutes), so the operator's watches, resumed from their last
resourceVersion, get 410 Gone and must list again. Then etcd itself is killed and started again,
under a running kube-apiserver.

The lease is longer than the chart's here (renew deadline 30 s, not 10 s) so that the operator
rides both outages in one process and the relist is its own: with the default, an outage longer
than 10 s makes the leader exit 1 without another write (docs/operations.md, "Fencing"), which
tests/e2e/test_leader_election.py covers.

Every job must end Succeeded with every epoch once in status.epochs, no group restart and the pods
it started with: pod 0's log broke with each restart and was read again, the kopf watches resumed,
and no transient error was taken for a failure; the operator never exited.
"""
from __future__ import annotations

import time

import pytest

from pets_localkube.control_plane import APISERVER, ETCD

pytestmark = [pytest.mark.e2e, pytest.mark.realcluster,
              pytest.mark.parametrize("cluster", ["kubernetes"], indirect=True)]

JOBS = ("restart-a", "restart-b")
EPOCHS, EPOCH_SECONDS = 50, 1.2
DOWN_SECONDS = 4  # each component stays dead this long: epochs are printed meanwhile
LONG_LEASE = {"PETS_OPERATOR_LEASE_DURATION_SECONDS": "45", "PETS_OPERATOR_LEASE_RENEW_DEADLINE_SECONDS": "30",
              "PETS_OPERATOR_LEASE_RETRY_PERIOD_SECONDS": "2"}
RELISTED = "Restarting the watch-stream for "  # kopf's debug line on a 410 Gone, then the resource
WATCHED = ("pods.v1 ", "petstrainingjobs.v1alpha1.training.pets.dev ")


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
    """kill -9 of `component`, DOWN_SECONDS dead, started again: seconds until it was ready again. While
    kube-apiserver is away, etcd's history is compacted: its watchers come back to a 410 Gone."""
    killed_at = time.monotonic()
    cluster.plane.kill(component)
    if component == APISERVER:
        cluster.plane.compact_etcd()
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
    operator = operator_process({**stand_in_env, **LONG_LEASE, "PETS_OPERATOR_LOG_LEVEL": "DEBUG"})
    describe = lambda: operator.logs()[-6000:]  # noqa: E731
    for name in JOBS:
        api.create_job(name, job_spec())
    wait_for("two epochs of each job", lambda: all(len(epochs_of(api, n)) >= 2 for n in JOBS), 120, describe)
    pods = {name: sorted(p.metadata.uid for p in api.pods(name)) for name in JOBS}
    assert RELISTED not in operator.logs()

    outages = {}
    for component in (APISERVER, ETCD):
        before = {name: len(epochs_of(api, name)) for name in JOBS}
        assert all(n < EPOCHS - 5 for n in before.values()), f"the jobs ran out before {component}'s kill: {before}"
        outages[component] = restart(cluster, component)
        wait_for(f"epochs after {component}'s restart", progressed(api, before), 120, describe)
        if component == APISERVER:  # each watch met its 410 Gone with a new list
            wait_for("the watches to list again", lambda: all(RELISTED + w in operator.logs() for w in WATCHED), 60,
                     describe)

    wait_for("every job Succeeded",
             lambda: all((readable(lambda n=n: api.job(n)) or {}).get("status", {}).get("phase") == "Succeeded"
                         for n in JOBS), 180, describe)
    for name in JOBS:
        status = api.job(name)["status"]
        assert [e["epoch"] for e in status["epochs"]] == list(range(EPOCHS)), (name, status["epochs"])  # no gap, no double
        assert status["restarts"] == 0, (name, status)
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        assert conditions.get("Succeeded") == "True" and conditions.get("Failed", "False") == "False", status
        assert sorted(p.metadata.uid for p in api.pods(name)) == pods[name]  # no pod replaced
    assert operator.process.poll() is None and operator.starts == 1, describe()  # never exited, never restarted
    print(f"outages (kill to ready again, s): {outages}")
