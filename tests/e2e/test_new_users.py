"""Issue 23, what new users hit, end to end: the real operator on the local cluster with the stand-in trainer.

A volume that cannot be mounted, a gang scheduler's PodGroup API that is not installed and a name that another
pod already has are said on the job; a job is deleted with no operator running; the text log names each job;
a failed job's pods (and so `job.logs()`) stay."""
from __future__ import annotations

import subprocess
import sys

import kubernetes
import pytest

from pets_api import GROUP

from .conftest import NAMESPACE, OperatorProcess

pytestmark = pytest.mark.e2e


def job_spec(**extra):
    return {"numNodes": 2, "epochs": 3, "model": "resnet10t", "data": {"synthetic": {}}, **extra}


def status_of(api, name):
    return (api.job(name) or {}).get("status") or {}


def conditions(status):
    return {c["type"]: c for c in status.get("conditions") or []}


def warnings(api, name, reason):
    return [e for e in api.events(name) if e.reason == reason and e.type == "Warning"]


def test_a_missing_host_path_is_the_job_s_message_condition_and_event(api, operator_process, stand_in_env, wait_for,
                                                                        tmp_path):
    operator = operator_process(stand_in_env)
    data = tmp_path / "not-there-yet"
    api.create_job("mounting", job_spec(numNodes=1, data={"hostPath": str(data)}))

    def said():
        status = status_of(api, "mounting")
        return conditions(status).get("VolumesMounted", {}).get("reason") == "FailedMount" and status

    status = wait_for("VolumesMounted=False", said, 60, operator.logs)
    assert status["phase"] == "Pending"
    assert status["message"].startswith("0 of 1 worker(s) running; pod mounting-0 cannot mount its volumes: "
                                        'MountVolume.SetUp failed for volume "data"'), status["message"]
    assert str(data) in status["message"] and str(data) in conditions(status)["VolumesMounted"]["message"]
    events = wait_for("the FailedMount event", lambda: warnings(api, "mounting", "FailedMount"), 15)
    assert str(data) in events[0].message
    data.mkdir()  # the kubelet's next try mounts it: the job runs, the condition turns True
    status = wait_for("Succeeded", lambda: status_of(api, "mounting").get("phase") == "Succeeded"
                      and status_of(api, "mounting"), 60, operator.logs)
    assert conditions(status)["VolumesMounted"]["status"] == "True"


def test_gang_scheduling_without_the_pod_group_api_says_so_once(api, operator_process, stand_in_env, wait_for):
    operator = operator_process(stand_in_env)
    api.create_job("gang", job_spec(gangScheduling={"scheduler": "coscheduling"}))

    def said():
        status = status_of(api, "gang")
        return conditions(status).get("Created", {}).get("reason") == "PodGroupAPINotInstalled" and status

    status = wait_for("Created=False/PodGroupAPINotInstalled", said, 30, operator.logs)
    assert status["phase"] == "Pending"
    assert "the cluster does not serve PodGroups of scheduling.x-k8s.io/v1alpha1" in status["message"]
    assert "install it, or recreate the job without spec.gangScheduling" in status["message"]
    wait_for("a few retries", lambda: operator.logs().count("creating PodGroup gang") >= 3, 30, operator.logs)
    assert len(warnings(api, "gang", "PodGroupAPINotInstalled")) == 1
    assert api.pods("gang") == []


def test_a_pod_that_has_the_name_and_not_the_job_s_owner_fails_the_job(api, operator_process, stand_in_env,
                                                                        wait_for):
    # A plain pod named like the job's worker 1, even with the job's labels: never taken for the job's own.
    labels = {f"{GROUP}/job-name": "clash", f"{GROUP}/replica-index": "1", f"{GROUP}/attempt": "0"}
    api.core.create_namespaced_pod(NAMESPACE, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "clash-1", "labels": labels},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "python", "command": [sys.executable, "-c", "import time; time.sleep(120)"]}]}})
    operator = operator_process(stand_in_env)
    api.create_job("clash", job_spec(epochs=20, env=[{"name": "STAND_IN_EPOCH_SECONDS", "value": "0.5"}]))
    status = wait_for("Failed", lambda: status_of(api, "clash").get("phase") == "Failed" and status_of(api, "clash"),
                      30, operator.logs)
    assert conditions(status)["Failed"]["reason"] == "NameConflict"
    assert status["message"] == ("cannot create Pod clash-1: Pod clash-1 already exists and is not this job's: it has "
                                 "no owner; delete it, or recreate this job under another name")
    assert wait_for("the NameConflict event", lambda: warnings(api, "clash", "NameConflict"), 15)
    wait_for("the job's own pod stopped", lambda: [p.metadata.name for p in api.pods("clash")
                                                   if not p.metadata.owner_references] == ["clash-1"]
             and all(p.metadata.deletion_timestamp or p.status.phase in ("Succeeded", "Failed")
                     for p in api.pods("clash") if p.metadata.owner_references), 30, operator.logs)
    assert api.core.read_namespaced_pod("clash-1", NAMESPACE).metadata.deletion_timestamp is None  # left alone


