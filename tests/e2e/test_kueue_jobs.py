"""The real operator under the real Kueue (v0.17, hack/kueue.sh) on Kubernetes' own control plane with
the local kubelet as its Node: jobs queued and admitted one at a time within a ClusterQueue's quota,
and a job of a higher WorkloadPriorityClass preempting a running one, which resumes from its checkpoint.

The trainer is the e2e stand-in (tests/e2e/stand_in.py: real epoch lines, a checkpoint kept as
pets-train keeps one); Kueue, the API server, the scheduler, the garbage collector and the operator
are the real ones. Each job's pods request 500m CPU and 512Mi; the node has 2 CPUs, so without Kueue
two of these jobs would run side by side; the ClusterQueue's quota (cpu=1, memory=1Gi) fits one.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from pets_api import GROUP, PLURAL, VERSION, names
from pets_localkube import product
from pets_localkube.kubernetes_cluster import KubernetesCluster
from pets_localkube.kueue import Kueue
from tests.e2e.conftest import NAMESPACE, control_plane_bin
from tests.e2e.test_shared_clusters import epoch_lines
from tests.realcluster.test_kueue import kueue_bin  # noqa: F401  (a fixture: the build, or a skip)

pytestmark = [pytest.mark.e2e, pytest.mark.realcluster, pytest.mark.timeout(2700)]

LOCAL_QUEUE, CLUSTER_QUEUE = "team-a", "pets-cq"
QUOTA = {"cpu": "1", "memory": "1Gi"}  # one 2-node job of job_spec()'s at a time
FINAL = ("Succeeded", "Failed")
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"


@pytest.fixture
def cluster(tmp_path, cluster_crds, request, kueue_bin):  # noqa: F811  (Kueue built before the cluster starts)
    """Kubernetes' control plane and the node; the logs of deleted pods kept (a preempted attempt's)."""
    with KubernetesCluster(tmp_path / "cluster", cpu=2, crds=cluster_crds, bin_dir=control_plane_bin(request.config),
                           entrypoints=product.ENTRYPOINTS, workload=product.TRAINER, keep_logs=True) as running:
        yield running


@contextmanager
def serving(cluster, bin_dir: Path, workdir: Path, pods_ready: dict | None = None):
    """Kueue with its own identity, a LocalQueue team-a in the tests' namespace onto ClusterQueue pets-cq."""
    with Kueue(cluster.kubeconfig, workdir, bin_dir=bin_dir, pods_ready=pods_ready) as running:
        started = time.monotonic()
        running.serve_namespace(NAMESPACE, QUOTA, LOCAL_QUEUE, CLUSTER_QUEUE)
        print(f"\nqueues Active {time.monotonic() - started:.1f} s after Kueue was up")
        yield running


@pytest.fixture
def kueue(cluster, kueue_bin, tmp_path):  # noqa: F811
    with serving(cluster, kueue_bin, tmp_path / "kueue") as running:
        yield running


def job_spec(epochs: int, epoch_seconds: float, **extra) -> dict:
    return {"numNodes": 2, "epochs": epochs, "model": "resnet10t", "data": {"synthetic": {}}, "queueName": LOCAL_QUEUE,
            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
            "env": [{"name": "STAND_IN_EPOCH_SECONDS", "value": str(epoch_seconds)}], **extra}


def create(api, name: str, spec: dict, labels: dict | None = None) -> dict:
    return api.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels or {}}, "spec": spec})


def status_of(api, name: str) -> dict:
    return (api.job(name) or {}).get("status") or {}


def conditions(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status.get("conditions") or []}


def workloads(api) -> dict[str, dict]:
    listed = api.custom.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, NAMESPACE, "workloads")
    return {w["metadata"]["name"]: w for w in listed["items"]}


def admitted_at(workload: dict) -> str | None:
    return next((c["lastTransitionTime"] for c in (workload.get("status") or {}).get("conditions") or []
                 if c["type"] == "Admitted" and c["status"] == "True"), None)


def run_span(api, name: str) -> tuple:
    """(first container start, last container end) of the job's current pods."""
    states = [p.status.container_statuses[0].state.terminated for p in api.pods(name)]
    return min(s.started_at for s in states), max(s.finished_at for s in states)


