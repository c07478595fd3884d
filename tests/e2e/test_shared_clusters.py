"""Shared clusters, end to end with the real operator on the local cluster: a job suspended and resumed
from its checkpoint, Kueue admitting, preempting and readmitting a job (a stand-in for Kueue that does
to the pods what Kueue does), and two 2-node jobs on a node with room for two pods: stuck for good
without gang scheduling, both done one after the other with it."""
from __future__ import annotations

from pathlib import Path

import pytest

from pets_api import GROUP, PLURAL, VERSION, names
from pets_api.metric_lines import parse_lines
from pets_localkube import LocalCluster
from pets_localkube.gang import DEFAULT_GANG_SCHEDULER
from tests.e2e.kueue_stand_in import FINALIZER, GATE, KueueStandIn
from tests.support.fault_proxy import FaultProxy

pytestmark = pytest.mark.e2e

NAMESPACE = "default"
PODS = r"^/api/v1/namespaces/default/pods$"
FINAL = ("Succeeded", "Failed")


@pytest.fixture
def cluster(tmp_path, cluster_crds):
    """Two CPUs, the logs of deleted pods kept (the suspended attempt's), and a gang scheduler."""
    with LocalCluster(workdir=tmp_path / "cluster", cpu=2, crds=cluster_crds, keep_logs=True,
                      gang_scheduler=DEFAULT_GANG_SCHEDULER) as running:
        yield running


def status_of(api, name: str) -> dict:
    return (api.job(name) or {}).get("status") or {}


def conditions(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status.get("conditions") or []}


def patch_spec(api, name: str, **spec) -> None:
    api.custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name, {"spec": spec})


def reasons(api, name: str) -> list[str]:
    return [e.reason for e in sorted(api.events(name), key=lambda e: e.metadata.creation_timestamp)]


def pod_scheduled(pod) -> tuple[str | None, str | None]:
    condition = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
    return (condition.reason, condition.message) if condition is not None else (None, None)


# --- suspend and resume -------------------------------------------------------------------------

def epoch_lines(log: str) -> tuple[list[int], list[int]]:
    """(epochs trained, epochs re-reported from a checkpoint) by a pod 0's metric lines."""
    events = [e for e in parse_lines(log) if e.get("event") == "epoch"]
    return [e["epoch"] for e in events if not e.get("resumed")], [e["epoch"] for e in events if e.get("resumed")]