def test_a_job_is_deleted_while_no_operator_runs(api, operator_process, stand_in_env, wait_for):
    spec = job_spec(epochs=200, env=[{"name": "STAND_IN_EPOCH_SECONDS", "value": "0.5"}])
    api.create_job("orphan", spec)
    older = api.custom.patch_namespaced_custom_object(  # as an older operator left it: kopf's finalizer
        GROUP, "v1alpha1", NAMESPACE, "petstrainingjobs", "orphan", {"metadata": {"finalizers": [f"{GROUP}/operator"]}})
    assert older["metadata"]["finalizers"] == [f"{GROUP}/operator"]
    operator = operator_process(stand_in_env)
    wait_for("Running", lambda: status_of(api, "orphan").get("phase") == "Running", 60, operator.logs)
    wait_for("the older finalizer removed", lambda: not api.job("orphan")["metadata"].get("finalizers"), 15)
    operator.stop()
    api.delete_job("orphan")
    wait_for("the job gone", lambda: api.job("orphan") is None, 10)
    wait_for("its pods gone with it", lambda: not api.pods("orphan"), 60)


class TextLogOperator(OperatorProcess):
    def start(self) -> TextLogOperator:
        self.starts += 1
        log = (self.log_dir / f"operator-{self.starts}.log").open("wb")
        self.process = subprocess.Popen([sys.executable, "-m", "pets_operator", "run", "--log-format", "text"],
                                        env=self.env, stdout=log, stderr=subprocess.STDOUT)
        return self


def test_the_text_log_names_the_job_on_each_of_its_lines(api, cluster, stand_in_env, wait_for, tmp_path):
    operator = TextLogOperator(cluster.kubeconfig, tmp_path, stand_in_env).start()
    try:
        api.create_job("texty", job_spec())
        wait_for("Succeeded", lambda: status_of(api, "texty").get("phase") == "Succeeded", 60, operator.logs)
        api.delete_job("texty")
        wait_for("the daemon gone", lambda: "stopped following the job" in operator.logs(), 30, operator.logs)
    finally:
        operator.stop()
    job_lines = [line for line in operator.logs().splitlines() if " kopf.objects " in line]
    assert [line for line in job_lines if "epoch 2: accuracy" in line], operator.logs()
    assert job_lines and all(f"[{NAMESPACE}/texty] " in line for line in job_lines), job_lines


def test_a_failed_job_keeps_its_pods_and_its_logs_default_to_the_failed_worker(api, cluster, operator_process,
                                                                                stand_in_env, wait_for):
    from pets_client.client import JobFailed, PetsTrainingJobClient

    operator = operator_process(stand_in_env)
    client = PetsTrainingJobClient(NAMESPACE, kubernetes.config.new_client_from_config(str(cluster.kubeconfig)))
    job = client.submit("failing", **job_spec(epochs=20, env=[{"name": "STAND_IN_FAIL_RANK", "value": "1"}]))
    with pytest.raises(JobFailed):
        job.wait(timeout=60, display=False, raise_on_failure=True)
    log = job.logs()  # right after JobFailed: the failed worker's log, not a 404
    assert "stand-in rank 1 of 2" in log and "stand-in: failing on purpose" in log
    assert "stand-in rank 0 of 2" in job.logs(index=0)
    wait_for("the workers ended", lambda: all(p.status.phase in ("Succeeded", "Failed") for p in api.pods("failing")),
             30, operator.logs)
    assert sorted(p.metadata.name for p in api.pods("failing")) == ["failing-0", "failing-1"]