def test_three_jobs_are_admitted_one_at_a_time_and_all_succeed(api, kueue, operator_process, stand_in_env, wait_for):
    operator = operator_process(stand_in_env)
    jobs = ("first", "second", "third")
    epochs = 4
    uids = {name: create(api, name, job_spec(epochs, 0.5))["metadata"]["uid"] for name in jobs}
    groups = {name: names.kueue_pod_group_name(name, 0, uids[name]) for name in jobs}

    def one_runs_two_wait():
        statuses = {name: status_of(api, name) for name in jobs}
        running = [n for n, s in statuses.items() if s.get("phase") == "Running"]
        waiting = [n for n, s in statuses.items() if s.get("phase") == "Pending"
                   and f"waiting for Kueue admission of Workload {groups[n]}" in (s.get("message") or "")]
        return len(running) == 1 and len(waiting) == 2 and (running, waiting, statuses)
    running, waiting, statuses = wait_for("one job running, two waiting for Kueue", one_runs_two_wait, 120,
                                          operator.logs)
    for name in waiting:
        print(f"{name}: {statuses[name]['phase']}: {statuses[name]['message']}")
        pending = workloads(api)[groups[name]]
        reserved = conditions(pending.get("status") or {}).get("QuotaReserved") or {}
        print(f"  Workload {groups[name]}: QuotaReserved={reserved.get('status')} {reserved.get('reason')}: "
              f"{reserved.get('message')}")
        assert reserved.get("status") == "False"
        for pod in api.pods(name):
            assert names.KUEUE_ADMISSION_GATE in [g.name for g in pod.spec.scheduling_gates or []]

    done = {name: wait_for(f"{name} to finish", lambda name=name: status_of(api, name).get("phase") in FINAL
                           and status_of(api, name), 300, operator.logs) for name in jobs}
    for status in done.values():
        assert status["phase"] == "Succeeded", status.get("message")
        assert [e["epoch"] for e in status["epochs"]] == list(range(epochs)), status["epochs"]
        assert status["restarts"] == 0 and status["attempt"] == 0
    stored = workloads(api)
    order = sorted(jobs, key=lambda name: admitted_at(stored[groups[name]]) or "")
    print(f"admission order: {' -> '.join(f'{name} ({groups[name]}, {admitted_at(stored[groups[name]])})' for name in order)}")
    assert order[0] == running[0]
    # One group ran at a time: no pod of the next started before every pod of the one before had ended.
    spans = sorted(run_span(api, name) for name in jobs)
    for before, after in zip(spans, spans[1:]):
        assert after[0] >= before[1], spans
    for group in groups.values():
        assert conditions(stored[group]["status"])["Finished"]["status"] == "True"
    assert "Traceback" not in operator.logs()


def trained_runs(checkpoint: Path) -> list[list[int]]:
    """The epochs each run of the stand-in trained, in order (tests/e2e/stand_in.py's trained.log)."""
    runs: dict[str, list[int]] = {}
    for line in (checkpoint / "trained.log").read_text().split("\n"):
        if line:
            pid, epoch = line.split()
            runs.setdefault(pid, []).append(int(epoch))
    return list(runs.values())


def test_a_higher_priority_job_preempts_and_the_victim_resumes_from_its_checkpoint(api, kueue, operator_process,
                                                                                   stand_in_env, wait_for, tmp_path):
    kueue.create_priority_class("batch-low", 100)
    kueue.create_priority_class("batch-high", 1000)
    operator = operator_process(stand_in_env)
    checkpoint = tmp_path / "checkpoints"
    checkpoint.mkdir()
    epochs = 12
    victim_spec = job_spec(epochs, 0.5, backoffLimit=0, checkpoint={"hostPath": str(checkpoint)})
    victim_spec["env"].append({"name": "STAND_IN_CHECKPOINT", "value": f"host:{checkpoint}"})
    victim = create(api, "victim", victim_spec, {names.KUEUE_PRIORITY_CLASS_LABEL: "batch-low"})
    wait_for("the victim's third epoch", lambda: len(status_of(api, "victim").get("epochs") or []) >= 3, 120,
             operator.logs)
    create(api, "urgent", job_spec(2, 0.5), {names.KUEUE_PRIORITY_CLASS_LABEL: "batch-high"})

    requeued = wait_for("the victim requeued", lambda: "Requeued" in conditions(status_of(api, "victim"))
                        and status_of(api, "victim"), 120, operator.logs)
    preempted_at = len(requeued.get("epochs") or [])
    print(f"\nvictim: {conditions(requeued)['Requeued']['reason']}: {conditions(requeued)['Requeued']['message']}")
    assert conditions(requeued)["Requeued"]["reason"] == "Preempted"
    assert "not counted against backoffLimit" in conditions(requeued)["Requeued"]["message"]
    assert requeued["restarts"] == 0 and requeued["attempt"] == 1
    old_group = names.kueue_pod_group_name("victim", 0, victim["metadata"]["uid"])
    evicted = conditions((workloads(api).get(old_group) or {}).get("status") or {})
    print(f"Workload {old_group}: Evicted={evicted.get('Evicted', {}).get('status')} "
          f"{evicted.get('Evicted', {}).get('reason')}: {evicted.get('Evicted', {}).get('message')}")

    urgent = wait_for("urgent to finish", lambda: status_of(api, "urgent").get("phase") in FINAL
                      and status_of(api, "urgent"), 180, operator.logs)
    assert urgent["phase"] == "Succeeded", urgent.get("message")
    done = wait_for("the victim to finish", lambda: status_of(api, "victim").get("phase") in FINAL
                    and status_of(api, "victim"), 300, operator.logs)
    assert done["phase"] == "Succeeded", done.get("message")
    print(f"victim epochs: {[e['epoch'] for e in done['epochs']]} (preempted after {preempted_at} reported)")
    assert [e["epoch"] for e in done["epochs"]] == list(range(epochs))  # no gap, no duplicate
    assert done["restarts"] == 0 and done["attempt"] == 1
    assert "Failed" not in conditions(done) and "Restarting" not in conditions(done)
    # Trained once each: the second attempt went on from the checkpoint the first one left.
    first, second = trained_runs(checkpoint)
    print(f"trained by attempt 0: {first}; by attempt 1: {second}")
    assert first + second == list(range(epochs))
    # The urgent job ran while the victim waited: it started after the victim's first group ended.
    stored = workloads(api)
    new_group = names.kueue_pod_group_name("victim", 1, victim["metadata"]["uid"])
    urgent_group = names.kueue_pod_group_name("urgent", 0, api.job("urgent")["metadata"]["uid"])
    assert admitted_at(stored[urgent_group]) <= admitted_at(stored[new_group])
    reasons = [e.reason for e in api.events("victim")]
    assert reasons.count("Requeued") == 1, reasons
    assert "Traceback" not in operator.logs()


