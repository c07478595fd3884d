"""Experiment tracking through Accelerate's own trackers (MLflow, TensorBoard), configured from the job; never a reason to stop training.

Which trackers (`TrackingSettings.from_env`): MLflow when MLFLOW_TRACKING_URI is set (MLflow itself reads
it, MLFLOW_EXPERIMENT_NAME and the credentials MLFLOW_TRACKING_USERNAME/PASSWORD or TOKEN), TensorBoard
when a log directory is given (TENSORBOARD_LOG_DIR, `TrainConfig.tensorboard_dir`). The MLflow run is
named MLFLOW_RUN_NAME, else the job's name (JOB_NAME), and tagged with the job's name, namespace and uid,
so it can be found after the job is gone; the TensorBoard events go to `<log dir>/<run name>`.

Each is Accelerate's tracker class (`MLflowTracker`, `TensorBoardTracker`) inside a `GuardedTracker`,
handed to `Accelerator(log_with=...)`, so `accelerator.init_trackers`, `accelerator.log` and
`accelerator.end_training` reach it as usual, on the main process. The guard turns a tracker's failure
(a server that is down, a full disk) into one metric line, `tracking_degraded` with the cause (the
credentials blanked out), after which that tracker logs nothing more: the training goes on, and what was
logged before stays. A tracker that started prints a `tracking` line saying where it logs (the MLflow run
id and its URL, the TensorBoard directory); the operator puts it in `status.tracking`.

MLflow's HTTP client retries a failed request for minutes by default; here it gives up after a few
seconds (`MLFLOW_CLIENT_DEFAULTS`, set unless the environment has them: spec.env may), so a server that
goes away costs the training one short wait, not minutes.

A shipped function (`pets_trainer.function`) reaches the same trackers: `install_job_defaults` gives its
`Accelerator()` the job's trackers when it names none, and the job's TensorBoard directory as project_dir
when it asks for "tensorboard" (or "all") without one.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelerate.tracking import GeneralTracker, MLflowTracker, TensorBoardTracker
from accelerate.utils import LoggerType

from pets_api import contract, metric_lines

from .metrics import emit

MLFLOW, TENSORBOARD = "mlflow", "tensorboard"
DEFAULT_EXPERIMENT = contract.schema_default("tracking.mlflow.experimentName")
DEFAULT_RUN_NAME = "pets-train"  # pets-train run by hand, with no JOB_NAME
MODEL_ARTIFACT_PATH = "model"  # the exported model's files, under the run's artifacts
SECRET_ENVS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
MLFLOW_CLIENT_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}
JOB_TAGS = (("pets.job.name", "JOB_NAME"), ("pets.job.namespace", "JOB_NAMESPACE"), ("pets.job.uid", "JOB_UID"))
MAX_CAUSE = 500


@dataclass(frozen=True)
class TrackingSettings:
    mlflow_uri: str | None = None
    experiment: str = DEFAULT_EXPERIMENT
    run_name: str = DEFAULT_RUN_NAME
    tensorboard_dir: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()  # values never to print (the credentials)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> TrackingSettings:
        return cls(
            mlflow_uri=environ.get("MLFLOW_TRACKING_URI") or None,
            experiment=environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT,
            run_name=environ.get("MLFLOW_RUN_NAME") or environ.get("JOB_NAME") or DEFAULT_RUN_NAME,
            tensorboard_dir=environ.get("TENSORBOARD_LOG_DIR") or None,
            tags={tag: environ[name] for tag, name in JOB_TAGS if environ.get(name)},
            secrets=tuple(environ[name] for name in SECRET_ENVS if environ.get(name)),
        )

    def replace(self, **changes: Any) -> TrackingSettings:
        return dataclasses.replace(self, **changes)


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def without_userinfo(uri: str) -> str:
    """`https://user:pw@host/x` -> `https://host/x`: a URI as it may be shown."""
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#@]*@", r"\1", uri)


def run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str | None:
    """The run's page in the MLflow UI of an http(s) tracking server; None for a local store."""
    if not tracking_uri.startswith(("http://", "https://")):
        return None
    return f"{without_userinfo(tracking_uri).rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def config_params(config: Any) -> dict[str, Any]:
    """A dataclass configuration as tracker parameters: scalars and None as they are, anything else as JSON."""
    return {name: value if value is None or isinstance(value, (bool, int, float, str)) else json.dumps(value)
            for name, value in dataclasses.asdict(config).items()}


