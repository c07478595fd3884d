"""What may change on a created job, through the real `kubectl`: the API server refuses a change to
anything that shapes the group or its training (the CRD's transition rules) and the running job goes
on untouched; the mutable fields, labels and the operator's status writes still go through."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from pets_api import GROUP, VERSION

pytestmark = [pytest.mark.e2e, pytest.mark.both_servers]

JOB = "steady"


@pytest.fixture
def run_kubectl(kubectl, cluster):
    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([kubectl, "--kubeconfig", str(cluster.kubeconfig), *args],
                              capture_output=True, text=True, timeout=60)
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)} failed: {done.stderr}"
        return done
    return run


def manifest(path: Path, **spec) -> Path:
    body = {"numNodes": 2, "epochs": 400, "model": "resnet10t", "data": {"synthetic": {}},
            "env": [{"name": "STAND_IN_EPOCH_SECONDS", "value": "0.25"}], **spec}
    path.write_text(yaml.safe_dump({"apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob",
                                    "metadata": {"name": JOB}, "spec": body}))
    return path


def status(api) -> dict:
    return (api.job(JOB) or {}).get("status") or {}


def refused(field: str, stderr: str) -> bool:
    """The CRD rule's refusal. The emulator names the schema type as the invalid value, kube-apiserver
    the value itself (docs/real-cluster.md): both share the rest."""
    head = f'The PetsTrainingJob "{JOB}" is invalid: spec.{field}: Invalid value: '
    rule = f"{field} is immutable: delete and recreate the job to change it"
    return head in stderr and rule in stderr.split(head, 1)[1]


def test_kubectl_cannot_change_what_shapes_a_running_job_and_the_job_goes_on(
        api, operator_process, stand_in_env, run_kubectl, tmp_path, wait_for):
    operator = operator_process(stand_in_env)
    path = manifest(tmp_path / "job.yaml")
    assert f"petstrainingjob.training.pets.dev/{JOB} created" in run_kubectl("apply", "-f", str(path)).stdout
    wait_for("Running", lambda: status(api).get("phase") == "Running", 60, operator.logs)
    assert f"petstrainingjob.training.pets.dev/{JOB} unchanged" in run_kubectl("apply", "-f", str(path)).stdout
    created = api.job(JOB)

    for change, field in [({"numNodes": 3}, "numNodes"), ({"epochs": 9}, "epochs"), ({"model": "resnet18"}, "model"),
                          ({"data": {"synthetic": None, "hostPath": "/images"}}, "data")]:
        done = run_kubectl("patch", "ptj", JOB, "--type", "merge", "-p", json.dumps({"spec": change}), check=False)
        assert done.returncode != 0 and refused(field, done.stderr), done.stderr
    done = run_kubectl("apply", "-f", str(manifest(tmp_path / "more-nodes.yaml", numNodes=3)), check=False)
    assert done.returncode != 0 and refused("numNodes", done.stderr), done.stderr
    done = run_kubectl("patch", "ptj", JOB, "--type", "merge", "-p", '{"spec": {"checkpoint": {"hostPath": "/ckpt"}}}', check=False)
    assert done.returncode != 0 and "checkpoint is immutable: it cannot be added or removed" in done.stderr, done.stderr

    stored = api.job(JOB)
    assert stored["spec"] == created["spec"]
    assert stored["metadata"]["generation"] == created["metadata"]["generation"]

    # What may change: the mutable fields, metadata; the operator keeps writing status meanwhile.
    assert "patched" in run_kubectl("patch", "ptj", JOB, "--type", "merge", "-p",
                                    '{"spec": {"ttlSecondsAfterFinished": 600, "activeDeadlineSeconds": 3600}}').stdout
    assert "labeled" in run_kubectl("label", "ptj", JOB, "team=vision").stdout
    changed = api.job(JOB)
    assert changed["spec"] == {**created["spec"], "ttlSecondsAfterFinished": 600, "activeDeadlineSeconds": 3600}
    assert changed["metadata"]["generation"] == created["metadata"]["generation"] + 1
    epoch = int(changed["status"].get("currentEpoch", -1))
    wait_for("a later epoch", lambda: int(status(api).get("currentEpoch", -1)) > epoch + 1, 30, operator.logs)
    assert status(api)["phase"] == "Running" and status(api)["workers"]["total"] == 2
    assert sorted(p.metadata.name for p in api.pods(JOB)) == [f"{JOB}-0", f"{JOB}-1"]
    assert f"petstrainingjob.training.pets.dev/{JOB} unchanged" in run_kubectl("apply", "-f", str(path)).stdout


def test_an_accepted_change_is_observed_and_applied_by_the_operator(api, operator_process, stand_in_env, run_kubectl,
                                                                    tmp_path, wait_for):
    operator = operator_process(stand_in_env)
    run_kubectl("apply", "-f", str(manifest(tmp_path / "job.yaml", epochs=16)))
    wait_for("Running", lambda: status(api).get("phase") == "Running", 60, operator.logs)
    run_kubectl("patch", "ptj", JOB, "--type", "merge", "-p", '{"spec": {"ttlSecondsAfterFinished": 1}}')
    generation = api.job(JOB)["metadata"]["generation"]
    wait_for("observedGeneration", lambda: status(api).get("observedGeneration") == generation, 10, operator.logs)
    wait_for("the job deleted 1 s after it finished", lambda: api.job(JOB) is None, 30, operator.logs)


def test_a_ttl_set_after_the_job_finished_still_deletes_it(api, operator_process, stand_in_env, run_kubectl, tmp_path,
                                                          wait_for):
    operator = operator_process(stand_in_env)
    run_kubectl("apply", "-f", str(manifest(tmp_path / "job.yaml", epochs=2)))
    wait_for("Succeeded", lambda: status(api).get("phase") == "Succeeded", 60, operator.logs)
    wait_for("the pods to stay", lambda: len(api.pods(JOB)) == 2, 5, operator.logs)
    run_kubectl("patch", "ptj", JOB, "--type", "merge", "-p", '{"spec": {"ttlSecondsAfterFinished": 0}}')
    wait_for("the finished job deleted", lambda: api.job(JOB) is None, 20, operator.logs)


def test_a_deadline_set_on_a_running_job_stops_it(api, operator_process, stand_in_env, run_kubectl, tmp_path, wait_for):
    operator = operator_process(stand_in_env)
    run_kubectl("apply", "-f", str(manifest(tmp_path / "job.yaml")))
    wait_for("Running", lambda: status(api).get("phase") == "Running", 60, operator.logs)
    run_kubectl("patch", "ptj", JOB, "--type", "merge", "-p", '{"spec": {"activeDeadlineSeconds": 1}}')
    failed = wait_for("Failed", lambda: status(api).get("phase") == "Failed" and status(api), 20, operator.logs)
    assert next(c for c in failed["conditions"] if c["type"] == "Failed")["reason"] == "DeadlineExceeded"
    assert failed["observedGeneration"] == api.job(JOB)["metadata"]["generation"]
