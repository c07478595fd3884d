"""A job's life as a user drives it with the real `kubectl`, on both API servers: apply, get with the
CRD's printer columns, wait, describe, logs, delete (the pods go with the job by their
ownerReferences); `--dry-run=server` makes nothing; suspend and resume; 3 nodes x 2 processes."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from pets_api import GROUP, VERSION
from pets_localkube.kubernetes_cluster import KubernetesCluster

from .conftest import NAMESPACE, POD_SECURITY_ENFORCE

pytestmark = [pytest.mark.e2e, pytest.mark.both_servers]


@pytest.fixture
def run_kubectl(kubectl, cluster):
    def run(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        done = subprocess.run([kubectl, "--kubeconfig", str(cluster.kubeconfig), *args],
                              capture_output=True, text=True, timeout=timeout)
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)} failed: {done.stderr}"
        return done
    return run


def manifest(path: Path, name: str, **spec) -> Path:
    body = {"numNodes": 2, "epochs": 3, "model": "resnet10t", "data": {"synthetic": {}}, **spec}
    path.write_text(yaml.safe_dump({"apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob",
                                    "metadata": {"name": name}, "spec": body}))
    return path


def status(api, name: str) -> dict:
    return (api.job(name) or {}).get("status") or {}


def test_apply_get_wait_describe_logs_delete(cluster, api, operator_process, stand_in_env, run_kubectl, tmp_path, wait_for):
    operator = operator_process(stand_in_env)
    path = manifest(tmp_path / "job.yaml", "life", numNodes=3, processesPerNode=2, epochs=3)
    assert "petstrainingjob.training.pets.dev/life created" in run_kubectl("apply", "-f", str(path)).stdout
    waited = run_kubectl("wait", "ptj/life", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=90s",
                         check=False, timeout=100)
    assert waited.returncode == 0, f"{waited.stderr}\n{status(api, 'life')}\n{operator.logs()[-4000:]}"

    table = run_kubectl("get", "ptj", "life").stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "NODES", "EPOCH", "ACCURACY", "AGE"]
    row = table[1].split()
    # EPOCH counts epochs completed from 1, as every number a person reads does: all 3 of 3.
    assert row[:4] == ["life", "Succeeded", "3", "3"] and float(row[4]) == status(api, "life")["accuracy"]

    described = run_kubectl("describe", "ptj", "life").stdout
    assert "Name:         life" in described and "Phase:" in described and "Succeeded" in described

    pods = api.pods("life")
    assert sorted(p.metadata.name for p in pods) == ["life-0", "life-1", "life-2"]
    assert all(p.metadata.owner_references[0].kind == "PetsTrainingJob" for p in pods)
    if isinstance(cluster, KubernetesCluster):  # these pods passed kube-apiserver's PodSecurity admission
        assert api.core.read_namespace(NAMESPACE).metadata.labels[POD_SECURITY_ENFORCE] == "restricted"
    env = {e.name: e.value for e in pods[0].spec.containers[0].env if e.value is not None}
    assert env["NUM_MACHINES"] == "3" and env["NPROC_PER_NODE"] == "2"
    logs = run_kubectl("logs", "life-0").stdout
    assert "stand-in rank 0 of 3" in logs and "epoch 2 done" in logs

    # The operator has no delete handler and the job no finalizer: the garbage collector removes the
    # pods and the Service through their ownerReferences.
    assert 'petstrainingjob.training.pets.dev "life" deleted' in run_kubectl("delete", "ptj", "life").stdout
    wait_for("pods and Service garbage-collected", lambda: not api.pods("life") and not api.services("life"), 60)


def test_server_side_dry_run_creates_nothing_and_still_validates(api, run_kubectl, tmp_path):
    done = run_kubectl("apply", "--dry-run=server", "-f", str(manifest(tmp_path / "job.yaml", "rehearsal")))
    assert "petstrainingjob.training.pets.dev/rehearsal created (server dry run)" in done.stdout
    assert api.job("rehearsal") is None
    bad = run_kubectl("apply", "--dry-run=server", "-f", str(manifest(tmp_path / "bad.yaml", "bad", numNodes=0)),
                      check=False)
    assert bad.returncode != 0 and "spec.numNodes" in bad.stderr and "should be greater than or equal to 1" in bad.stderr
    assert api.job("bad") is None


def test_suspend_removes_the_pods_and_resume_finishes_the_job(api, operator_process, stand_in_env, run_kubectl,
                                                               tmp_path, wait_for):
    operator = operator_process(stand_in_env)
    run_kubectl("apply", "-f", str(manifest(tmp_path / "job.yaml", "pausing", epochs=30,
                                            env=[{"name": "STAND_IN_EPOCH_SECONDS", "value": "0.3"}])))
    wait_for("Running", lambda: status(api, "pausing").get("phase") == "Running", 60, operator.logs)
    run_kubectl("patch", "ptj", "pausing", "--type", "merge", "-p", json.dumps({"spec": {"suspend": True}}))
    suspended = wait_for("Suspended without pods", lambda: status(api, "pausing").get("phase") == "Suspended"
                         and not api.pods("pausing") and status(api, "pausing"), 60, operator.logs)
    assert next(c for c in suspended["conditions"] if c["type"] == "Suspended")["status"] == "True"
    run_kubectl("patch", "ptj", "pausing", "--type", "merge", "-p", json.dumps({"spec": {"suspend": False}}))
    done = wait_for("Succeeded", lambda: status(api, "pausing").get("phase") == "Succeeded" and status(api, "pausing"),
                    90, operator.logs)
    assert next(c for c in done["conditions"] if c["type"] == "Suspended")["reason"] == "JobResumed"
    assert len(api.pods("pausing")) == 2


def test_a_patch_the_crd_rules_refuse_is_a_422_with_the_rules_message(api):
    from kubernetes.client.exceptions import ApiException

    api.create_job("fixed", {"numNodes": 2, "epochs": 3, "model": "resnet10t", "data": {"synthetic": {}}})
    with pytest.raises(ApiException) as raised:
        api.custom.patch_namespaced_custom_object(GROUP, VERSION, "default", "petstrainingjobs", "fixed",
                                                  {"spec": {"processesPerNode": 4}})
    assert raised.value.status == 422
    body = json.loads(raised.value.body)
    assert body["reason"] == "Invalid" and body["details"]["causes"][0]["field"] == "spec.processesPerNode"
    assert "processesPerNode is immutable: delete and recreate the job to change it" in body["message"]
    assert api.job("fixed")["spec"]["processesPerNode"] == 1
