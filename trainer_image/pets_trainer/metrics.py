"""The metric lines the operator reads from pod 0's log: one JSON object per line, flushed at once.

Their format, and which lines a reader takes for events, is `pets_api.metric_lines` (stdlib
only, shipped in this image), the module the operator reads them with.
"""
from __future__ import annotations

import sys
from dataclasses import asdict, dataclass

from pets_api import metric_lines
from pets_api.metric_lines import parse_lines as parse_metric_lines  # noqa: F401 - the one reader


@dataclass(frozen=True)
class EpochResult:
    epoch: int
    accuracy: float
    train_loss: float
    seconds: float
    # Beyond the contract's fields: the two halves of `seconds`, for throughput figures.
    train_seconds: float = 0.0
    eval_seconds: float = 0.0

    def as_event(self, resumed: bool = False) -> dict:
        return metric_lines.epoch_event(**asdict(self), **({"resumed": True} if resumed else {}))


def emit(event: dict, stream=None) -> None:
    stream = stream or sys.stdout
    stream.write(metric_lines.format_line(event) + "\n")
    stream.flush()


def done_event(history: list[EpochResult]) -> dict:
    return metric_lines.done_event(
        epochs=len(history),
        accuracy=history[-1].accuracy if history else None,
        best_accuracy=max((result.accuracy for result in history), default=None),
    )
