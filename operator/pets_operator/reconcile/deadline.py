"""spec.activeDeadlineSeconds: when the job's time runs out, and the job failing when it has (pure)."""
from __future__ import annotations

from datetime import datetime, timedelta

from ..status import FAILED, RUNNING, parse_timestamp
from .group import alive
from .plan import Event, Plan
from .step import Step


def due(step: Step) -> datetime | None:
    """startTime + activeDeadlineSeconds; the clock stands still while the job is suspended
    (status.suspendedSeconds: the time it was). None without a deadline."""
    deadline = step.spec.get("activeDeadlineSeconds")
    if deadline is None:
        return None
    running_for = int(deadline) + int(step.status.get("suspendedSeconds") or 0)
    return parse_timestamp(step.status["startTime"]) + timedelta(seconds=running_for)


def exceeded(step: Step) -> Plan:
    """The deadline has passed: the job fails and its workers are stopped."""
    message = f"the job ran longer than activeDeadlineSeconds ({step.spec['activeDeadlineSeconds']}s); workers stopped"
    step.finish(FAILED, message)
    step.condition(FAILED, True, "DeadlineExceeded", message)
    step.clear(RUNNING, "DeadlineExceeded", message)
    return Plan(step.status, delete_pods=alive(step.pods), events=[Event("Warning", "DeadlineExceeded", message)])
