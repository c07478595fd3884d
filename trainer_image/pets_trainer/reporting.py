"""`pets_trainer.report(...)`: one finished epoch's exact metrics from any shipped function.

    from pets_trainer import report

    def training_loop(...):
        ...
        report(epoch=epoch, accuracy=eval_metric, train_loss=loss, seconds=elapsed)

It prints the metric line the operator reads into `status.epochs` (the same line the built-in
recipe prints, `pets_api.metric_lines`), on the main process (global rank 0) only, so every
process may call it. Without it the operator still reads the tutorial's own
`epoch 0: 88.12` lines, to two decimals of a percent; `report` gives the exact figure and the
train loss. Outside a job it prints the same line, which does no harm.
"""
from __future__ import annotations

import math
import os
import sys
from typing import Any

from pets_api import metric_lines


def _is_main_process() -> bool:
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        return distributed.get_rank() == 0
    return os.environ.get("RANK", "0") == "0"


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)  # a 0-d tensor, a numpy scalar
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a number, got {type(value).__name__}") from None
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def report(epoch: int, accuracy: float, *, stream=None, **metrics: Any) -> bool:
    """Print one epoch's metric line on the main process; True where it was printed.

    `accuracy` is a fraction (0.8812, not 88.12). `train_loss` and `seconds` become the epoch's
    `trainLoss` and `seconds` in the job's status; other numbers travel on the line only.
    """
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"epoch must be an integer >= 0, got {epoch!r}")
    accuracy = _number("accuracy", accuracy)
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"accuracy must be a fraction between 0 and 1, got {accuracy} (a percentage?)")
    extra = {name: _number(name, value) for name, value in metrics.items()}
    if not _is_main_process():
        return False
    event = {metric_lines.EVENT: metric_lines.EPOCH, "epoch": epoch, "accuracy": accuracy, **extra}
    stream = stream or sys.stdout
    stream.write(metric_lines.format_line(event) + "\n")
    stream.flush()
    return True
