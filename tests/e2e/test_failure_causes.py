"""Why a job fails or waits is in the job: the trainer's error, the log's last word, the scheduler's reason,
and which group attempt the status talks about after a restart."""
from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.e2e


def stand_in_spec(**extra):
    return {"numNodes": 2, "epochs": 3, "model": "resnet10t", "data": {"synthetic": {}}, **extra}


def real_spec(**extra):
    """One node of the real trainer (pets-train -> accelerate launch -> worker), tiny settings."""
    return {"numNodes": 1, "epochs": 1, "model": "resnet10t", "imageSize": 32, "batchSize": 8, "numWorkers": 0,
            "data": {"synthetic": {"classes": 2, "imagesPerClass": 4, "imageSize": 32}},
            "env": [{"name": "OMP_NUM_THREADS", "value": "1"}], **extra}


def status_of(api, name):
    return (api.job(name) or {}).get("status") or {}


def conditions(status):
    return {c["type"]: c for c in status.get("conditions") or []}


def finished(api, name):
    status = status_of(api, name)
    return status.get("phase") in ("Succeeded", "Failed") and status


def test_a_crashed_worker_s_last_log_line_is_the_cause(api, operator_process, stand_in_env, wait_for):
    """The stand-in writes no termination message: FallbackToLogsOnError gives its log's tail."""
    operator = operator_process(stand_in_env)
    api.create_job("crashed", stand_in_spec(epochs=20, env=[{"name": "STAND_IN_FAIL_RANK", "value": "1"}]))
    status = wait_for("Failed", lambda: finished(api, "crashed"), 60, operator.logs)
    assert status["phase"] == "Failed"
    assert "worker crashed-1 failed (exit code 3; Error): stand-in: failing on purpose" in status["message"]
    assert "stand-in: failing on purpose" in conditions(status)["Failed"]["message"]
    pod = next(p for p in api.pods("crashed") if p.metadata.name == "crashed-1")
    assert pod.spec.containers[0].termination_message_policy == "FallbackToLogsOnError"


def test_an_unschedulable_job_says_why(api, operator_process, stand_in_env, wait_for):
    operator = operator_process(stand_in_env)
    api.create_job("too-big", stand_in_spec(resources={"requests": {"cpu": "64"}}))

    def unscheduled():
        status = status_of(api, "too-big")
        return conditions(status).get("Scheduled", {}).get("reason") == "Unschedulable" and status

    status = wait_for("Scheduled=False", unscheduled, 30, operator.logs)
    assert status["phase"] == "Pending"
    assert "cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu." in status["message"]
    scheduled = conditions(status)["Scheduled"]
    assert scheduled["status"] == "False" and "Insufficient cpu" in scheduled["message"]
    events = wait_for("the Unschedulable event", lambda: [e for e in api.events("too-big") if e.reason == "Unschedulable"],
                      15)
    assert events[0].type == "Warning" and "Insufficient cpu" in events[0].message
    assert conditions(status)["Created"]["status"] == "True"  # the pods exist; they only wait


def test_a_restart_without_checkpoint_shows_only_the_new_attempt(api, operator_process, stand_in_env, wait_for,
                                                                   tmp_path):
    operator = operator_process(stand_in_env)
    marker = tmp_path / "failed-once"
    api.create_job("again", stand_in_spec(epochs=4, backoffLimit=1, env=[
        {"name": "STAND_IN_FAIL_RANK", "value": "1"}, {"name": "STAND_IN_FAIL_ONCE", "value": f"host:{marker}"},
        {"name": "STAND_IN_EPOCH_SECONDS", "value": "0.4"}]))
    wait_for("an epoch of the first attempt", lambda: status_of(api, "again").get("epochs"), 60, operator.logs)
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = status_of(api, "again")
        if status.get("restarts") == 1:
            seen.append(status)
        if status.get("phase") in ("Succeeded", "Failed"):
            break
        time.sleep(0.05)
    assert seen and seen[-1]["phase"] == "Succeeded", seen[-1:] or operator.logs()[-3000:]
    # From the restart on, no epoch of the first attempt (train_loss < 100) is in the status.
    for status in seen:
        old = [e for e in status.get("epochs") or [] if e.get("trainLoss", 0) < 100]
        assert old == [], status
        if not status.get("epochs"):
            assert "currentEpoch" not in status and "accuracy" not in status, status
    # The status message moves on within a reconcile or two; the Restarting event keeps the decision.
    restarting = [e.message for e in api.events("again") if e.reason == "Restarting"]
    assert any("no checkpoint: training starts again from epoch 0" in m for m in restarting), restarting
    assert any("(attempt 1, restart 1 of 1)" in s.get("message", "") for s in seen), [s.get("message") for s in seen]
    assert [e["epoch"] for e in seen[-1]["epochs"]] == [0, 1, 2, 3]


@pytest.mark.slow
def test_a_bad_model_name_is_the_job_s_message(api, operator_process, wait_for):
    operator = operator_process()
    api.create_job("bad-model", real_spec(model="resnet5"))
    status = wait_for("Failed", lambda: finished(api, "bad-model"), 180, operator.logs)
    assert status["phase"] == "Failed"
    assert "worker bad-model-0 failed" in status["message"]
    assert "unknown timm model 'resnet5'" in status["message"], status["message"]
    assert "unknown timm model 'resnet5'" in conditions(status)["Failed"]["message"]
    assert status["message"].count("\n") == 0


@pytest.mark.slow
def test_a_missing_weights_file_is_the_job_s_message(api, operator_process, wait_for):
    operator = operator_process()
    api.create_job("no-weights", real_spec(pretrained=True, pretrainedWeights="/weights/missing.safetensors"))
    status = wait_for("Failed", lambda: finished(api, "no-weights"), 180, operator.logs)
    assert "pretrained weights file /weights/missing.safetensors does not exist" in status["message"], status["message"]


def test_unusable_data_is_the_job_s_message(api, operator_process, wait_for, tmp_path):
    """pets-train itself refuses (before accelerate launch) and writes the termination message."""
    empty = tmp_path / "no-images"
    empty.mkdir()
    operator = operator_process()
    spec = real_spec(data={"hostPath": str(empty)})
    api.create_job("no-data", spec)
    status = wait_for("Failed", lambda: finished(api, "no-data"), 60, operator.logs)
    assert "worker no-data-0 failed (exit code 2; Error): " in status["message"]
    assert "is empty" in status["message"], status["message"]