@pytest.mark.slow
def test_a_suspended_job_resumes_from_its_checkpoint(api, cluster, operator_process, wait_for, tmp_path):
    operator = operator_process()
    epochs = 20  # a fraction of a second each: the suspension lands long before the last
    api.create_job("pausing", {
        "numNodes": 2, "epochs": epochs, "model": "resnet10t", "imageSize": 32, "batchSize": 8, "numWorkers": 0,
        "seed": 7, "data": {"synthetic": {"classes": 3, "imagesPerClass": 24, "imageSize": 32}},
        "checkpoint": {"hostPath": str(tmp_path / "checkpoints")}, "activeDeadlineSeconds": 3600,
        "env": [{"name": "OMP_NUM_THREADS", "value": "1"}]})
    wait_for("the first epoch", lambda: status_of(api, "pausing").get("epochs"), 600, operator.logs)
    patch_spec(api, "pausing", suspend=True)
    suspended = wait_for("Suspended without pods", lambda: status_of(api, "pausing").get("phase") == "Suspended"
                         and not api.pods("pausing") and status_of(api, "pausing"), 60, operator.logs)
    assert conditions(suspended)["Suspended"]["status"] == "True"
    assert suspended["attempt"] == 1 and suspended["restarts"] == 0
    assert suspended["observedGeneration"] == api.job("pausing")["metadata"]["generation"]
    assert [e["epoch"] for e in suspended["epochs"]] == list(range(len(suspended["epochs"])))  # kept: a checkpoint
    assert len(suspended["epochs"]) < epochs, "the job finished before it was suspended"

    patch_spec(api, "pausing", suspend=False)
    done = wait_for("the job to finish", lambda: status_of(api, "pausing").get("phase") in FINAL
                    and status_of(api, "pausing"), 600, operator.logs)
    assert done["phase"] == "Succeeded", done.get("message")
    assert [e["epoch"] for e in done["epochs"]] == list(range(epochs))  # each epoch once
    assert done["restarts"] == 0 and done["attempt"] == 1
    assert conditions(done)["Suspended"]["status"] == "False" and conditions(done)["Suspended"]["reason"] == "JobResumed"
    assert reasons(api, "pausing").count("Suspended") == 1 and reasons(api, "pausing").count("Resumed") == 1
    # The suspended seconds stopped the deadline's clock.
    assert done["suspendedSeconds"] >= 0

    # Pod 0 of each attempt (the logs of the deleted one are kept): the resumed attempt re-reports what the
    # checkpoint holds and trains only the epochs after it; no epoch up to the checkpoint is trained twice.
    logs = [epoch_lines((log_dir / "trainer.log").read_text())
            for log_dir in (Path(cluster.workdir) / "logs").glob(f"{NAMESPACE}_pausing-0_*")]
    assert len(logs) == 2, logs
    (first_trained, first_resumed), (second_trained, second_resumed) = sorted(logs, key=lambda lines: bool(lines[1]))
    assert first_resumed == [] and second_resumed, logs
    checkpoint = second_resumed[-1]
    assert second_resumed == list(range(checkpoint + 1))
    assert second_trained == list(range(checkpoint + 1, epochs))
    assert set(first_trained) <= set(second_resumed), "an epoch trained before the suspension was trained again"
    assert set(first_trained) >= set(range(checkpoint)), "the checkpoint holds epochs the first attempt did not train"


# --- Kueue ----------------------------------------------------------------------------------------

def test_kueue_admits_preempts_and_readmits_the_group(api, operator_process, stand_in_env, wait_for):
    kueue = KueueStandIn(api.core).start()
    operator = operator_process({**stand_in_env, **kueue.operator_env})
    try:
        epochs = 25
        uid = api.create_job("queued", {"numNodes": 2, "epochs": epochs, "model": "resnet10t", "data": {"synthetic": {}},
                                  "queueName": "team-a", "priorityClassName": "batch-low",
                                  "env": [{"name": "STAND_IN_EPOCH_SECONDS", "value": "0.2"}]})["metadata"]["uid"]
        first, second = (names.kueue_pod_group_name("queued", attempt, uid) for attempt in (0, 1))

        def gated():
            pods = api.pods("queued")
            return len(pods) == 2 and all(pod_scheduled(p)[0] == "SchedulingGated" and FINALIZER in (p.metadata.finalizers or [])
                                          for p in pods) and pods
        pods = wait_for("both pods, gated, held by Kueue's finalizer", gated, 30, operator.logs)
        for pod in pods:
            assert pod.metadata.labels["kueue.x-k8s.io/queue-name"] == "team-a"
            assert pod.metadata.labels["kueue.x-k8s.io/pod-group-name"] == first
            assert pod.metadata.annotations["kueue.x-k8s.io/pod-group-total-count"] == "2"
            assert pod.metadata.annotations["kueue.x-k8s.io/retriable-in-group"] == "false"
            assert [g.name for g in pod.spec.scheduling_gates] == [GATE] and pod.spec.node_name is None
            assert pod.spec.priority_class_name == "batch-low"
        waiting = wait_for("the message", lambda: GATE in (status_of(api, "queued").get("message") or "")
                           and status_of(api, "queued"), 10, operator.logs)
        assert waiting["phase"] == "Pending" and "Scheduled" not in conditions(waiting)  # waiting, not a problem

        kueue.open()
        wait_for("Running", lambda: status_of(api, "queued").get("phase") == "Running", 30, operator.logs)
        wait_for("an epoch", lambda: len(status_of(api, "queued").get("epochs") or []) >= 2, 30, operator.logs)
        kueue.preempt(first)
        requeued = wait_for("Requeued", lambda: "Requeued" in conditions(status_of(api, "queued"))
                            and status_of(api, "queued"), 30, operator.logs)
        assert requeued["restarts"] == 0 and requeued["attempt"] == 1
        assert conditions(requeued)["Requeued"]["reason"] in ("Preempted", "PodsDeleted")
        assert "not counted against backoffLimit" in conditions(requeued)["Requeued"]["message"]
        done = wait_for("the job to finish", lambda: status_of(api, "queued").get("phase") in FINAL
                        and status_of(api, "queued"), 90, operator.logs)
        assert done["phase"] == "Succeeded", done.get("message")
        assert done["restarts"] == 0 and done["attempt"] == 1
        assert [e["epoch"] for e in done["epochs"]] == list(range(epochs))
        assert "Failed" not in conditions(done) and "Restarting" not in conditions(done)
        assert kueue.admitted == [first, second] and kueue.preempted == [first]
        assert kueue.seen_before_admission == {first: 2, second: 2}  # no pod placed before its admission
        wait_for("Kueue to let the finished group go", lambda: second in kueue.finished, 10)
        assert "Requeued" in reasons(api, "queued")
        assert "Traceback" not in operator.logs()
    finally:
        kueue.stop()


