"""Experiment tracking in the trainer (`pets_trainer.tracking`): guarded trackers, the job's settings, a shipped
function's default trackers, and real runs read back with MLflow's client and TensorBoard's event reader."""
from __future__ import annotations

import json
import socket

import pytest
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import LoggerType

from pets_api.metric_lines import parse_lines
from pets_trainer import tracking
from pets_trainer.config import TrainConfig
from pets_trainer.function import use_job_trackers
from pets_trainer.tracking import GuardedTracker, TrackingSettings

TINY = dict(model="resnet10t", image_size=32, batch_size=8, num_workers=0, seed=7)
TRACKING_ENV = ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_NAME", "TENSORBOARD_LOG_DIR", "JOB_NAME",
                "JOB_NAMESPACE", "JOB_UID", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME",
                "MLFLOW_TRACKING_PASSWORD", "MLFLOW_RUN_ID")


@pytest.fixture(autouse=True)
def clean_state(monkeypatch):
    """No tracking variable of the test runner's own, a fresh Accelerate state, Accelerator.__init__ restored."""
    for name in TRACKING_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(Accelerator, "__init__", Accelerator.__init__)
    AcceleratorState._reset_state(True)
    yield
    AcceleratorState._reset_state(True)


class Flaky:
    """A stand-in for one of Accelerate's trackers: `log` fails from the `fail_from`-th call on."""
    name = "mlflow"

    def __init__(self, fail_from: int, error: Exception):
        self.fail_from, self.error = fail_from, error
        self.logged: list[dict] = []

    @property
    def tracker(self):
        return "run"

    def start(self):
        pass

    def log(self, values, step=None):
        if len(self.logged) + 1 >= self.fail_from:
            raise self.error
        self.logged.append(values)

    def log_artifact(self, path, artifact_path=None):
        raise OSError("disk full")


def test_a_failing_tracker_is_reported_once_then_off_and_the_secret_never_printed(capsys):
    reported = []
    inner = Flaky(2, ConnectionError("POST https://mlflow/api failed: token s3cr3t refused"))
    guarded = GuardedTracker(inner, lambda t: {"run_id": "r"}, secrets=("s3cr3t",), report=reported.append)
    guarded.start()
    guarded.log({"loss": 1.0}, step=1)
    guarded.log({"loss": 0.5}, step=2)  # fails: reported, the training goes on
    guarded.log({"loss": 0.2}, step=3)  # off: not called
    assert inner.logged == [{"loss": 1.0}]
    assert reported == [{"event": "tracking", "tracker": "mlflow", "run_id": "r"},
                        {"event": "tracking_degraded", "tracker": "mlflow",
                         "cause": "ConnectionError: POST https://mlflow/api failed: token *** refused"}]
    assert guarded.failure == reported[-1]["cause"]
    err = capsys.readouterr().err
    assert "mlflow tracking is off for the rest of the run" in err and "s3cr3t" not in err


def test_other_tracker_methods_are_guarded_alike():
    reported = []
    guarded = GuardedTracker(Flaky(99, RuntimeError()), lambda t: {}, report=reported.append)
    guarded.log_artifact("/output/model.safetensors", artifact_path="model")
    assert reported == [{"event": "tracking_degraded", "tracker": "mlflow", "cause": "OSError: disk full"}]
    assert guarded.tracker == "run"


def test_a_tracker_that_cannot_start_reports_why_and_logs_nothing():
    reported = []
    inner = Flaky(1, RuntimeError("never"))
    inner.start = lambda: (_ for _ in ()).throw(ConnectionRefusedError("[Errno 111] Connection refused"))
    guarded = GuardedTracker(inner, lambda t: {"run_id": "r"}, report=reported.append)
    guarded.start()
    guarded.log({"loss": 1.0}, step=1)
    assert reported == [{"event": "tracking_degraded", "tracker": "mlflow",
                         "cause": "ConnectionRefusedError: [Errno 111] Connection refused"}]


