"""Any step: safe to repeat, and it writes the operator's own status fields only."""
from datetime import timedelta

from .helpers import T0, pods, step


def test_reconcile_is_idempotent(spec):
    first = step(spec)
    again = step(spec, first.status)
    assert again.status == first.status and again.create_pods == [0, 1]
    running = step(spec, first.status, pods("Running", "Running"))
    assert step(spec, running.status, pods("Running", "Running"), now=T0 + timedelta(seconds=5)).status == running.status


def test_epoch_fields_are_not_touched(spec):
    status = {**step(spec).status, "epochs": [{"epoch": 0, "accuracy": 0.5}], "accuracy": 0.5}
    assert "epochs" not in step(spec, status, pods("Running", "Running")).status