def test_a_job_created_suspended_makes_nothing_and_its_queue_label_counts(api, operator_process, stand_in_env,
                                                                          wait_for):
    """Created with suspend: true, nothing is made until it is resumed; the queue is the job's own Kueue label."""
    kueue = KueueStandIn(api.core).start()
    operator = operator_process({**stand_in_env, **kueue.operator_env})
    try:
        kueue.open()
        held = api.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob",
            "metadata": {"name": "held", "namespace": NAMESPACE, "labels": {"kueue.x-k8s.io/queue-name": "team-b"}},
            "spec": {"numNodes": 2, "epochs": 2, "model": "resnet10t", "data": {"synthetic": {}}, "suspend": True,
                     "env": [{"name": "STAND_IN_EPOCH_SECONDS", "value": "0.1"}]}})
        suspended = wait_for("Suspended", lambda: status_of(api, "held").get("phase") == "Suspended"
                             and status_of(api, "held"), 30, operator.logs)
        assert conditions(suspended)["Suspended"]["reason"] == "JobSuspended" and "startTime" not in suspended
        with pytest.raises(pytest.fail.Exception, match="timed out"):  # and nothing comes while it stays so
            wait_for("anything of the job", lambda: api.pods("held") or api.services("held"), 2)
        assert status_of(api, "held")["attempt"] == 0

        patch_spec(api, "held", suspend=False)
        done = wait_for("the job to finish", lambda: status_of(api, "held").get("phase") in FINAL
                        and status_of(api, "held"), 60, operator.logs)
        assert done["phase"] == "Succeeded", done.get("message")
        assert done["attempt"] == 0 and done["restarts"] == 0 and not done.get("suspendedSeconds")
        group = names.kueue_pod_group_name("held", 0, held["metadata"]["uid"])
        for pod in api.pods("held"):
            assert pod.metadata.labels["kueue.x-k8s.io/queue-name"] == "team-b"
            assert pod.metadata.labels["kueue.x-k8s.io/pod-group-name"] == group
        assert kueue.admitted == [group]
        assert reasons(api, "held").count("Suspended") == 1 and reasons(api, "held").count("Resumed") == 1
    finally:
        kueue.stop()


# --- gang scheduling ----------------------------------------------------------------------------------

@pytest.fixture
def proxy(cluster, tmp_path):
    with FaultProxy(cluster.url, tmp_path / "faults") as running:
        yield running


def two_node_job(**extra) -> dict:
    """Each pod wants one of the node's two CPUs; the stand-in's pods wait for each other as a rendezvous does."""
    return {"numNodes": 2, "epochs": 3, "model": "resnet10t", "data": {"synthetic": {}},
            "resources": {"requests": {"cpu": "1"}},
            "env": [{"name": "STAND_IN_RENDEZVOUS", "value": "1"}, {"name": "STAND_IN_EPOCH_SECONDS", "value": "0.2"}],
            **extra}


