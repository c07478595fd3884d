"""The operator and the real trainer image on the local cluster's docker runtime: pods are containers
from pets-trainer:0.1.0, on one network, reaching each other by the headless Service's names."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.container, pytest.mark.e2e]

CLASSES = 3


def tiny_job(epochs: int, **extra) -> dict:
    return {"numNodes": 2, "epochs": epochs, "model": "resnet10t", "imageSize": 32, "batchSize": 8,
            "numWorkers": 0, "seed": 7,
            "data": {"synthetic": {"classes": CLASSES, "imagesPerClass": 16, "imageSize": 32}},
            "env": [{"name": "OMP_NUM_THREADS", "value": "1"}], **extra}


def status_of(api, name):
    return (api.job(name) or {}).get("status") or {}


def finished(api, name):
    status = status_of(api, name)
    return status.get("phase") in ("Succeeded", "Failed") and status


def test_two_containers_rendezvous_through_the_service_names_and_train(api, cluster, operator_process, wait_for):
    operator = operator_process()
    api.create_job("boxed", tiny_job(epochs=2))
    pod_ips = wait_for("both pods' own addresses", lambda: len({
        p.status.pod_ip for p in api.pods("boxed") if p.status.pod_ip and p.status.pod_ip != "127.0.0.1"}) == 2
        and {p.metadata.name: p.status.pod_ip for p in api.pods("boxed")}, 240, operator.logs)
    status = wait_for("the job to finish", lambda: finished(api, "boxed"), 600, operator.logs)
    assert status["phase"] == "Succeeded", status.get("message")
    assert [entry["epoch"] for entry in status["epochs"]] == [0, 1], status
    assert status["bestAccuracy"] > 0
    pods = {p.metadata.name: p for p in api.pods("boxed")}
    for pod in pods.values():
        container = pod.status.container_statuses[0]
        assert container.container_id.startswith("docker://")
        assert container.state.terminated.reason == "Completed"
    log = api.core.read_namespaced_pod_log("boxed-1", "default")
    # Node 1 reached node 0 by the DNS name the operator gave it, unrewritten.
    assert "boxed-0.boxed-workers.default.svc" in api.core.read_namespaced_pod(
        "boxed-1", "default").spec.containers[0].env[[e.name for e in api.core.read_namespaced_pod(
            "boxed-1", "default").spec.containers[0].env].index("MASTER_ADDR")].value
    assert "Traceback" not in log, log[-3000:]
    assert len(set(pod_ips.values())) == 2


def test_a_worker_over_its_memory_limit_is_oom_killed_and_the_group_restarts(api, operator_process, wait_for):
    operator = operator_process()
    # 64Mi is far below what importing torch takes: the kernel's OOM killer ends the trainers.
    api.create_job("hungry", {**tiny_job(epochs=1), "backoffLimit": 1,
                              "resources": {"limits": {"memory": "64Mi", "cpu": "1"},
                                            "requests": {"memory": "64Mi", "cpu": "500m"}}})
    status = wait_for("the job to fail", lambda: finished(api, "hungry"), 600, operator.logs)
    assert status["phase"] == "Failed", status
    assert "OOMKilled" in status["message"], status["message"]
    assert "exit code 137" in status["message"], status["message"]
    assert status["restarts"] == 1, status


def test_a_missing_image_keeps_the_job_pending_with_the_kubelet_s_reason(api, operator_process, wait_for):
    operator = operator_process()
    api.create_job("unbuilt", {**tiny_job(epochs=1), "image": "pets-trainer:never-built"})
    message = wait_for("the waiting reason in the job", lambda: "ErrImageNeverPull" in (
        status_of(api, "unbuilt").get("message") or "") and status_of(api, "unbuilt")["message"], 120, operator.logs)
    assert status_of(api, "unbuilt")["phase"] == "Pending"
    assert 'Container image "pets-trainer:never-built" is not present' in message


@pytest.fixture(scope="module")
def root_image(engine):
    import subprocess

    tag = "pets-trainer:root-test"
    subprocess.run(["docker", "build", "-q", "-t", tag, "-"], input=b"FROM pets-trainer:0.1.0\nUSER 0\n",
                   check=True, capture_output=True, timeout=300)
    yield tag
    subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True, check=False)


def test_run_as_non_root_refuses_an_image_that_runs_as_root(api, root_image, wait_for):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rooted"},
           "spec": {"restartPolicy": "Never", "securityContext": {"runAsNonRoot": True},
                    "containers": [{"name": "trainer", "image": root_image, "command": ["id", "-u"]}]}}
    api.core.create_namespaced_pod("default", pod)

    def refused():
        statuses = api.core.read_namespaced_pod("rooted", "default").status.container_statuses or []
        waiting = statuses and statuses[0].state.waiting
        return waiting and waiting.reason == "CreateContainerConfigError" and waiting

    waiting = wait_for("CreateContainerConfigError", refused, 60)
    assert waiting.message.startswith("container has runAsNonRoot and image will run as root")
    assert api.core.read_namespaced_pod("rooted", "default").status.phase == "Pending"
    # The same image with a runAsUser runs: the user, not the image, decides.
    pod["metadata"]["name"] = "as-user"
    pod["spec"]["securityContext"]["runAsUser"] = 4321
    api.core.create_namespaced_pod("default", pod)
    wait_for("as-user succeeded", lambda: api.core.read_namespaced_pod("as-user", "default").status.phase
             == "Succeeded", 60)
    assert api.core.read_namespaced_pod_log("as-user", "default").strip() == "4321"


def test_the_operator_s_pinned_user_runs_even_a_root_image_as_non_root(api, root_image, operator_process, wait_for):
    """The operator's pods carry runAsNonRoot *with* a runAsUser/runAsGroup (builders.RUN_AS_USER), so the kubelet's refusal
    (the raw pod above) cannot hit them: a trainer image whose USER is root still runs, as that uid."""
    operator = operator_process()
    api.create_job("rooted-job", {**tiny_job(epochs=1), "image": root_image})
    status = wait_for("the job to finish", lambda: finished(api, "rooted-job"), 300, operator.logs)
    assert status["phase"] == "Succeeded", status.get("message")
    context = api.core.read_namespaced_pod("rooted-job-0", "default").spec.security_context
    assert context.run_as_non_root and context.run_as_user not in (None, 0), context
