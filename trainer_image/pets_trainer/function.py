"""What `accelerate launch` runs in each process of a job with `spec.function`.

    python -m pets_trainer.function --payload /var/run/pets-function/function.pkl

The payload is the notebook's own function and arguments, serialized by
`pets_client.launcher.cluster_launcher` (`pets_api.function_payload`). Every process
calls `function(*args)`, as `accelerate.notebook_launcher` does on one machine; the rendezvous
(`accelerate launch` with the pod contract's environment) is the built-in recipe's.

- A payload made with another Python minor version or cloudpickle major version is refused
  before anything is unpickled: `error: IncompatibleFunction: ...`, exit status 2 (`pets-train`
  checks the same before it launches, so the pod stops before any training process starts).
- A function that raises prints its traceback, then one line `error: <Type>: <message>` (also the
  container's termination message, as `pets-train` writes its errors), and exits with status 1.
- On a node without a GPU, ACCELERATE_USE_CPU=true is set (unless the environment sets it) before the
  function runs, so its plain `Accelerator()` joins the job's processes into one CPU (gloo) group, as
  `Accelerator(cpu=True)` would (`pets_trainer.world`).
- If the function's Accelerate state sees another world than the job's (WORLD_SIZE, RANK from the
  launcher), the run stops as soon as it has one: `error: WorldMismatch: ...`, exit status 2.
- With spec.tracking, an `Accelerator()` the function makes without `log_with` logs to the job's
  trackers (`pets_trainer.tracking.install_job_defaults`).
- Afterwards the process group is destroyed (the tutorial's loop does not call
  `accelerator.end_training()`; a gloo process that exits with its group alive aborts).

This module imports torch only to ask whether there is an accelerator device.
"""
from __future__ import annotations

import argparse
import os
import pickle
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pets_api import function_payload

from .errors import ConfigError, TrainerError, record_for_torch_elastic, report_error, write_termination_message
from .world import (
    World,
    WorldMismatch,
    WorldWatch,
    device_accelerator_available,
    job_world,
    use_cpu_without_accelerator,
)


class IncompatibleFunction(TrainerError):
    """The payload was made with versions this image cannot load it with."""

    reason = function_payload.INCOMPATIBLE

    def __init__(self, problems: list[str]):
        super().__init__(f"{self.reason}: " + "; ".join(problems))


def read_payload(path: str | Path) -> tuple[dict[str, Any], bytes]:
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read the function payload {path}: {error.strerror or error}") from None
    try:
        return function_payload.unpack(data)
    except function_payload.PayloadError as error:
        raise ConfigError(f"{path}: {error}") from None


def check_compatible(header: dict[str, Any], here: dict[str, Any] | None = None) -> list[str]:
    """Raise IncompatibleFunction where the payload cannot load here; return the notes worth a warning."""
    problems, notes = function_payload.compatibility(header, here or function_payload.local_versions())
    if problems:
        raise IncompatibleFunction(problems)
    return notes


def describe(header: dict[str, Any]) -> str:
    return f"{header.get('function', 'the function')}({header.get('args', '?')} argument(s))"


def load_function(path: str | Path) -> tuple[Callable[..., Any], tuple, dict[str, Any]]:
    header, body = read_payload(path)
    check_compatible(header)
    try:
        import cloudpickle  # noqa: F401 - by-value functions are rebuilt by cloudpickle's helpers
        function, args = pickle.loads(body)
    except Exception as error:  # noqa: BLE001 - a module the image lacks, a class that changed, ...
        raise ConfigError(f"cannot load {describe(header)}: {type(error).__name__}: {one_line(error)}") from None
    return function, tuple(args), header


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or "(no message)"


def end_process_group() -> None:
    """Destroy the torch.distributed group if the function made one and left it open."""
    distributed = sys.modules.get("torch.distributed")
    try:
        if distributed is not None and distributed.is_available() and distributed.is_initialized():
            distributed.destroy_process_group()
    except Exception as error:  # noqa: BLE001 - exiting anyway; say why the exit may be unclean
        print(f"warning: could not destroy the process group: {one_line(error)}", file=sys.stderr, flush=True)


def stop_on_mismatch(error: WorldMismatch) -> None:
    """From the watching thread: the function is still running and cannot be unwound, so the process ends here."""
    sys.stdout.flush()
    report_error(error)
    os._exit(2)


def run(function: Callable[..., Any], args: tuple, world: World | None = None) -> int:
    """Call `function(*args)`; 0, or 1 with the traceback and one `error:` line when it raises, or 2 when
    Accelerate's world is not the job's (`world`): that is the cause even when the function then raised."""
    watch = WorldWatch(world, stop_on_mismatch).start() if world is not None else None
    raised = None
    try:
        function(*args)
    except Exception as error:  # noqa: BLE001 - the user's function: report it, as notebook_launcher would
        traceback.print_exc()
        record_for_torch_elastic(error)  # torch elastic's failure summary names it too
        raised = error
    finally:
        different = watch.finish() if watch is not None else None
        end_process_group()
    if different is not None:
        return report_error(different)
    if raised is not None:
        cause = f"{type(raised).__name__}: {one_line(raised)}"
        print(f"error: {cause}", file=sys.stderr, flush=True)
        write_termination_message(cause)  # the pod's terminated.message, and so the job's status.message
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pets_trainer.function", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--payload", required=True, help="the payload file (the job's ConfigMap, mounted)")
    args = parser.parse_args(argv)
    try:
        world = job_world(os.environ)
        use_cpu_without_accelerator(os.environ, device_accelerator_available)
        function, function_args, _ = load_function(args.payload)
    except TrainerError as error:
        return report_error(error)
    use_job_trackers()
    return run(function, function_args, world)


def use_job_trackers() -> None:
    """With spec.tracking, the function's `Accelerator()` logs to the job's trackers (`pets_trainer.tracking`)."""
    if os.environ.get("MLFLOW_TRACKING_URI") or os.environ.get("TENSORBOARD_LOG_DIR"):
        from .tracking import TrackingSettings, install_job_defaults  # imports accelerate: only for a job that tracks

        install_job_defaults(TrackingSettings.from_env(os.environ))


if __name__ == "__main__":
    sys.exit(main())