def start_interleaved(api, proxy, operator, wait_for, jobs: tuple[str, str], spec: dict) -> None:
    """Both jobs' pod 0 before either job's pod 1, as two jobs submitted together often come: the test holds
    pod 1's creation back (a server error, which the operator retries) until both pods 0 are there."""
    held = proxy.fail("POST", PODS, status=500, reason="InternalError", message="held back by the test", times=None,
                      body=rf'"name": ?"({jobs[0]}|{jobs[1]})-1"')
    for name in jobs:
        api.create_job(name, spec)
    wait_for("both pods 0", lambda: all(api.pods(name) for name in jobs) and held.hits >= 2, 30, operator.logs)
    proxy.clear()


def test_without_gang_scheduling_two_jobs_that_fit_only_one_at_a_time_hang(api, proxy, operator_process, stand_in_env,
                                                                            wait_for):
    operator = operator_process({**stand_in_env, "KUBECONFIG": str(proxy.kubeconfig)})
    start_interleaved(api, proxy, operator, wait_for, ("left", "right"), two_node_job())

    def deadlocked():
        pods = {p.metadata.name: p for name in ("left", "right") for p in api.pods(name)}
        return len(pods) == 4 and all(pods[f"{n}-0"].status.phase == "Running" for n in ("left", "right")) and \
            all(pod_scheduled(pods[f"{n}-1"])[0] == "Unschedulable" for n in ("left", "right"))
    wait_for("each job with one pod running and one it cannot place", deadlocked, 30, operator.logs)
    with pytest.raises(pytest.fail.Exception, match="timed out"):  # and so it stays: each pod 0 waits for its pod 1
        wait_for("either job to get on", lambda: any(status_of(api, n).get("epochs") or status_of(api, n).get("phase") in FINAL
                                                     for n in ("left", "right")), 8)
    for name in ("left", "right"):
        status = status_of(api, name)
        assert status["phase"] == "Pending" and status["workers"]["running"] == 1, status
        assert f"pod {name}-1 cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu." in status["message"]
        assert "waiting for every machine" in api.core.read_namespaced_pod_log(f"{name}-0", NAMESPACE)
        assert "all machines are there" not in api.core.read_namespaced_pod_log(f"{name}-0", NAMESPACE)


def test_with_gang_scheduling_both_jobs_run_one_after_the_other(api, proxy, operator_process, stand_in_env, wait_for):
    operator = operator_process({**stand_in_env, "KUBECONFIG": str(proxy.kubeconfig)})
    start_interleaved(api, proxy, operator, wait_for, ("left", "right"),
                      two_node_job(gangScheduling={"scheduleTimeoutSeconds": 30}))
    done = {name: wait_for(f"{name} to finish", lambda name=name: status_of(api, name).get("phase") in FINAL
                           and status_of(api, name), 90, operator.logs) for name in ("left", "right")}
    for name, status in done.items():
        assert status["phase"] == "Succeeded", status.get("message")
        group = api.custom.get_namespaced_custom_object("scheduling.x-k8s.io", "v1alpha1", NAMESPACE, "podgroups", name)
        assert group["spec"] == {"minMember": 2, "minResources": {"cpu": "2"}, "scheduleTimeoutSeconds": 30}
        assert group["metadata"]["ownerReferences"][0]["name"] == name
        for pod in api.pods(name):
            assert pod.spec.scheduler_name == DEFAULT_GANG_SCHEDULER
            assert pod.metadata.labels["scheduling.x-k8s.io/pod-group"] == name
    # One group ran, then the other: no pod of the second started before every pod of the first had ended.
    spans = {}
    for name in ("left", "right"):
        states = [p.status.container_statuses[0].state.terminated for p in api.pods(name)]
        spans[name] = (min(s.started_at for s in states), max(s.finished_at for s in states))
    first, second = sorted(spans.values())
    assert second[0] >= first[1], spans
