"""spec.activeDeadlineSeconds: the step wakes by then, and the job fails after it."""
from datetime import timedelta

from .helpers import T0, condition, pods, step


def test_active_deadline(spec):
    spec = {**spec, "activeDeadlineSeconds": 60}
    running = step(spec, step(spec).status, pods("Running", "Running"))
    assert running.wake_at == T0 + timedelta(seconds=60)
    late = step(spec, running.status, pods("Running", "Running"), now=T0 + timedelta(seconds=61))
    assert late.status["phase"] == "Failed" and sorted(late.delete_pods) == ["pets-0", "pets-1"]
    assert condition(late, "Failed")["reason"] == "DeadlineExceeded"
