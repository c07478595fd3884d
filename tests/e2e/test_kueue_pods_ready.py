"""All or nothing under the real Kueue's waitForPodsReady (v0.17, hack/kueue.sh) on Kubernetes' own control plane
with the local kubelet as its Node: a group Kueue admits (its quota fits) but the scheduler can place only half of
(the node's CPU is half taken by a job Kueue does not manage) is evicted when its pods are not all Ready within the
timeout; the operator records it on the job (Requeued, reason PodsReadyTimeout, no restart charged) and queues the
next attempt as a new group; the placed pod never trained (it waited at the rendezvous, as torch.distributed's does).
The job is then suspended while the node gets room (so no attempt is caught half way when it does), resumed: the next
group runs whole and the job succeeds, each epoch trained once.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from pets_api import GROUP, PLURAL, VERSION, names
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


def trainer_logs(running, job: str) -> dict[str, str]:
    """Every started pod's trainer log, those of deleted pods too (the cluster keeps them): {directory: text}."""
    return {log_dir.name: (log_dir / "trainer.log").read_text()
            for log_dir in (Path(running.workdir) / "logs").glob(f"{NAMESPACE}_{job}-*") if (log_dir / "trainer.log").exists()}


def passed_rendezvous(logs: dict[str, str]) -> list[str]:
    for text in logs.values():
        assert "waiting for every machine at the rendezvous" in text, text
    return sorted(name for name, text in logs.items() if "all machines are there" in text)


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

    def half_started():  # Kueue admitted the group (its quota fits); the scheduler placed one pod, either one
        pods = api.pods("half")
        placed = [p.metadata.name for p in pods if p.status.phase == "Running"]
        unplaced = [p.metadata.name for p in pods if pod_scheduled(p)[0] == "Unschedulable"]
        return len(placed) == len(unplaced) == 1 and (placed[0], unplaced[0])
    placed, unplaced = wait_for("one pod of half running, the other unschedulable", half_started, 60, operator.logs)
    print(f"\nhalf admitted and half placed: {placed} Running, {unplaced} Unschedulable")

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

    # Held still (suspended) while the node gets room, so that no group is half placed when the blocker goes:
    # up to here no pod of half passed the rendezvous and nothing trained.
    patch_suspend(api, "half", True)
    wait_for("half suspended without pods", lambda: status_of(api, "half").get("phase") == "Suspended"
             and not api.pods("half"), 60, operator.logs)
    api.delete_job("blocker")
    wait_for("the blocker's pod gone", lambda: not api.pods("blocker"), 120, operator.logs)
    evicted_attempts = status_of(api, "half")["attempt"]
    assert passed_rendezvous(trainer_logs(cluster, "half")) == []
    assert not (checkpoint / "trained.log").exists()

    # The next group (a new Workload) is admitted, placed whole, and trains.
    patch_suspend(api, "half", False)
    done = wait_for("half to finish", lambda: status_of(api, "half").get("phase") in FINAL
                    and status_of(api, "half"), 240, operator.logs)
    assert done["phase"] == "Succeeded", done.get("message")
    assert [e["epoch"] for e in done["epochs"]] == list(range(epochs))
    assert done["restarts"] == 0 and "Failed" not in conditions(done)
    requeues = [e for e in api.events("half") if e.reason == "Requeued"]
    print(f"half: {len(requeues)} Requeued Event(s) ({', '.join(sorted({e.type for e in requeues}))}), "
          f"suspended as attempt {evicted_attempts}, Succeeded as attempt {done['attempt']}, restarts "
          f"{done['restarts']}; pods past the rendezvous: {len(passed_rendezvous(trainer_logs(cluster, 'half')))} "
          f"of {len(trainer_logs(cluster, 'half'))} started; trained {trained_runs(checkpoint)}")
    # One group, the whole one, passed the rendezvous; its pod 0 trained every epoch, once.
    assert len(passed_rendezvous(trainer_logs(cluster, "half"))) == 2
    assert trained_runs(checkpoint) == [list(range(epochs))]
    assert "Traceback" not in operator.logs()


def patch_suspend(api, name: str, suspend: bool) -> None:
    api.custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name, {"spec": {"suspend": suspend}})