def test_deleting_a_queued_job_removes_its_workload_and_suspending_an_admitted_one_frees_its_quota(
        api, kueue, operator_process, stand_in_env, wait_for):
    operator = operator_process(stand_in_env)
    holder = create(api, "holder", job_spec(600, 0.5))  # runs until it is suspended
    wait_for("holder running", lambda: status_of(api, "holder").get("phase") == "Running", 120, operator.logs)
    waiter, gone = create(api, "waiter", job_spec(2, 0.5)), create(api, "gone", job_spec(2, 0.5))
    holder_group, waiter_group, gone_group = (names.kueue_pod_group_name(j["metadata"]["name"], 0, j["metadata"]["uid"])
                                              for j in (holder, waiter, gone))
    wait_for("both queued", lambda: all(f"Workload {group}" in (status_of(api, name).get("message") or "")
                                        for name, group in (("waiter", waiter_group), ("gone", gone_group)))
             and gone_group in workloads(api), 60, operator.logs)

    # Deleting a queued job: the garbage collector deletes its pods; Kueue's finalizer holds them (gated, on no
    # node, Pending) until the pod garbage collector fails them; then Kueue finishes the group, lets the pods
    # go, and the Workload goes with them. Meanwhile the holder keeps the quota, so Kueue admits nothing.
    # The job is created again under its name at once: its group is its own (the new uid), never the old
    # Workload, which is still there while the old pods are.
    deleted = time.monotonic()
    api.delete_job("gone")
    again = create(api, "gone", job_spec(2, 0.5))
    new_group = names.kueue_pod_group_name("gone", 0, again["metadata"]["uid"])
    assert new_group != gone_group
    wait_for("the old pods and Workload to go", lambda: gone_group not in workloads(api)
             and all(p.metadata.owner_references[0].uid == again["metadata"]["uid"] for p in api.pods("gone")),
             120, operator.logs)
    print(f"\ngone deleted: its pods and Workload {gone_group} gone {time.monotonic() - deleted:.1f} s later")
    wait_for("the new gone queued", lambda: f"Workload {new_group}" in (status_of(api, "gone").get("message") or ""),
             60, operator.logs)
    assert status_of(api, "holder")["phase"] == "Running" and status_of(api, "waiter")["phase"] == "Pending"

    # Suspending the admitted job: its pods go, Kueue finishes its group, the waiting job is admitted.
    suspended = time.monotonic()
    api.custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "holder", {"spec": {"suspend": True}})
    wait_for("holder Suspended without pods", lambda: status_of(api, "holder").get("phase") == "Suspended"
             and not api.pods("holder"), 120, operator.logs)
    for name, group in (("waiter", waiter_group), ("gone", new_group)):
        done = wait_for(f"{name} to finish", lambda name=name: status_of(api, name).get("phase") in FINAL
                        and status_of(api, name), 180, operator.logs)
        assert done["phase"] == "Succeeded", done.get("message")
        assert [e["epoch"] for e in done["epochs"]] == [0, 1]
        print(f"holder suspended: {name}'s Workload {group} admitted at {admitted_at(workloads(api)[group])}, "
              f"the job Succeeded {time.monotonic() - suspended:.1f} s after the suspension")
    assert holder_group not in workloads(api) or \
        conditions(workloads(api)[holder_group]["status"])["Finished"]["status"] == "True"

    # Resumed: the next attempt is a new group, queued and admitted anew.
    api.custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "holder", {"spec": {"suspend": False}})
    resumed = wait_for("holder running again", lambda: status_of(api, "holder").get("phase") == "Running"
                       and status_of(api, "holder"), 120, operator.logs)
    assert resumed["attempt"] == 1 and resumed["restarts"] == 0
    again = names.kueue_pod_group_name("holder", 1, holder["metadata"]["uid"])
    print(f"holder resumed as attempt 1: Workload {again} admitted at {admitted_at(workloads(api)[again])}")
    assert "Traceback" not in operator.logs()


