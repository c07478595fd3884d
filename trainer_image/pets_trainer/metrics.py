"""The metric lines the operator reads from pod 0's log: one JSON object per line, flushed at once."""
from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass


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
        event = {"event": "epoch", **asdict(self)}
        if resumed:
            event["resumed"] = True
        return event


def emit(event: dict, stream=None) -> None:
    stream = stream or sys.stdout
    stream.write(json.dumps(event) + "\n")
    stream.flush()


def done_event(history: list[EpochResult]) -> dict:
    return {
        "event": "done",
        "epochs": len(history),
        "accuracy": history[-1].accuracy if history else None,
        "best_accuracy": max((result.accuracy for result in history), default=None),
    }


def parse_metric_lines(text: str) -> list[dict]:
    """The JSON event objects in `text`, skipping every other line (as the operator does)."""
    events = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and "event" in value:
            events.append(value)
    return events