def test_settings_come_from_the_pod_s_environment():
    settings = TrackingSettings.from_env({
        "MLFLOW_TRACKING_URI": "http://mlflow:5000", "MLFLOW_EXPERIMENT_NAME": "exp", "JOB_NAME": "pets",
        "JOB_NAMESPACE": "ml", "JOB_UID": "u1", "TENSORBOARD_LOG_DIR": "/output/tensorboard",
        "MLFLOW_TRACKING_TOKEN": "tok"})
    assert settings == TrackingSettings(mlflow_uri="http://mlflow:5000", experiment="exp", run_name="pets",
                                        tensorboard_dir="/output/tensorboard", secrets=("tok",),
                                        tags={"pets.job.name": "pets", "pets.job.namespace": "ml", "pets.job.uid": "u1"})
    assert TrackingSettings.from_env({"MLFLOW_RUN_NAME": "r", "JOB_NAME": "pets"}).run_name == "r"
    by_hand = TrackingSettings.from_env({})
    assert (by_hand.mlflow_uri, by_hand.tensorboard_dir, by_hand.experiment, by_hand.run_name) == (
        None, None, "pets", "pets-train")  # the experiment: the CRD's default
    assert tracking.job_trackers(by_hand) == []


def test_run_urls_and_uris_as_they_may_be_shown():
    assert tracking.run_url("http://mlflow:5000/", "3", "abc") == "http://mlflow:5000/#/experiments/3/runs/abc"
    assert tracking.run_url("file:///output/mlruns", "3", "abc") is None
    assert tracking.without_userinfo("https://me:pw@mlflow.example/x") == "https://mlflow.example/x"


def test_the_configuration_becomes_scalar_parameters():
    params = tracking.config_params(TrainConfig(data_dir="/data", tensorboard_dir="/tb"))
    assert params["crop_scale"] == "[0.5, 1.0]" and params["data_dir"] == "/data" and params["checkpoint_dir"] is None
    assert params["log_every_steps"] == 10 and params["tensorboard_dir"] == "/tb"
    assert set(params) == set(json.loads(TrainConfig().to_json()))


def test_the_step_logger_logs_every_nth_global_step_on_the_main_process_only():
    class FakeAccelerator:
        trackers = ["t"]
        is_main_process = True

        def __init__(self):
            self.logged = []

        def log(self, values, step=None):
            self.logged.append((step, values))

    class Loss:
        def __init__(self, value):
            self.value = value

        def item(self):
            return self.value

    accelerator = FakeAccelerator()
    log = tracking.step_logger(accelerator, every=3, first_step=4, learning_rate=lambda: 0.01)
    for index in range(6):  # global steps 5..10
        log(index, Loss(index / 10))
    assert accelerator.logged == [(6, {"train_loss": 0.1, "learning_rate": 0.01}),
                                  (9, {"train_loss": 0.4, "learning_rate": 0.01})]
    accelerator.is_main_process = False
    assert tracking.step_logger(accelerator, 3, 0, lambda: 0.01) is None


def scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_a_shipped_function_s_accelerator_logs_to_the_job_s_trackers(tmp_path, monkeypatch, capsys):
    """What `pets_trainer.function` sets up before calling the function: `Accelerator()` without log_with gets
    the job's trackers; one asking for TensorBoard without a project_dir writes into the job's directory."""
    monkeypatch.setenv("TENSORBOARD_LOG_DIR", str(tmp_path / "tb"))
    monkeypatch.setenv("JOB_NAME", "fn-job")
    use_job_trackers()

    accelerator = Accelerator(cpu=True)
    accelerator.init_trackers("notebook-project", config={"lr": 0.1})
    accelerator.log({"accuracy": 0.5}, step=1)
    accelerator.end_training()
    assert scalars(tmp_path / "tb" / "fn-job")["accuracy"] == [(1, 0.5)]
    assert {"event": "tracking", "tracker": "tensorboard", "log_dir": str(tmp_path / "tb" / "fn-job")} in parse_lines(
        capsys.readouterr().out)

    AcceleratorState._reset_state(True)
    named = Accelerator(cpu=True, log_with="tensorboard")  # Accelerate's own tracker, into the job's directory
    named.init_trackers("notebook-project")
    named.log({"loss": 2.0}, step=3)
    named.end_training()
    assert scalars(tmp_path / "tb" / "notebook-project")["loss"] == [(3, 2.0)]

    AcceleratorState._reset_state(True)
    own = Accelerator(cpu=True, log_with="tensorboard", project_dir=str(tmp_path / "mine"))
    assert own.logging_dir == str(tmp_path / "mine")
    AcceleratorState._reset_state(True)
    assert Accelerator(cpu=True, log_with=[LoggerType.ALL]).logging_dir == str(tmp_path / "tb")


