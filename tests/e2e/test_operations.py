"""Running like a real operator: liveness endpoint, peering between replicas."""
from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

import pytest

from pets_api import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.e2e
REPO_MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


@pytest.fixture
def cluster_crds():
    return [REPO_MANIFESTS / "crd.yaml", REPO_MANIFESTS / "kopf-peering-crds.yaml"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def healthz(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            return response.status
    except OSError:
        return None


def test_liveness_endpoint(operator_process, stand_in_env, wait_for):
    port = free_port()
    operator = operator_process({**stand_in_env, "PETS_OPERATOR_LIVENESS_PORT": str(port)})
    assert wait_for("/healthz", lambda: healthz(port) == 200, 30, operator.logs)


PEERING = ("kopf.dev", "v1", "clusterkopfpeerings", "pets")
RESUMED = "Resuming operations after the pause"
PAUSED = "Pausing operations in favour of"


def create_peering(api) -> None:
    group, version, plural, name = PEERING
    api.custom.create_cluster_custom_object(group, version, plural, {
        "apiVersion": f"{group}/{version}", "kind": "ClusterKopfPeering", "metadata": {"name": name}})


def peers(api) -> dict:
    return api.custom.get_cluster_custom_object(*PEERING).get("status") or {}


def serve_a_job_on(api, wait_for, serving, waiting, name: str) -> None:
    api.custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob", "metadata": {"name": name},
        "spec": {"numNodes": 2, "epochs": 3, "data": {"synthetic": {}}}})
    wait_for("Succeeded", lambda: ((api.job(name) or {}).get("status") or {}).get("phase") == "Succeeded", 60,
             lambda: serving.logs() + waiting.logs())
    time.sleep(1)
    assert name in serving.logs() and name not in waiting.logs()
    status = api.job(name)["status"]
    assert [e["epoch"] for e in status["epochs"]] == [0, 1, 2]
    assert len(api.pods(name)) == 2


# kopf starts every peered operator paused (orchestration.py, spawn_missing_peerings: the
# toggle is pre-activated when a peering name is given) and logs "Pausing operations in favour
# of" only when it goes from working to paused (peering.py, process_peering_event). So the
# lower-priority replica logs that line only if it worked alone first. The two tests below
# start the replicas in a fixed order, one test for each order: the first takes over from a
# working replica, the second has a lower-priority replica join one that is already working.
def test_two_peered_replicas_serve_a_job_once(api, operator_process, stand_in_env, wait_for):
    create_peering(api)
    env = {**stand_in_env, "PETS_OPERATOR_PEERING": "pets"}
    low = operator_process({**env, "PETS_OPERATOR_PRIORITY": "10"})
    wait_for("the lone replica to start working", lambda: RESUMED in low.logs(), 30, low.logs)
    high = operator_process({**env, "PETS_OPERATOR_PRIORITY": "20"})
    wait_for("the lower-priority replica to pause", lambda: PAUSED in low.logs(), 30, lambda: high.logs() + low.logs())
    serve_a_job_on(api, wait_for, serving=high, waiting=low, name="peered")


def test_a_lower_priority_replica_joining_later_stays_paused(api, operator_process, stand_in_env, wait_for):
    create_peering(api)
    env = {**stand_in_env, "PETS_OPERATOR_PEERING": "pets"}
    high = operator_process({**env, "PETS_OPERATOR_PRIORITY": "20"})
    wait_for("the lone replica to start working", lambda: RESUMED in high.logs(), 30, high.logs)
    low = operator_process({**env, "PETS_OPERATOR_PRIORITY": "10"})
    wait_for("both replicas' keep-alives", lambda: sorted(p["priority"] for p in peers(api).values()) == [10, 20], 30,
             lambda: high.logs() + low.logs())
    serve_a_job_on(api, wait_for, serving=high, waiting=low, name="joined")
    assert RESUMED not in low.logs() and PAUSED not in low.logs()