def _one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split()) or '(no message)'}"


def _is_main_process() -> bool:
    from accelerate.state import PartialState

    return PartialState().is_main_process


class GuardedTracker(GeneralTracker):
    """One of Accelerate's trackers whose failures never reach the training: the first is reported, then it is off."""

    requires_logging_directory = False
    main_process_only = False  # the tracker inside keeps its own main-process-only methods

    def __init__(self, inner: GeneralTracker, describe: Callable[[Any], dict[str, Any]],
                 secrets: Iterable[str] = (), report: Callable[[dict], None] = emit):
        """`describe(inner)`: where the started tracker logs (the `tracking` line's fields)."""
        self.inner = inner
        self.name = inner.name
        self.failure: str | None = None  # the cause, once it failed
        self._describe = describe
        self._secrets = tuple(secrets)
        self._report = report
        super().__init__()

    @property
    def tracker(self) -> Any:
        return self.inner.tracker

    def call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`method(*args, **kwargs)` unless the tracker failed before; a raise is reported and turns it off."""
        if self.failure is not None:
            return None
        try:
            return method(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - any tracker failure: the training goes on without it
            self.failure = redact(_one_line(error), self._secrets)[:MAX_CAUSE]
            self._report(metric_lines.tracking_degraded_event(self.name, self.failure))
            print(f"warning: {self.name} tracking is off for the rest of the run: {self.failure}",
                  file=sys.stderr, flush=True)
            return None

    def start(self) -> None:
        self.call(self.inner.start)
        if self.failure is None and _is_main_process():
            where = self.call(self._describe, self.inner)
            if where is not None:
                self._report(metric_lines.tracking_event(self.name, **where))

    def store_init_configuration(self, values: dict) -> None:
        self.call(self.inner.store_init_configuration, values)

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        self.call(self.inner.log, values, step=step, **kwargs)

    def finish(self) -> None:
        self.call(self.inner.finish)

    def __getattr__(self, name: str) -> Any:
        """The inner tracker's other methods (`log_artifact`, `log_images`, ...), guarded alike."""
        if name == "inner" or name.startswith("__"):
            raise AttributeError(name)
        attribute = getattr(self.inner, name)
        return functools.partial(self.call, attribute) if callable(attribute) else attribute


def _describe_mlflow(tracker: MLflowTracker) -> dict[str, Any]:
    import mlflow

    info = tracker.active_run.info
    uri = mlflow.get_tracking_uri()
    return {"run_id": info.run_id, "experiment_id": info.experiment_id, "run_name": info.run_name,
            "tracking_uri": without_userinfo(uri), "url": run_url(uri, info.experiment_id, info.run_id)}


def _describe_tensorboard(tracker: TensorBoardTracker) -> dict[str, Any]:
    return {"log_dir": tracker.logging_dir}


def job_trackers(settings: TrackingSettings) -> list[GuardedTracker]:
    """The job's trackers for `Accelerator(log_with=...)`; [] when it has none."""
    trackers = []
    if settings.mlflow_uri:
        for name, value in MLFLOW_CLIENT_DEFAULTS.items():
            os.environ.setdefault(name, value)
        mlflow = MLflowTracker(experiment_name=settings.experiment, run_name=settings.run_name,
                               tags=dict(settings.tags) or None)
        trackers.append(GuardedTracker(mlflow, _describe_mlflow, settings.secrets))
    if settings.tensorboard_dir:
        tensorboard = TensorBoardTracker(settings.run_name, settings.tensorboard_dir)
        trackers.append(GuardedTracker(tensorboard, _describe_tensorboard, settings.secrets))
    return trackers


# --- what the built-in recipe logs ------------------------------------------------------------------------

def start(accelerator: Any, settings: TrackingSettings, config: Any) -> None:
    """`accelerator.init_trackers` with the resolved configuration as the run's parameters."""
    if accelerator.log_with:
        accelerator.init_trackers(settings.run_name, config=config_params(config))


