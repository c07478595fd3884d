"""Issue 27 end to end: a 2-node job of the real trainer on the local cluster logging to a real `mlflow server`
(SQLite backend, local artifact store, on 127.0.0.1) and to TensorBoard event files, read back with MLflow's
client and TensorBoard's own event reader; the server stopped mid-run; a missing credentials Secret."""
from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import kubernetes
import pytest

from pets_client.client import PetsTrainingJobClient
from pets_localkube.environment import PathMap
from pets_trainer.launch import LAUNCH_OPTIONS, TRAIN_OPTIONS, build_parser, make_train_config, resolve_options
from pets_trainer.synthetic import generate_synthetic_pets

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CLASSES = 3
SERVER_START_SECONDS = 300  # `mlflow server` imports a lot; on 2 busy cores that takes a while


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclasses.dataclass
class MlflowServer:
    uri: str  # the pods and the test talk to it
    store: str  # its SQLite backend store, readable without the server
    process: subprocess.Popen

    def stop(self) -> None:
        """Stop the server and its workers (its own process group, started for this test)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)


@pytest.fixture
def mlflow_server(tmp_path):
    port = free_port()
    root = tmp_path / "mlflow"
    root.mkdir()
    store = f"sqlite:///{root / 'mlflow.db'}"
    log = (root / "server.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store,
         "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"],
        cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = MlflowServer(f"http://127.0.0.1:{port}", store, process)
    deadline = time.monotonic() + SERVER_START_SECONDS
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{server.uri}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not come up:\n{(root / 'server.log').read_text()[-3000:]}")
            time.sleep(1)
        yield server
    finally:
        server.stop()
        log.close()


def pets_images(root: Path) -> Path:
    generate_synthetic_pets(root, classes=CLASSES, images_per_class=16, image_size=32, seed=7)
    return root


def tiny_job(epochs: int, data: Path, output: Path, tracking: dict) -> dict:
    return {"numNodes": 2, "epochs": epochs, "model": "resnet10t", "imageSize": 32, "batchSize": 8,
            "numWorkers": 0, "maxLearningRate": 0.03, "seed": 7, "data": {"hostPath": str(data)},
            "output": {"hostPath": str(output)}, "tracking": tracking,
            "env": [{"name": "OMP_NUM_THREADS", "value": "1"}]}


def status_of(api, name):
    return (api.job(name) or {}).get("status") or {}


def finished(api, name):
    status = status_of(api, name)
    return status.get("phase") in ("Succeeded", "Failed") and status


def condition(status, type_):
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)


def resolved_config(api, pod: str):
    """The training configuration pets-train resolves from the pod's environment, with its paths where the local
    kubelet puts them (the job's volumes here are hostPaths)."""
    body = api.core.read_namespaced_pod(pod, "default")
    paths = PathMap([(mount.mount_path, Path(volume.host_path.path))
                     for mount in body.spec.containers[0].volume_mounts for volume in body.spec.volumes
                     if volume.name == mount.name and volume.host_path is not None])
    environ = {item.name: paths.local(item.value) for item in body.spec.containers[0].env if item.value is not None}
    return make_train_config(resolve_options(TRAIN_OPTIONS + LAUNCH_OPTIONS, build_parser().parse_args([]), environ))


def scalars(log_dir: str) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(log_dir)
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_the_mlflow_run_and_the_tensorboard_files_hold_what_the_job_status_says(cluster, api, operator_process, wait_for,
                                                                                 mlflow_server, tmp_path):
    from mlflow.tracking import MlflowClient

    operator = operator_process()
    output = tmp_path / "output"
    tracking = {"logEverySteps": 1, "tensorboard": {},
                "mlflow": {"trackingUri": mlflow_server.uri, "experimentName": "pets-e2e", "runName": "pets-run"}}
    api.create_job("pets", tiny_job(2, pets_images(tmp_path / "pets"), output, tracking))
    status = wait_for("the job to finish", lambda: finished(api, "pets"), 900, operator.logs)
    assert status["phase"] == "Succeeded", status.get("message")
    assert condition(status, "TrackingDegraded") is None, status["conditions"]

    mlflow = status["tracking"]["mlflow"]
    assert mlflow["url"] == f"{mlflow_server.uri}/#/experiments/{mlflow['experimentId']}/runs/{mlflow['runId']}"
    client = MlflowClient(mlflow_server.uri)
    run = client.get_run(mlflow["runId"])
    assert (run.info.status, run.info.run_name, run.data.tags["pets.job.name"]) == ("FINISHED", "pets-run", "pets")
    assert client.get_experiment(run.info.experiment_id).name == "pets-e2e"
    accuracy = sorted(client.get_metric_history(run.info.run_id, "accuracy"), key=lambda metric: metric.step)
    assert [metric.value for metric in accuracy] == [entry["accuracy"] for entry in status["epochs"]]
    expected = {name: str(list(value) if isinstance(value, tuple) else value)
                for name, value in dataclasses.asdict(resolved_config(api, "pets-0")).items()}
    assert run.data.params == expected
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id, "model")) == [
        "model/config.json", "model/labels.json", "model/model.safetensors"]
    losses = client.get_metric_history(run.info.run_id, "train_loss")
    assert sorted(m.step for m in losses) == list(range(1, accuracy[-1].step + 1))  # logEverySteps: 1

    # The notebook client shows the same run.
    notebook = PetsTrainingJobClient(namespace="default",
                                     api_client=kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    assert notebook.job("pets").tracking == status["tracking"]
    assert [m["value"] for m in notebook.job("pets").tracking_metrics(["accuracy"])["accuracy"]] == [
        entry["accuracy"] for entry in status["epochs"]]

    tensorboard = status["tracking"]["tensorboard"]
    assert tensorboard["hostPath"] == str(output) and Path(tensorboard["logDir"]).is_relative_to(output)
    series = scalars(tensorboard["logDir"])
    assert [step for step, _ in series["train_loss"]] == sorted(m.step for m in losses)
    assert [value for _, value in series["accuracy"]] == pytest.approx([e["accuracy"] for e in status["epochs"]])


def test_a_tracking_server_that_goes_away_mid_run_degrades_tracking_not_the_job(api, operator_process, wait_for,
                                                                                 mlflow_server, tmp_path):
    from mlflow.tracking import MlflowClient

    operator = operator_process()
    tracking = {"logEverySteps": 1, "mlflow": {"trackingUri": mlflow_server.uri}}
    api.create_job("pets", tiny_job(5, pets_images(tmp_path / "pets"), tmp_path / "output", tracking))
    wait_for("the first epoch", lambda: status_of(api, "pets").get("epochs"), 900, operator.logs)
    mlflow_server.stop()
    status = wait_for("the job to finish", lambda: finished(api, "pets"), 900, operator.logs)
    assert status["phase"] == "Succeeded", status.get("message")
    assert [entry["epoch"] for entry in status["epochs"]] == [0, 1, 2, 3, 4]

    degraded = condition(status, "TrackingDegraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "TrackerFailed"), degraded
    assert degraded["message"].startswith("mlflow: ") and "the training goes on" in degraded["message"]
    assert f"127.0.0.1:{mlflow_server.uri.rsplit(':', 1)[1]}" in degraded["message"]
    warnings = [e for e in api.events("pets") if e.type == "Warning" and e.reason == "TrackingDegraded"]
    assert [e.message for e in warnings] == [degraded["message"]]

    # What was logged before the server went stays in its store: the run, its parameters, the steps before.
    store = MlflowClient(mlflow_server.store)
    run = store.get_run(status["tracking"]["mlflow"]["runId"])
    assert run.data.params["epochs"] == "5" and run.data.params["log_every_steps"] == "1"
    assert store.get_metric_history(run.info.run_id, "train_loss")
    logged = [m.value for m in sorted(store.get_metric_history(run.info.run_id, "accuracy"), key=lambda m: m.step)]
    assert logged == [entry["accuracy"] for entry in status["epochs"]][:len(logged)] and len(logged) < 5


def test_a_missing_credentials_secret_stops_the_job_before_training_and_names_it(api, operator_process, wait_for,
                                                                                   tmp_path):
    operator = operator_process()
    tracking = {"mlflow": {"trackingUri": "http://127.0.0.1:9", "tokenSecret": {"name": "mlflow-auth", "key": "token"}}}
    api.create_job("pets", tiny_job(1, pets_images(tmp_path / "pets"), tmp_path / "output", tracking))

    def reported():
        status = status_of(api, "pets")
        return "mlflow-auth" in (status.get("message") or "") and status

    status = wait_for("the job to name the missing Secret", reported, 300, operator.logs)
    # The local kubelet fails the container at its start (a real kubelet keeps it waiting with
    # CreateContainerConfigError, which the job's message shows the same way).
    assert 'secrets "mlflow-auth" not found' in status["message"], status["message"]
    assert not status.get("epochs")
    for pod in api.pods("pets"):
        assert "epoch" not in (api.core.read_namespaced_pod_log(pod.metadata.name, "default") or "")
