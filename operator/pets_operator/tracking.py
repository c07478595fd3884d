"""Pod 0's tracking lines -> `status.tracking` and the job's `TrackingDegraded` condition (pure).

With spec.tracking the trainer's main process says where each tracker logs once it has started
(`tracking` lines: the MLflow run id and URL, the TensorBoard directory) and when one fails
(`tracking_degraded`, with the cause), after which that tracker logs nothing more and the training
goes on (`metric_lines`, `pets_trainer.tracking`). The epoch book keeps what the current attempt's pod
0 said (`fold_tracking`); each runner step folds it into its plan (`fold_into`), next to what
`reconcile` decided:
- `status.tracking`, when it changed: `mlflow` {runId, experimentId, runName, trackingUri, url} and
  `tensorboard` {logDir (inside pod 0), and the volume it is on: persistentVolumeClaim or hostPath};
- `TrackingDegraded=True` (reason `TrackerFailed`, the cause in its message) and a Warning Event once
  per change; False (`TrackersLogging`) when a later attempt's trackers all started.
A status.tracking already written stays until a new attempt's trackers report (an operator restart
re-reads the log).
"""
from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pets_api.metric_lines import EVENT, TRACKING, TRACKING_DEGRADED

from .reconcile import Event, Plan
from .status import set_condition

TRACKING_DEGRADED_CONDITION = "TrackingDegraded"
TRACKER_FAILED = "TrackerFailed"
TRACKERS_LOGGING = "TrackersLogging"
MAX_CAUSE = 500
# The `tracking` line's fields -> status.tracking's, per tracker.
STATUS_FIELDS = {
    "mlflow": (("run_id", "runId"), ("experiment_id", "experimentId"), ("run_name", "runName"),
               ("tracking_uri", "trackingUri"), ("url", "url")),
    "tensorboard": (("log_dir", "logDir"),),
}


@dataclass(frozen=True)
class Tracking:
    """What pod 0 said of its trackers: tracker -> its `tracking` line's fields; tracker -> why it failed."""
    started: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def is_tracking_event(event: Mapping[str, Any] | None) -> bool:
    return event is not None and event.get(EVENT) in (TRACKING, TRACKING_DEGRADED)


def fold_tracking(state: Tracking, event: Mapping[str, Any]) -> Tracking:
    """`state` with one `tracking` / `tracking_degraded` event applied; other or malformed events change nothing."""
    tracker = event.get("tracker")
    if not isinstance(tracker, str) or not tracker:
        return state
    if event.get(EVENT) == TRACKING:
        where = {key: value for key, value in event.items() if key not in (EVENT, "tracker")}
        return dataclasses.replace(state, started={**state.started, tracker: where})
    if event.get(EVENT) == TRACKING_DEGRADED:
        cause = " ".join(str(event.get("cause") or "no cause given").split())[:MAX_CAUSE]
        return dataclasses.replace(state, failed={**state.failed, tracker: cause})
    return state


def _volume(spec: Mapping[str, Any]) -> dict[str, str]:
    """The volume pod 0's TensorBoard directory is on: tracking.tensorboard's own, else spec.output's."""
    tensorboard = (spec.get("tracking") or {}).get("tensorboard") or {}
    for source in (tensorboard, spec.get("output") or {}):
        if source.get("persistentVolumeClaim") is not None:
            return {"persistentVolumeClaim": str(source["persistentVolumeClaim"]["claimName"])}
        if source.get("hostPath") is not None:
            return {"hostPath": str(source["hostPath"])}
    return {}


def status_tracking(state: Tracking, spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """status.tracking for what the trackers reported; None before any started."""
    result: dict[str, Any] = {}
    for tracker, fields in STATUS_FIELDS.items():
        where = state.started.get(tracker)
        if where is None:
            continue
        entry = {target: str(where[source]) for source, target in fields if where.get(source) is not None}
        if tracker == "tensorboard" and entry.get("logDir"):
            entry["logDir"] = posixpath.normpath(entry["logDir"])
            entry.update(_volume(spec))
        result[tracker] = entry
    return result or None


def degraded_message(state: Tracking) -> str:
    causes = "; ".join(f"{tracker}: {cause}" for tracker, cause in sorted(state.failed.items()))
    return f"{causes}; the training goes on without it, and what it logged before stays"


def _has(conditions: list[Mapping[str, Any]], status: str, reason: str | None = None,
         message: str | None = None) -> bool:
    return any(c.get("type") == TRACKING_DEGRADED_CONDITION and c.get("status") == status
               and (reason is None or c.get("reason") == reason) and (message is None or c.get("message") == message)
               for c in conditions)


def fold_into(plan: Plan, state: Tracking, stored: Mapping[str, Any] | None, spec: Mapping[str, Any],
              now: datetime) -> Plan:
    """`plan` with status.tracking (when it changed from the `stored` status) and the TrackingDegraded
    condition (with a Warning Event when it turns True or its cause changes) as `state` says."""
    if spec.get("tracking") is None:
        return plan
    status = dict(plan.status)
    events = list(plan.events)
    tracking = status_tracking(state, spec)
    if tracking is not None and tracking != (stored or {}).get("tracking"):
        status["tracking"] = tracking
    conditions = list(status.get("conditions") or [])
    if state.failed:
        message = degraded_message(state)
        if not _has(conditions, "True", TRACKER_FAILED, message):
            events.append(Event("Warning", TRACKING_DEGRADED_CONDITION, message))
            status["conditions"] = set_condition(conditions, TRACKING_DEGRADED_CONDITION, True, TRACKER_FAILED,
                                                 message, now)
    elif state.started and _has(conditions, "True"):
        trackers = ", ".join(sorted(state.started))
        status["conditions"] = set_condition(conditions, TRACKING_DEGRADED_CONDITION, False, TRACKERS_LOGGING,
                                             f"{trackers} logging", now)
    if status == plan.status and events == plan.events:
        return plan
    return dataclasses.replace(plan, status=status, events=events)
