"""Checkpoints belong to their job, and each job's pods are fenced by a NetworkPolicy: the real operator
and (for the checkpoints) the real trainer on the local cluster.

The local cluster stores NetworkPolicies but does not enforce them (all local pods share the host's
network), so what is tested is that the operator creates the right one, owned by the job; that its
selector matches the job's pods and no other's is a unit test (tests/operator/test_builders.py).
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e

FINAL = ("Succeeded", "Failed")


def tiny_job(checkpoint: dict, epochs: int = 2) -> dict:
    return {"numNodes": 1, "epochs": epochs, "model": "resnet10t", "imageSize": 32, "batchSize": 8,
            "numWorkers": 0, "seed": 7, "data": {"synthetic": {"classes": 3, "imagesPerClass": 12, "imageSize": 32}},
            "checkpoint": checkpoint, "env": [{"name": "OMP_NUM_THREADS", "value": "1"}]}


def finished(api, name):
    status = (api.job(name) or {}).get("status") or {}
    return status if status.get("phase") in FINAL else None


def policies(api):
    from kubernetes import client

    networking = client.NetworkingV1Api(api.core.api_client)
    return {p.metadata.name: p for p in networking.list_namespaced_network_policy("default").items}


@pytest.mark.slow
def test_a_second_job_refuses_the_first_job_s_checkpoint_unless_it_takes_it_over(api, operator_process, wait_for,
                                                                                tmp_path):
    operator = operator_process()
    checkpoint = {"hostPath": str(tmp_path / "shared-checkpoints")}
    first = api.create_job("first", tiny_job(checkpoint))
    status = wait_for("the first job", lambda: finished(api, "first"), 600, operator.logs)
    assert status["phase"] == "Succeeded", status.get("message")
    assert [e["epoch"] for e in status["epochs"]] == [0, 1]
    # The trainer ran with a read-only root (not enforced here: see operator/pets_localkube/README.md).
    (pod,) = api.pods("first")
    assert pod.spec.containers[0].security_context.read_only_root_filesystem is True

    # The reported bug: same settings, same checkpoint, another job -> it "resumed" epoch 1 and trained nothing.
    second = api.create_job("second", tiny_job(checkpoint))
    status = wait_for("the second job", lambda: finished(api, "second"), 300, operator.logs)
    log = api.core.read_namespaced_pod_log("second-0", "default")
    assert status["phase"] == "Failed", log[-3000:]
    first_uid, second_uid = first["metadata"]["uid"], second["metadata"]["uid"]
    line = next((x for x in log.splitlines() if x.startswith("error: CheckpointConflict: the checkpoint in ")), None)
    assert line is not None, log[-3000:]
    assert line.endswith(f"shared-checkpoints belongs to job default/first (uid {first_uid}), not to this job "
                         f"default/second (uid {second_uid}): set spec.checkpoint.resumeFrom: AnyJob (pets-train "
                         "--resume-from AnyJob) to take it over, or use an empty checkpoint directory"), line
    assert not status.get("epochs"), status
    assert "resumed from the checkpoint" not in log

    # Taken over on purpose: it resumes (nothing left to train: the first job finished all epochs).
    api.create_job("third", tiny_job({**checkpoint, "resumeFrom": "AnyJob"}))
    status = wait_for("the third job", lambda: finished(api, "third"), 300, operator.logs)
    log = api.core.read_namespaced_pod_log("third-0", "default")
    assert status["phase"] == "Succeeded", log[-3000:]
    assert f"taking over the checkpoint of job default/first (uid {first_uid})" in log
    assert "resumed from the checkpoint of epoch 1" in log
    assert [e["epoch"] for e in status["epochs"]] == [0, 1]


def test_each_job_gets_a_network_policy_that_goes_with_it(api, operator_process, stand_in_env, wait_for):
    operator = operator_process(stand_in_env)
    job = api.create_job("fenced", {"numNodes": 2, "epochs": 2, "data": {"synthetic": {}}})
    wait_for("Succeeded", lambda: (finished(api, "fenced") or {}).get("phase") == "Succeeded", 60, operator.logs)
    policy = policies(api)["fenced-workers"]
    assert [(o.kind, o.uid, o.controller) for o in policy.metadata.owner_references] == [
        ("PetsTrainingJob", job["metadata"]["uid"], True)]
    assert policy.spec.policy_types == ["Ingress"]
    assert policy.spec.pod_selector.match_labels == {"training.pets.dev/job-name": "fenced"}
    assert [peer.pod_selector.match_labels for peer in policy.spec.ingress[0]._from] == [
        {"training.pets.dev/job-name": "fenced"}]
    for pod in api.pods("fenced"):  # the policy covers every pod of the job
        assert pod.metadata.labels["training.pets.dev/job-name"] == "fenced"
    api.delete_job("fenced")
    wait_for("the policy to go with the job", lambda: "fenced-workers" not in policies(api), 30)


def test_network_policies_can_be_turned_off(api, operator_process, stand_in_env, wait_for):
    operator = operator_process({**stand_in_env, "PETS_OPERATOR_NETWORK_POLICY": "false"})
    api.create_job("open", {"numNodes": 1, "epochs": 1, "data": {"synthetic": {}}})
    wait_for("Succeeded", lambda: (finished(api, "open") or {}).get("phase") == "Succeeded", 60, operator.logs)
    assert "open-workers" not in policies(api)
    assert api.services("open")
