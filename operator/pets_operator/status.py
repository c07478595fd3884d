"""Pod states folded into a PetsTrainingJob's status: workers, Kubernetes-style conditions (pure)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from . import names

PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
FINAL_PHASES = (SUCCEEDED, FAILED)  # a job, and a pod, in one of these never changes phase again


def timestamp(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class PodView:
    """What the operator needs to know of one pod (kept in the kopf index)."""
    name: str
    uid: str
    index: int
    attempt: int
    phase: str  # the pod's status.phase (Pending when not yet reported)
    ready: bool = False
    deleting: bool = False
    exit_code: int | None = None
    reason: str | None = None  # container termination or waiting reason
    message: str | None = None

    @property
    def failed(self) -> bool:
        return self.phase == FAILED

    @property
    def succeeded(self) -> bool:
        return self.phase == SUCCEEDED

    @property
    def finished(self) -> bool:
        return self.phase in FINAL_PHASES

    def describe_failure(self) -> str:
        details = [f"exit code {self.exit_code}" if self.exit_code is not None else None, self.reason, self.message]
        return f"worker {self.name} failed" + (f" ({'; '.join(str(d) for d in details if d)})" if any(details) else "")


def _int_label(labels: Mapping[str, str], key: str) -> int | None:
    try:
        return int(labels.get(key, ""))
    except ValueError:
        return None


def pod_view(pod: Mapping[str, Any]) -> PodView | None:
    """None for a pod without the job's index/attempt labels (not one of ours)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    index = _int_label(labels, names.LABEL_REPLICA_INDEX)
    attempt = _int_label(labels, names.LABEL_ATTEMPT)
    if index is None or attempt is None:
        return None
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    exit_code = reason = message = None
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated:
            exit_code, reason, message = terminated.get("exitCode"), terminated.get("reason"), terminated.get("message")
        elif waiting:
            reason, message = waiting.get("reason"), waiting.get("message")
    return PodView(
        name=meta.get("name", ""), uid=meta.get("uid", ""), index=index, attempt=attempt,
        phase=status.get("phase") or PENDING, ready=ready, deleting=bool(meta.get("deletionTimestamp")),
        exit_code=exit_code, reason=reason, message=message or status.get("message"),
    )


def workers(pods: Iterable[PodView], total: int) -> dict[str, int]:
    pods = list(pods)
    return {
        "total": total,
        "ready": sum(1 for p in pods if p.ready and p.phase == RUNNING),
        "running": sum(1 for p in pods if p.phase == RUNNING),
        "succeeded": sum(1 for p in pods if p.succeeded),
        "failed": sum(1 for p in pods if p.failed),
    }


def set_condition(conditions: list[Mapping[str, Any]] | None, type_: str, status: bool, reason: str, message: str,
                  now: datetime) -> list[dict[str, Any]]:
    """A copy of `conditions` with `type_` set; lastTransitionTime moves only when the status flips."""
    wanted = "True" if status else "False"
    result: list[dict[str, Any]] = []
    found = False
    for condition in conditions or []:
        condition = dict(condition)
        if condition.get("type") == type_:
            found = True
            if condition.get("status") != wanted:
                condition["lastTransitionTime"] = timestamp(now)
            condition.update(status=wanted, reason=reason, message=message)
        result.append(condition)
    if not found:
        result.append({"type": type_, "status": wanted, "reason": reason, "message": message,
                       "lastTransitionTime": timestamp(now)})
    return result
