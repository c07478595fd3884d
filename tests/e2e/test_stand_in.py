"""Operator behaviour through the local cluster with a cheap stand-in trainer command."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.e2e


def job_spec(**extra):
    return {"numNodes": 2, "epochs": 3, "model": "resnet10t", "data": {"synthetic": {}}, **extra}


def phase(api, name):
    return ((api.job(name) or {}).get("status") or {}).get("phase")


def test_stand_in_job_succeeds_with_live_epochs(api, operator_process, stand_in_env, wait_for):
    operator = operator_process(stand_in_env)
    api.create_job("quick", job_spec())
    status = wait_for("Succeeded", lambda: phase(api, "quick") == "Succeeded" and api.job("quick")["status"], 60,
                      operator.logs)
    assert [e["epoch"] for e in status["epochs"]] == [0, 1, 2]
    assert status["currentEpoch"] == 3 and status["bestAccuracy"] == status["accuracy"]
    assert status["workers"]["succeeded"] == 2 and status["restarts"] == 0
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {"Created": "True", "Running": "False", "Succeeded": "True"}
    pods = api.pods("quick")
    assert sorted(p.metadata.name for p in pods) == ["quick-0", "quick-1"]
    assert len(api.services("quick")) == 1


def test_worker_failure_past_backoff_fails_and_keeps_the_pods_for_their_logs(api, operator_process, stand_in_env,
                                                                             wait_for):
    operator = operator_process(stand_in_env)
    api.create_job("broken", job_spec(epochs=20, env=[{"name": "STAND_IN_FAIL_RANK", "value": "1"}]))
    wait_for("Failed", lambda: phase(api, "broken") == "Failed", 60, operator.logs)
    status = api.job("broken")["status"]
    assert "worker broken-1 failed (exit code 3" in status["message"]
    assert "backoffLimit (0) reached" in status["message"]
    wait_for("the workers ended", lambda: all(p.status.phase in ("Succeeded", "Failed") for p in api.pods("broken")), 30)
    assert sorted(p.metadata.name for p in api.pods("broken")) == ["broken-0", "broken-1"]
    assert "epoch 0 done" in api.core.read_namespaced_pod_log("broken-0", "default")
    epochs = api.job("broken")["status"].get("epochs") or []
    assert len(epochs) < 20  # the job's status ended with the job: pod 0's later epochs are not its news


def test_worker_failure_within_backoff_restarts_the_group(api, operator_process, stand_in_env, wait_for, tmp_path):
    operator = operator_process(stand_in_env)
    marker = tmp_path / "failed-once"
    api.create_job("flaky", job_spec(backoffLimit=1, env=[{"name": "STAND_IN_FAIL_RANK", "value": "1"},
                                                         {"name": "STAND_IN_FAIL_ONCE", "value": f"host:{marker}"}]))
    wait_for("Succeeded", lambda: phase(api, "flaky") == "Succeeded", 90, operator.logs)
    status = api.job("flaky")["status"]
    assert marker.exists() and status["restarts"] == 1
    assert [e["epoch"] for e in status["epochs"]] == [0, 1, 2]
    restarting = next(c for c in status["conditions"] if c["type"] == "Restarting")
    assert restarting["status"] == "False" and restarting["reason"] == "Completed"
    pods = api.pods("flaky")
    assert len(pods) == 2 and {p.metadata.labels["training.pets.dev/attempt"] for p in pods} == {"1"}


def test_invalid_spec_fails_with_a_clear_message_and_an_event(api, operator_process, stand_in_env, wait_for):
    operator = operator_process(stand_in_env)
    api.create_job("needs-weights", job_spec(pretrained=True, pretrainedWeights="weights/resnet10t.safetensors"))
    wait_for("Failed", lambda: phase(api, "needs-weights") == "Failed", 30, operator.logs)
    status = api.job("needs-weights")["status"]
    assert "pretrainedWeights 'weights/resnet10t.safetensors' must be an absolute path" in status["message"]
    assert api.pods("needs-weights") == []
    events = wait_for("the Warning event", lambda: [e for e in api.events("needs-weights") if e.reason == "InvalidSpec"], 15)
    assert events[0].type == "Warning"


def test_schema_rejects_what_it_can(api):
    from kubernetes.client.exceptions import ApiException
    with pytest.raises(ApiException) as raised:
        api.create_job("bad-nodes", job_spec(numNodes=0))
    assert raised.value.status == 422


def test_deletion_mid_run_leaves_nothing(api, operator_process, stand_in_env, wait_for):
    operator = operator_process(stand_in_env)
    api.create_job("doomed", job_spec(epochs=200, env=[{"name": "STAND_IN_EPOCH_SECONDS", "value": "0.5"}]))
    wait_for("Running", lambda: phase(api, "doomed") == "Running", 60, operator.logs)
    api.delete_job("doomed")
    wait_for("everything gone", lambda: api.job("doomed") is None and not api.pods("doomed")
             and not api.services("doomed"), 60, operator.logs)


def test_operator_restart_mid_run_neither_duplicates_nor_loses(api, operator_process, stand_in_env, wait_for):
    operator = operator_process(stand_in_env)
    api.create_job("steady", job_spec(epochs=8, env=[{"name": "STAND_IN_EPOCH_SECONDS", "value": "0.6"}]))
    wait_for("two epochs", lambda: len((api.job("steady").get("status") or {}).get("epochs") or []) >= 2, 60,
             operator.logs)
    uids = sorted(p.metadata.uid for p in api.pods("steady"))
    operator.kill()
    operator.start()
    wait_for("Succeeded", lambda: phase(api, "steady") == "Succeeded", 60, operator.logs)
    status = api.job("steady")["status"]
    assert [e["epoch"] for e in status["epochs"]] == list(range(8))
    assert sorted(p.metadata.uid for p in api.pods("steady")) == uids
    assert status["restarts"] == 0
    # The operators' logs: each epoch once, by the operator that recorded it (the second one, from its log
    # re-read, only those the status did not have yet), each line naming the job.
    records = [json.loads(line) for line in operator.logs().splitlines() if line.startswith("{")]
    logged = [int(r["message"].split()[1].rstrip(":")) for r in records if r["message"].startswith("epoch ")]
    assert len(logged) == len(set(logged)) and set(range(2, 8)) <= set(logged), logged
    assert all(r["object"]["name"] == "steady" for r in records if r["message"].startswith("epoch "))


def test_active_deadline_fails_the_job_and_stops_its_workers(api, operator_process, stand_in_env, wait_for):
    operator = operator_process(stand_in_env)
    api.create_job("slow", job_spec(epochs=200, activeDeadlineSeconds=3,
                                    env=[{"name": "STAND_IN_EPOCH_SECONDS", "value": "0.5"}]))
    wait_for("Failed", lambda: phase(api, "slow") == "Failed", 60, operator.logs)
    status = api.job("slow")["status"]
    assert "activeDeadlineSeconds (3s)" in status["message"]
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True" and failed["reason"] == "DeadlineExceeded"
    assert 0 < len(status.get("epochs") or []) < 200
    wait_for("workers stopped", lambda: not [p for p in api.pods("slow") if p.status.phase in ("Pending", "Running")],
             30, operator.logs)
    events = wait_for("the Warning event", lambda: [e for e in api.events("slow") if e.reason == "DeadlineExceeded"], 15)
    assert events[0].type == "Warning"


def test_ttl_after_finished_deletes_the_job_and_its_objects(api, operator_process, stand_in_env, wait_for):
    operator = operator_process(stand_in_env)
    api.create_job("short-lived", job_spec(epochs=2, ttlSecondsAfterFinished=2))
    wait_for("Succeeded", lambda: phase(api, "short-lived") == "Succeeded", 60, operator.logs)
    wait_for("the job and its objects deleted", lambda: api.job("short-lived") is None and not api.pods("short-lived")
             and not api.services("short-lived"), 30, operator.logs)
