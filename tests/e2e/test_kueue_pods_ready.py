"""All or nothing under the real Kueue's waitForPodsReady (v0.17, hack/kueue.sh) on Kubernetes' own control plane
with the local kubelet as its Node: a group Kueue admits (its quota fits) but the scheduler can place only half of
(the node's CPU is half taken by a job Kueue does not manage) is evicted when its pods are not all Ready within the
timeout; the operator records it on the job (Requeued, reason PodsReadyTimeout, no restart charged) and queues the
next attempt as a new group; the placed pod never trained (it waited at the rendezvous, as torch.distributed's does).
Once the node has room, the next group runs and the job succeeds, each epoch trained once.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from pets_api import names
from pets_localkube.kueue import wait_for_pods_ready
from tests.e2e.conftest import NAMESPACE
from tests.e2e.test_kueue_jobs import (  # noqa: F401  (cluster: a fixture)
    FINAL,
    cluster,
    conditions,
    create,
    job_spec,
    serving,
    status_of,
    trained_runs,
    workloads,
)
from tests.e2e.test_shared_clusters import pod_scheduled
from tests.realcluster.test_kueue import kueue_bin  # noqa: F401  (a fixture: the build, or a skip)

pytestmark = [pytest.mark.e2e, pytest.mark.realcluster, pytest.mark.timeout(900)]

TIMEOUT_SECONDS = 10  # Kueue's waitForPodsReady.timeout here


@pytest.fixture
def kueue_pods_ready(cluster, kueue_bin, tmp_path):  # noqa: F811
    """As test_kueue_jobs' Kueue, with waitForPodsReady on (a 10 s timeout, requeued without end)."""
    with serving(cluster, kueue_bin, tmp_path / "kueue", wait_for_pods_ready(TIMEOUT_SECONDS)) as running:
        yield running


def evicted(workload: dict | None) -> dict:
    return conditions((workload or {}).get("status") or {}).get("Evicted") or {}


def rendezvous_logs(running, job: str) -> list[str]:
    """Pod 0's trainer logs, one per attempt (the kubelet keeps a deleted pod's)."""
    return [(log_dir / "trainer.log").read_text()
            for log_dir in sorted((Path(running.workdir) / "logs").glob(f"{NAMESPACE}_{job}-0_*"))]


def test_a_half_started_group_is_evicted_requeued_and_never_trains(api, cluster, kueue_pods_ready, operator_process,  # noqa: F811
                                                                    stand_in_env, wait_for, tmp_path):
    operator = operator_process(stand_in_env)
    # 1.2 of the node's 2 CPUs, outside Kueue (no queueName): one 500m pod of the group fits next to it, not two.
    blocker = job_spec(600, 0.5, numNodes=1, resources={"requests": {"cpu": "1200m"}})
    del blocker["queueName"]
    create(api, "blocker", blocker)
    wait_for("blocker running", lambda: status_of(api, "blocker").get("phase") == "Running", 120, operator.logs)

    checkpoint = tmp_path / "checkpoints"
    checkpoint.mkdir()
    epochs = 3
    spec = job_spec(epochs, 0.5, backoffLimit=0, checkpoint={"hostPath": str(checkpoint)})
    spec["env"] += [{"name": "STAND_IN_RENDEZVOUS", "value": "1"},
                    {"name": "STAND_IN_CHECKPOINT", "value": f"host:{checkpoint}"}]
    job = create(api, "half", spec)
    group = names.kueue_pod_group_name("half", 0, job["metadata"]["uid"])

    def half_started():
        pods = {p.metadata.name: p for p in api.pods("half")}
        return len(pods) == 2 and pods["half-0"].status.phase == "Running" and \
            pod_scheduled(pods["half-1"])[0] == "Unschedulable" and pods
    pods = wait_for("half-0 running and half-1 unschedulable", half_started, 60, operator.logs)
    print(f"\nhalf admitted: half-0 {pods['half-0'].status.phase}, half-1 {pod_scheduled(pods['half-1'])}")

    eviction = wait_for(f"Workload {group} evicted", lambda: evicted(workloads(api).get(group)).get("status") == "True"
                        and evicted(workloads(api)[group]), 90, operator.logs)
    print(f"Workload {group}: Evicted=True {eviction['reason']}: {eviction['message']}")
    assert eviction["reason"] == "PodsReadyTimeout"

    requeued = wait_for("half requeued", lambda: "Requeued" in conditions(status_of(api, "half"))
                        and status_of(api, "half"), 60, operator.logs)
    condition = conditions(requeued)["Requeued"]
    print(f"half: {requeued['phase']}: Requeued {condition['reason']}: {condition['message']}")
    assert condition["reason"] == "PodsReadyTimeout"
    assert "Kueue evicted the group" in condition["message"] and "not counted against backoffLimit" in condition["message"]
    assert requeued["restarts"] == 0 and requeued["attempt"] >= 1 and not requeued.get("epochs")
    assert "Requeued" in [e.reason for e in api.events("half")]

    # The node gets room: the next group (a new Workload) is admitted, placed whole, and trains.
    api.delete_job("blocker")
    done = wait_for("half to finish", lambda: status_of(api, "half").get("phase") in FINAL
                    and status_of(api, "half"), 240, operator.logs)
    assert done["phase"] == "Succeeded", done.get("message")
    assert [e["epoch"] for e in done["epochs"]] == list(range(epochs))
    assert done["restarts"] == 0 and "Failed" not in conditions(done)
    logs = rendezvous_logs(cluster, "half")
    print(f"half: Succeeded as attempt {done['attempt']}; pod 0's {len(logs)} run(s) passed the rendezvous: "
          f"{['all machines are there' in log for log in logs]}; trained {trained_runs(checkpoint)}")
    # Every half-started group's pod 0 waited at the rendezvous and was stopped there: one run trained, all of it.
    assert len(logs) == done["attempt"] + 1
    assert ["all machines are there" in log for log in logs].count(True) == 1
    assert all("waiting for every machine" in log for log in logs)
    assert trained_runs(checkpoint) == [list(range(epochs))]
    assert "Traceback" not in operator.logs()
