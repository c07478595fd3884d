"""Two real operator processes on one cluster: one leader on the Lease, one standby; failover; fencing.

Each replica talks to the API server through its own recording proxy (`fault_proxy.FaultProxy`,
no faults), so every request a replica makes is attributed to it and timed, whatever it is
(kopf's watches, patches and Events, the operator's own calls, the lease): the tests need
nothing from the server but the API, and run as well against a kube-apiserver (`cluster` gives
its URL and kubeconfig). The leases are short here (4 s; 15 s by default).
"""
from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from urllib.parse import parse_qs

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from tests.e2e.conftest import OperatorProcess
from tests.support.fault_proxy import FaultProxy, Request

pytestmark = pytest.mark.e2e

NAMESPACE = "default"
LEASE_NAME = "pets-operator-leader"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE_NAME}"
DURATION, RENEW_DEADLINE, RETRY = 4, 3, 1
SHORT_LEASE = {"PETS_OPERATOR_LEASE_DURATION_SECONDS": str(DURATION),
               "PETS_OPERATOR_LEASE_RENEW_DEADLINE_SECONDS": str(RENEW_DEADLINE),
               "PETS_OPERATOR_LEASE_RETRY_PERIOD_SECONDS": str(RETRY)}
# A takeover comes once the standby has seen the lease unchanged for DURATION; it looks every RETRY,
# and saw the leader's last renewal up to RETRY after it was made. The rest: a loaded 2-core machine.
TAKEOVER_BOUND_SECONDS = DURATION + 2 * RETRY + 3


@dataclass
class Replica:
    name: str  # its POD_ID: the identity it holds the lease as
    operator: OperatorProcess
    proxy: FaultProxy  # every request it made, timed

    def requests(self) -> list[Request]:
        return list(self.proxy.requests)

    def writes(self, since: float = 0.0) -> list[Request]:
        return [r for r in self.requests() if r.write and r.arrived >= since]

    def status_patches(self) -> list[Request]:
        return [r for r in self.requests() if r.method == "PATCH" and r.path.endswith("/status") and r.status == 200]

    def took_the_lease_at(self) -> float | None:
        """When its first successful write of the lease arrived (a create, or a takeover's replace)."""
        taken = [r.arrived for r in self.requests() if r.write and r.path.startswith(LEASE_PATH.rsplit("/", 1)[0])
                 and r.status in (200, 201)]
        return min(taken) if taken else None


@pytest.fixture
def replica(cluster, operator_process, stand_in_env, tmp_path):
    """A factory: replica(name, **env) -> a Replica started on `cluster` with the short lease."""
    started: list[Replica] = []

    def start(name: str, **env: str) -> Replica:
        proxy = FaultProxy(cluster.url, tmp_path / f"proxy-{name}").start()
        operator = operator_process({**stand_in_env, **SHORT_LEASE, "POD_ID": name,
                                     "KUBECONFIG": str(proxy.kubeconfig), **env})
        started.append(Replica(name, operator, proxy))
        return started[-1]

    yield start
    for running in started:  # the operator first: it never sees its proxy go away
        running.operator.stop()
        running.proxy.stop()


@pytest.fixture
def lease_holder(cluster):
    coordination = kubernetes.client.CoordinationV1Api(
        kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig)))

    def holder() -> str | None:
        try:
            return coordination.read_namespaced_lease(LEASE_NAME, NAMESPACE).spec.holder_identity
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    return holder


def job_spec(epochs: int, epoch_seconds: float) -> dict:
    return {"numNodes": 2, "epochs": epochs, "model": "resnet10t", "data": {"synthetic": {}},
            "env": [{"name": "STAND_IN_EPOCH_SECONDS", "value": str(epoch_seconds)}]}


def status_of(api, name: str) -> dict:
    return (api.job(name) or {}).get("status") or {}


def epochs_of(api, name: str) -> list[int]:
    return [e["epoch"] for e in status_of(api, name).get("epochs") or []]


def field_manager(request: Request) -> str | None:
    return (parse_qs(request.query).get("fieldManager") or [None])[0]


def writers_in_order(*replicas: Replica) -> list[str]:
    """Who wrote the job's status, patch after patch (by arrival), runs of one writer collapsed."""
    patches = sorted((r.arrived, field_manager(r), replica.name) for replica in replicas
                      for r in replica.status_patches())
    for _, manager, sender in patches:
        assert manager == sender, f"a status patch sent by {sender} names {manager} as its field manager"
    order: list[str] = []
    for _, _, sender in patches:
        if not order or order[-1] != sender:
            order.append(sender)
    return order


def both_logs(*replicas: Replica):
    return lambda: "\n".join(f"--- {r.name}\n{r.operator.logs()[-5000:]}" for r in replicas)


