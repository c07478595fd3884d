"""The trainer writes its metric lines, and reads them back, with the operator's one definition."""
from __future__ import annotations

import io
import json
import subprocess
import sys

from pets_api import metric_lines
from pets_operator.epochs import epoch_entries
from pets_trainer.metrics import EpochResult, done_event, emit, parse_metric_lines


def test_the_trainer_reads_lines_as_the_operator_does():
    assert parse_metric_lines is metric_lines.parse_lines
    event = {"event": "epoch", "epoch": 1, "accuracy": 0.75}
    log = f"text\n[rank0]: {json.dumps(event)}\n{{not json\n{json.dumps({'event': 1})}\n"
    assert parse_metric_lines(log) == [event]
    assert epoch_entries(log.splitlines()) == [{"epoch": 1, "accuracy": 0.75}]


def test_what_the_trainer_prints_is_what_the_operator_takes():
    out = io.StringIO()
    history = [EpochResult(0, 0.5, 1.25, 3.0, 2.0, 1.0), EpochResult(1, 0.75, 0.5, 3.0, 2.0, 1.0)]
    emit(history[0].as_event(resumed=True), out)
    emit(history[1].as_event(), out)
    emit(done_event(history), out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and all(json.loads(line) for line in lines)
    events = parse_metric_lines(out.getvalue())
    assert events[0] == {"event": "epoch", "epoch": 0, "accuracy": 0.5, "train_loss": 1.25, "seconds": 3.0,
                         "train_seconds": 2.0, "eval_seconds": 1.0, "resumed": True}
    assert "resumed" not in events[1]
    assert events[2] == {"event": "done", "epochs": 2, "accuracy": 0.75, "best_accuracy": 0.75}
    assert epoch_entries(lines) == [{"epoch": 0, "accuracy": 0.5, "trainLoss": 1.25, "seconds": 3.0},
                                    {"epoch": 1, "accuracy": 0.75, "trainLoss": 0.5, "seconds": 3.0}]


def test_the_shared_module_needs_only_the_standard_library():
    # The trainer image has the pets_operator source but not the operator's dependencies.
    probe = ("import sys; before = set(sys.modules); import pets_api.metric_lines; "
             "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
             "print(sorted(new - set(sys.stdlib_module_names) - {'pets_api'}))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
