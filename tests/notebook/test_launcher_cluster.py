"""cluster_launcher against the local cluster and the real operator: a function that raises, a payload
from another Python, a function reporting exact metrics with pets_trainer.report; the client's
replace=True, delete(wait=True) and logs(follow=True) on the way."""
from __future__ import annotations

import io
import re

import pytest

from pets_api import function_payload
from pets_client.client import JobFailed, PetsClientError
from pets_client.launcher import cluster_launcher

pytestmark = [pytest.mark.e2e]

ONE_THREAD = {"OMP_NUM_THREADS": "1"}
EPOCHS = 3


def diverges(message):
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    accelerator.print("epoch 0: 50.00")
    raise ValueError(message)  # on every process, as a bug in the loop would


def reports(epochs):
    from accelerate import Accelerator

    from pets_trainer import report

    accelerator = Accelerator(cpu=True)
    for epoch in range(epochs):  # more epochs than the CRD's default spec.epochs: a function has no bound
        accelerator.print(f"epoch {epoch}: {10.0 * epoch:.2f}")
        report(epoch=epoch, accuracy=0.1 * epoch + 0.0123, train_loss=1.0 / (epoch + 1))


@pytest.mark.both_servers
def test_a_function_that_raises_fails_the_job_with_its_error(client):
    with pytest.raises(JobFailed) as failed:
        cluster_launcher(diverges, ("the loss diverged",), num_nodes=2, env=ONE_THREAD, client=client, timeout=300)
    error = failed.value
    assert error.message.endswith(": ValueError: the loss diverged; backoffLimit (0) reached"), error.job_status
    assert error.job_status["phase"] == "Failed"
    assert error.job_status["epochs"] == [{"epoch": 0, "accuracy": 0.5}], "the epoch printed before the raise"
    # The failed worker stays for its log (the operator stops the others): the traceback, then the error line.
    failed_pod = error.message.split("worker ", 1)[1].split(" ", 1)[0]
    log = client.pod_log(failed_pod)
    lines = log.splitlines()
    assert "error: ValueError: the loss diverged" in lines, log
    assert lines.index("error: ValueError: the loss diverged") > lines.index("Traceback (most recent call last):")


@pytest.mark.both_servers
def test_exact_metrics_replace_and_follow(client):
    job = cluster_launcher(reports, (6,), num_nodes=1, env=ONE_THREAD, client=client, wait=False)
    streamed = io.StringIO()
    job.logs(follow=True, file=streamed, timeout=120)  # returns when the container ends
    assert "epoch 5: 50.00" in streamed.getvalue()
    status = job.wait(timeout=120, display=False)
    assert status["phase"] == "Succeeded", status.get("message")
    assert [(e["epoch"], e["accuracy"], e["trainLoss"]) for e in status["epochs"]] == [
        (epoch, 0.1 * epoch + 0.0123, 1.0 / (epoch + 1)) for epoch in range(6)], status["epochs"]  # exact, not 2 decimals

    with pytest.raises(PetsClientError, match=r"already exists: submit\(\.\.\., replace=True\) deletes it") as taken:
        cluster_launcher(reports, (1,), client=client, wait=False)
    assert taken.value.status == 409
    old_uid = job.get()["metadata"]["uid"]
    again = cluster_launcher(reports, (1,), client=client, replace=True, timeout=120)
    assert again.get()["metadata"]["uid"] != old_uid
    assert [e["epoch"] for e in again.epochs()] == [0]

    again.delete(wait=True, timeout=60)
    assert client.core.list_namespaced_pod("default", label_selector="training.pets.dev/job-name=reports").items == []
    with pytest.raises(PetsClientError) as gone:
        client.read_config_map("reports-function")
    assert gone.value.status == 404


def test_a_payload_from_another_python_stops_the_pods_before_training(client, monkeypatch):
    real = function_payload.local_versions
    monkeypatch.setattr(function_payload, "local_versions", lambda: {**real(), "python": "3.99.1"})
    with pytest.raises(JobFailed) as failed:
        cluster_launcher(reports, (2,), num_nodes=2, env=ONE_THREAD, client=client, timeout=120,
                         name="elsewhere")
    assert "IncompatibleFunction: the function was serialized with Python 3.99.1" in failed.value.message
    assert f"this pod runs Python {real()['python']}" in failed.value.message
    assert not failed.value.job_status.get("epochs")
    # The failed pod is kept for its log; the operator removes the group's other pods.
    failed_index = int(re.search(r"worker elsewhere-(\d+) failed", failed.value.message).group(1))
    log = client.job("elsewhere").logs(failed_index)
    assert "accelerate" not in log.lower() and "error: IncompatibleFunction" in log
