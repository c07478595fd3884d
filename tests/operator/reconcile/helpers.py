"""Steps of one job for the reconcile tests: pods in given phases, one step, a condition of a plan."""
from datetime import datetime, timezone

from pets_operator.reconcile import reconcile
from pets_operator.status import PodView

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def pods(*phases, attempt=0):
    return [PodView(f"pets-{i}", f"uid-{attempt}-{i}", i, attempt, phase, ready=phase == "Running",
                    exit_code=1 if phase == "Failed" else None) for i, phase in enumerate(phases)]


def step(spec, status=None, current=(), now=T0, problems=(), drained=True, **observed):
    """`observed`: reconcile's other inputs (create_failure, mount_failures, restart_backoff, ...)."""
    return reconcile("pets", spec, status, 1, current, now, list(problems), logs_drained=drained, **observed)


def condition(plan, type_):
    return next(c for c in plan.status["conditions"] if c["type"] == type_)