def test_without_tracking_a_shipped_function_s_accelerator_is_left_alone():
    before = Accelerator.__init__
    use_job_trackers()
    assert Accelerator.__init__ is before
    assert not tracking.install_job_defaults(TrackingSettings())


# --- real runs ------------------------------------------------------------------------------------------------

def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_a_run_logs_to_mlflow_and_tensorboard(pets_dir, tmp_path, monkeypatch, capsys):
    from mlflow.tracking import MlflowClient

    from pets_trainer.train import training_loop

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.chdir(tmp_path)  # a sqlite store keeps its artifacts in ./mlruns
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv("JOB_NAME", "local")
    config = TrainConfig(data_dir=str(pets_dir), epochs=2, tensorboard_dir=str(tmp_path / "tb"), log_every_steps=2,
                         output_dir=str(tmp_path / "out"), **TINY)
    result = training_loop(config)
    events = parse_lines(capsys.readouterr().out)
    started = {e["tracker"]: e for e in events if e["event"] == "tracking"}
    assert set(started) == {"mlflow", "tensorboard"} and not [e for e in events if e["event"] == "tracking_degraded"]

    client = MlflowClient(store)
    run = client.get_run(started["mlflow"]["run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == "local" and run.data.tags["pets.job.name"] == "local"
    accuracy = sorted(client.get_metric_history(run.info.run_id, "accuracy"), key=lambda m: m.step)
    assert [m.value for m in accuracy] == [entry.accuracy for entry in result.history]
    steps_per_epoch = accuracy[0].step
    assert [m.step for m in accuracy] == [steps_per_epoch, 2 * steps_per_epoch]
    losses = client.get_metric_history(run.info.run_id, "train_loss")
    assert sorted(m.step for m in losses) == list(range(2, 2 * steps_per_epoch + 1, 2))
    assert run.data.params == {name: str(value) for name, value in tracking.config_params(config).items()}
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id, "model")) == [
        "model/config.json", "model/labels.json", "model/model.safetensors"]

    series = scalars(tmp_path / "tb" / "local")
    assert [step for step, _ in series["train_loss"]] == [m.step for m in sorted(losses, key=lambda m: m.step)]
    assert [value for _, value in series["accuracy"]] == pytest.approx([e.accuracy for e in result.history])
    assert {"learning_rate", "images_per_second", "epoch_train_loss"} <= set(series)


@pytest.mark.slow
def test_an_unreachable_tracking_server_stops_nothing(pets_dir, tmp_path, monkeypatch, capsys):
    from pets_trainer.train import training_loop

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "s3cr3t")
    result = training_loop(data_dir=str(pets_dir), epochs=1, tensorboard_dir=str(tmp_path / "tb"), **TINY)
    captured = capsys.readouterr()
    events = parse_lines(captured.out)
    [degraded] = [e for e in events if e["event"] == "tracking_degraded"]
    assert degraded["tracker"] == "mlflow" and "Connection refused" in degraded["cause"]
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [0] and len(result.history) == 1
    assert "s3cr3t" not in captured.out + captured.err
    # TensorBoard, the other tracker, logged the whole run.
    assert [v for _, v in scalars(tmp_path / "tb" / "pets-train")["accuracy"]] == pytest.approx([result.history[0].accuracy])
