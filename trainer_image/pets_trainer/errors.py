"""Errors a user can fix: reported as one `error: ...` line and exit status 2, never a traceback.

The same line, without `error: `, goes into the container's termination message file (the
TERMINATION_MESSAGE_PATH the operator sets, Kubernetes' /dev/termination-log), so the pod's
`terminated.message`, and with it the PetsTrainingJob's status.message, says why the run failed.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping

TERMINATION_MESSAGE_ENV = "TERMINATION_MESSAGE_PATH"  # the pod contract's name (pets_api.contract)
TERMINATION_MESSAGE_LIMIT = 4096  # bytes Kubernetes keeps of a termination message
TORCH_ELASTIC_ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"  # set by torchrun for each training process


class TrainerError(Exception):
    """Base class for problems with the configuration or the data, not bugs in the trainer."""


class ConfigError(TrainerError):
    """A flag or environment variable has a value the trainer cannot use."""


class DataError(TrainerError):
    """The images directory cannot be used for training."""


def write_termination_message(message: str, path: str | None = None,
                              environ: Mapping[str, str] = os.environ) -> bool:
    """Best effort: `message` into the termination message file (`path`, else TERMINATION_MESSAGE_PATH).

    Only into a file that exists: Kubernetes (and the local kubelet) creates it for the container;
    outside one nothing is written (no stray /dev/termination-log on a developer's machine).
    """
    target = path or environ.get(TERMINATION_MESSAGE_ENV, "")
    if not target or not os.path.isfile(target):
        return False
    data = message.strip().encode("utf-8")[:TERMINATION_MESSAGE_LIMIT].decode("utf-8", errors="ignore")
    try:
        with open(target, "w", encoding="utf-8") as stream:
            stream.write(data)
    except OSError:
        return False
    return True


def termination_message_written(path: str | None = None, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the termination message file already says something (a training process wrote its error)."""
    target = path or environ.get(TERMINATION_MESSAGE_ENV, "")
    try:
        with open(target, encoding="utf-8", errors="replace") as stream:
            return bool(stream.read(TERMINATION_MESSAGE_LIMIT).strip())
    except OSError:
        return False


def record_for_torch_elastic(error: BaseException, environ: Mapping[str, str] = os.environ) -> None:
    """In an `except` block of a process torchrun started: the exception into torch elastic's error file, so
    its failure summary (and pets-train's cause of a failed run) names the exception, not only an exit code."""
    if not environ.get(TORCH_ELASTIC_ERROR_FILE_ENV):
        return
    try:
        from torch.distributed.elastic.multiprocessing.errors import get_error_handler

        get_error_handler().record_exception(error)
    except Exception:  # noqa: BLE001 - best effort: the error line and the termination message are written anyway
        pass


def report_error(error: BaseException, path: str | None = None) -> int:
    """A user-fixable error: one `error: ...` line on stderr, the termination message; exit status 2."""
    print(f"error: {error}", file=sys.stderr, flush=True)
    write_termination_message(str(error), path)
    return 2
