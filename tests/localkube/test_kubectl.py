"""The real `kubectl` against the local cluster: apply, get (Tables), -o yaml, logs, delete."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from .helpers import GROUP, PLURAL, VERSION, api_client, python_pod, wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_JOB = REPO_ROOT / "manifests" / "job.yaml"
JOB_LABEL = "training.pets.dev/job-name"


@pytest.fixture
def sample_job(tmp_path) -> tuple[Path, str]:
    """The project's sample job (or a small stand-in while manifests/job.yaml is missing)."""
    if SAMPLE_JOB.exists():
        return SAMPLE_JOB, yaml.safe_load(SAMPLE_JOB.read_text())["metadata"]["name"]
    stand_in = tmp_path / "job.yaml"
    stand_in.write_text(yaml.safe_dump({"apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob", "metadata": {"name": "pets-demo"},
                                        "spec": {"numNodes": 2, "data": {"synthetic": {"classes": 2}}}}))
    return stand_in, "pets-demo"


@pytest.fixture
def run_kubectl(kubectl, local_cluster):
    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([kubectl, "--kubeconfig", str(local_cluster.kubeconfig), *args],
                              capture_output=True, text=True, timeout=60)
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)} failed: {done.stderr}"
        return done
    return run


def test_apply_get_columns_yaml_and_delete_leaves_no_pods(run_kubectl, local_cluster, sample_job):
    path, name = sample_job
    assert f"petstrainingjob.training.pets.dev/{name} created" in run_kubectl("apply", "-f", str(path)).stdout
    assert f"petstrainingjob.training.pets.dev/{name} unchanged" in run_kubectl("apply", "-f", str(path)).stdout

    with api_client(local_cluster) as api:
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        job = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, name,
                                                     {"status": {"phase": "Running", "currentEpoch": 1, "accuracy": 0.75}})
        owner = {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": name, "uid": job["metadata"]["uid"], "controller": True}
        for index in range(2):
            pod = python_pod(f"{name}-{index}", "import time; print('working', flush=True); time.sleep(60)", labels={JOB_LABEL: name})
            pod["metadata"]["ownerReferences"] = [owner]
            core.create_namespaced_pod("default", pod)
        wait_for(lambda: all(core.read_namespaced_pod(f"{name}-{i}", "default").status.phase == "Running" for i in range(2)),
                 what="the job's pods to run")

    header, row = run_kubectl("get", "ptj").stdout.splitlines()
    assert header.split() == ["NAME", "PHASE", "NODES", "EPOCH", "ACCURACY", "AGE"]
    assert row.split()[:5] == [name, "Running", str(job["spec"]["numNodes"]), "1", "0.75"]

    as_yaml = yaml.safe_load(run_kubectl("get", "ptj", name, "-o", "yaml").stdout)
    assert as_yaml["spec"]["numNodes"] == job["spec"]["numNodes"] and as_yaml["status"]["accuracy"] == 0.75
    assert as_yaml["metadata"]["uid"] == job["metadata"]["uid"]

    pods = run_kubectl("get", "pods", "-l", f"{JOB_LABEL}={name}").stdout.splitlines()
    assert pods[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert sorted(line.split()[:3] for line in pods[1:]) == [[f"{name}-0", "1/1", "Running"], [f"{name}-1", "1/1", "Running"]]
    wait_for(lambda: run_kubectl("logs", f"{name}-0").stdout == "working\n", what="kubectl logs")

    assert f'petstrainingjob.training.pets.dev "{name}" deleted' in run_kubectl("delete", "ptj", name).stdout
    wait_for(lambda: "No resources found" in run_kubectl("get", "pods", "-l", f"{JOB_LABEL}={name}").stderr,
             timeout=30, what="the job's pods to be collected")
    assert "No resources found" in run_kubectl("get", "ptj").stderr


def test_apply_of_an_invalid_job_is_refused_with_the_crd_message(run_kubectl, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob", "metadata": {"name": "bad"},
                                   "spec": {"numNodes": 0, "data": {"synthetic": {}}}}))
    done = run_kubectl("apply", "-f", str(bad), check=False)
    assert done.returncode != 0
    # kubectl renders the Status causes itself, as it does for a real cluster's answer.
    assert ('The PetsTrainingJob "bad" is invalid: spec.numNodes: Invalid value: 0: '
            "spec.numNodes in body should be greater than or equal to 1") in done.stderr


def test_get_pods_and_nodes_and_api_resources(run_kubectl):
    nodes = run_kubectl("get", "nodes").stdout
    assert "local-node" in nodes
    resources = run_kubectl("api-resources").stdout
    assert any(line.split()[:2] == ["petstrainingjobs", "ptj"] for line in resources.splitlines())
    assert "No resources found in default namespace." in run_kubectl("get", "pods").stderr
