"""The happy path through the real trainer: `pets-train` -> accelerate launch, 2 nodes, on the local cluster."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CLASSES = 3


def tiny_job(epochs: int) -> dict:
    return {"numNodes": 2, "epochs": epochs, "model": "resnet10t", "imageSize": 32, "batchSize": 8,
            "numWorkers": 0, "maxLearningRate": 0.03, "seed": 7,
            "data": {"synthetic": {"classes": CLASSES, "imagesPerClass": 16, "imageSize": 32}},
            "env": [{"name": "OMP_NUM_THREADS", "value": "1"}]}


def status_of(api, name):
    return (api.job(name) or {}).get("status") or {}


def test_two_node_training_reports_every_epoch_and_learns(api, operator_process, wait_for):
    operator = operator_process()
    api.create_job("pets", tiny_job(epochs=2))
    seen_running_epochs = []

    def finished():
        status = status_of(api, "pets")
        if status.get("phase") == "Running" and status.get("epochs"):
            seen_running_epochs.append(len(status["epochs"]))
        return status.get("phase") in ("Succeeded", "Failed") and status

    status = wait_for("the job to finish", finished, 600, operator.logs)
    assert status["phase"] == "Succeeded", status.get("message")
    assert [entry["epoch"] for entry in status["epochs"]] == [0, 1], status
    assert status["bestAccuracy"] > 1 / CLASSES, status["epochs"]
    assert status["accuracy"] == status["epochs"][-1]["accuracy"]
    assert seen_running_epochs, f"no epoch appeared in the status while the job was running: {status}"
    logs = api.core.read_namespaced_pod_log("pets-1", "default")
    assert "Traceback" not in logs, logs[-3000:]


def test_operator_restart_mid_training_keeps_pods_and_epochs(api, operator_process, wait_for):
    operator = operator_process()
    api.create_job("resumed", tiny_job(epochs=3))
    wait_for("the first epoch", lambda: status_of(api, "resumed").get("epochs"), 600, operator.logs)
    uids = sorted(p.metadata.uid for p in api.pods("resumed"))
    operator.kill()
    operator.start()
    status = wait_for("the job to finish",
                      lambda: status_of(api, "resumed").get("phase") in ("Succeeded", "Failed") and status_of(api, "resumed"),
                      600, operator.logs)
    assert status["phase"] == "Succeeded", status.get("message")
    assert [entry["epoch"] for entry in status["epochs"]] == [0, 1, 2]
    assert sorted(p.metadata.uid for p in api.pods("resumed")) == uids
    assert status["restarts"] == 0