def step_logger(accelerator: Any, every: int, first_step: int,
                learning_rate: Callable[[], float]) -> Callable[[int, Any], None] | None:
    """For the training loop: `log(batch_index, loss)` logs the batch loss and the learning rate at every
    `every`-th global step (`first_step` + batch index + 1). None when nothing would be logged (no
    trackers, or not the main process), so the loop pays nothing."""
    if not accelerator.trackers or not accelerator.is_main_process:
        return None

    def log(index: int, loss: Any) -> None:
        step = first_step + index + 1
        if step % every == 0:
            accelerator.log({"train_loss": float(loss.item()), "learning_rate": float(learning_rate())}, step=step)

    return log


def log_epoch(accelerator: Any, result: Any, images_per_second: float, step: int) -> None:
    """One finished epoch (`metrics.EpochResult`): its eval accuracy, mean train loss, images/s and seconds."""
    if accelerator.trackers and accelerator.is_main_process:
        accelerator.log({"accuracy": result.accuracy, "epoch_train_loss": result.train_loss,
                         "images_per_second": images_per_second, "epoch_seconds": result.seconds,
                         "epoch": result.epoch}, step=step)


def _mlflow_trackers(accelerator: Any) -> list[GuardedTracker]:
    return [t for t in accelerator.trackers if isinstance(t, GuardedTracker) and t.name == MLFLOW]


def log_model(accelerator: Any, output_dir: str | Path, files: Iterable[str]) -> None:
    """The exported model's `files` in `output_dir` as artifacts of the MLflow run (under `model/`)."""
    if not accelerator.is_main_process:
        return
    paths = [Path(output_dir) / name for name in files]
    for tracker in _mlflow_trackers(accelerator):
        for path in paths:
            if path.is_file():  # a run that trained no epoch (all resumed) may have saved nothing here
                tracker.log_artifact(str(path), artifact_path=MODEL_ARTIFACT_PATH)


def _end_mlflow_run_failed() -> None:
    import mlflow

    mlflow.end_run(status="FAILED")


def end_failed(accelerator: Any) -> None:
    """After a failed run: the MLflow run ends FAILED (not left RUNNING), TensorBoard's files are closed."""
    if not accelerator.is_main_process:
        return
    for tracker in accelerator.trackers:
        if isinstance(tracker, GuardedTracker) and tracker.name == MLFLOW:
            tracker.call(_end_mlflow_run_failed)
        elif isinstance(tracker, GuardedTracker):
            tracker.finish()


# --- a shipped function's Accelerator ----------------------------------------------------------------------

def _asks_for_tensorboard(log_with: Any) -> bool:
    """Whether `log_with` names TensorBoard or all trackers (a name, or Accelerate's `LoggerType`)."""
    wanted = log_with if isinstance(log_with, (list, tuple)) else [log_with]
    return any(isinstance(item, (str, LoggerType)) and str(item).lower() in (TENSORBOARD, "all") for item in wanted)


def install_job_defaults(settings: TrackingSettings) -> bool:
    """Make `Accelerator(...)` in this process default to the job's trackers (a shipped function's: it was
    written for `notebook_launcher` and names none) and, when it asks for TensorBoard without a
    project_dir, to the job's TensorBoard directory. False (nothing changed) when the job tracks nothing."""
    if not settings.mlflow_uri and not settings.tensorboard_dir:
        return False
    from accelerate import Accelerator

    original = Accelerator.__init__
    if getattr(original, "pets_job_defaults", False):
        return True
    parameters = list(inspect.signature(original).parameters)[1:]  # without self

    def given(name: str, args: tuple, kwargs: dict) -> bool:
        return kwargs.get(name) is not None or (name in parameters and len(args) > parameters.index(name))

    @functools.wraps(original)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if not given("log_with", args, kwargs):
            kwargs["log_with"] = job_trackers(settings) or None
        elif settings.tensorboard_dir and _asks_for_tensorboard(kwargs.get("log_with")) \
                and not given("project_dir", args, kwargs) and not given("project_config", args, kwargs):
            kwargs["project_dir"] = settings.tensorboard_dir
        original(self, *args, **kwargs)

    __init__.pets_job_defaults = True  # type: ignore[attr-defined]
    Accelerator.__init__ = __init__
    return True