def start_leader_and_standby(replica, lease_holder, wait_for) -> tuple[Replica, Replica]:
    leader = replica("replica-a")
    wait_for("replica-a to hold the lease", lambda: lease_holder() == "replica-a", 30, both_logs(leader))
    standby = replica("replica-b")
    wait_for("replica-b to stand by", lambda: "standing for leader" in standby.operator.logs(), 30,
             both_logs(leader, standby))
    return leader, standby


def test_of_two_replicas_only_the_leader_acts(api, replica, lease_holder, wait_for):
    leader, standby = start_leader_and_standby(replica, lease_holder, wait_for)
    api.create_job("one-writer", job_spec(epochs=4, epoch_seconds=0.3))
    wait_for("Succeeded", lambda: status_of(api, "one-writer").get("phase") == "Succeeded", 60,
             both_logs(leader, standby))
    assert epochs_of(api, "one-writer") == [0, 1, 2, 3]
    assert lease_holder() == "replica-a"
    # The standby never wrote anything, and read nothing but the lease: it runs no kopf, no handler.
    assert standby.writes() == []
    assert {(r.method, r.path) for r in standby.requests()} == {("GET", LEASE_PATH)}
    assert "became the leader" not in standby.operator.logs()
    # The leader wrote the status, as itself (the field manager, the User-Agent).
    patches = leader.status_patches()
    assert patches and {field_manager(r) for r in patches} == {"replica-a"}
    assert all(r.user_agent.endswith("(pets-operator replica-a)") for r in leader.writes()), \
        {r.user_agent for r in leader.writes()}
    assert writers_in_order(leader, standby) == ["replica-a"]


def test_kill_9_of_the_leader_mid_epoch_the_standby_takes_over_and_no_epoch_is_lost_or_doubled(
        api, replica, lease_holder, wait_for):
    leader, standby = start_leader_and_standby(replica, lease_holder, wait_for)
    api.create_job("failover", job_spec(epochs=10, epoch_seconds=0.8))
    wait_for("two epochs", lambda: len(epochs_of(api, "failover")) >= 2, 60, both_logs(leader, standby))
    uids = sorted(p.metadata.uid for p in api.pods("failover"))
    time.sleep(0.4)  # mid-epoch
    killed_at = time.monotonic()
    leader.operator.kill()
    wait_for("replica-b to hold the lease", lambda: lease_holder() == "replica-b", 30, both_logs(leader, standby))
    takeover = standby.took_the_lease_at() - killed_at
    assert 0 < takeover <= TAKEOVER_BOUND_SECONDS, takeover
    status = wait_for("Succeeded", lambda: status_of(api, "failover").get("phase") == "Succeeded"
                      and status_of(api, "failover"), 90, both_logs(leader, standby))
    assert [e["epoch"] for e in status["epochs"]] == list(range(10))  # no gap, no duplicate
    assert status["restarts"] == 0 and sorted(p.metadata.uid for p in api.pods("failover")) == uids
    assert writers_in_order(leader, standby) == ["replica-a", "replica-b"]


def test_a_paused_leader_writes_nothing_after_the_takeover_and_exits(api, replica, lease_holder, wait_for):
    leader, standby = start_leader_and_standby(replica, lease_holder, wait_for)
    api.create_job("paused", job_spec(epochs=12, epoch_seconds=0.8))
    wait_for("two epochs", lambda: len(epochs_of(api, "paused")) >= 2, 60, both_logs(leader, standby))
    process = leader.operator.process
    process.send_signal(signal.SIGSTOP)
    try:
        wait_for("replica-b to hold the lease", lambda: lease_holder() == "replica-b", 30, both_logs(standby))
        taken_at = standby.took_the_lease_at()
        wait_for("replica-b to write the status", lambda: [r for r in standby.status_patches() if r.arrived > taken_at],
                 30, both_logs(standby))
    finally:
        process.send_signal(signal.SIGCONT)
    resumed_at = time.monotonic()
    wait_for("the old leader to exit", lambda: process.poll() is not None, 15, both_logs(leader, standby))
    exited_after = time.monotonic() - resumed_at
    assert process.returncode == 1, process.returncode
    assert "lost the leadership" in leader.operator.logs()
    # Nothing from the old leader reached the API server after the takeover: no status patch, no
    # Event, no pod, no lease renewal. (It was frozen from before the takeover until it resumed.)
    assert leader.writes(since=taken_at) == [], leader.writes(since=taken_at)
    status = wait_for("Succeeded", lambda: status_of(api, "paused").get("phase") == "Succeeded"
                      and status_of(api, "paused"), 90, both_logs(leader, standby))
    assert [e["epoch"] for e in status["epochs"]] == list(range(12)) and status["restarts"] == 0
    assert writers_in_order(leader, standby) == ["replica-a", "replica-b"]  # never two writers
    assert exited_after < 5, exited_after