def tiny_training(epochs: int, checkpoint: Path | None = None) -> dict:
    """pets-train itself: a tiny model on a few generated images, so an epoch takes a second or two on a CPU."""
    spec = job_spec(epochs, 0, model="resnet10t", imageSize=32, batchSize=8, numWorkers=0, seed=7,
                    data={"synthetic": {"classes": 3, "imagesPerClass": 24, "imageSize": 32}})
    spec["env"] = [{"name": "OMP_NUM_THREADS", "value": "1"}]
    if checkpoint is not None:
        spec["checkpoint"] = {"hostPath": str(checkpoint)}
    return spec


@pytest.mark.slow
def test_real_training_preempted_by_kueue_resumes_from_its_checkpoint(api, cluster, kueue, operator_process, wait_for,
                                                                      tmp_path):
    """As above with pets-train (accelerate launch, 2 nodes): the checkpoint is the trainer's own."""
    kueue.create_priority_class("batch-low", 100)
    kueue.create_priority_class("batch-high", 1000)
    operator = operator_process()
    epochs = 20
    create(api, "victim", tiny_training(epochs, tmp_path / "checkpoints"), {names.KUEUE_PRIORITY_CLASS_LABEL: "batch-low"})
    wait_for("the victim's second epoch", lambda: len(status_of(api, "victim").get("epochs") or []) >= 2, 600,
             operator.logs)
    create(api, "urgent", tiny_training(1), {names.KUEUE_PRIORITY_CLASS_LABEL: "batch-high"})
    requeued = wait_for("the victim requeued", lambda: "Requeued" in conditions(status_of(api, "victim"))
                        and status_of(api, "victim"), 120, operator.logs)
    assert conditions(requeued)["Requeued"]["reason"] == "Preempted" and requeued["restarts"] == 0
    assert len(requeued["epochs"]) < epochs, "the victim finished before it was preempted"
    urgent = wait_for("urgent to finish", lambda: status_of(api, "urgent").get("phase") in FINAL
                      and status_of(api, "urgent"), 600, operator.logs)
    assert urgent["phase"] == "Succeeded", urgent.get("message")
    done = wait_for("the victim to finish", lambda: status_of(api, "victim").get("phase") in FINAL
                    and status_of(api, "victim"), 900, operator.logs)
    assert done["phase"] == "Succeeded", done.get("message")
    assert [e["epoch"] for e in done["epochs"]] == list(range(epochs))
    assert done["restarts"] == 0 and done["attempt"] == 1
    # Pod 0 of each attempt (the preempted one's log kept): the second re-reports what the checkpoint holds and
    # trains only the epochs after it; no epoch up to the checkpoint is trained twice.
    logs = [epoch_lines((log_dir / "trainer.log").read_text())
            for log_dir in (Path(cluster.workdir) / "logs").glob(f"{NAMESPACE}_victim-0_*")]
    assert len(logs) == 2, logs
    (first_trained, first_resumed), (second_trained, second_resumed) = sorted(logs, key=lambda lines: bool(lines[1]))
    print(f"\nvictim (pets-train): attempt 0 trained {first_trained}; attempt 1 resumed {second_resumed} from the "
          f"checkpoint and trained {second_trained}")
    assert first_resumed == [] and second_resumed == list(range(second_resumed[-1] + 1))
    assert second_trained == list(range(second_resumed[-1] + 1, epochs))
    assert set(first_trained) >= set(second_resumed), "the checkpoint holds epochs the first attempt did not train"
