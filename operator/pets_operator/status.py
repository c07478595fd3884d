"""Pod states folded into a PetsTrainingJob's status: workers, Kubernetes-style conditions (pure)."""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pets_api import names
from pets_api.phases import FAILED, FAILURE_REASONS, FINAL_PHASES, PENDING, PHASES, RUNNING, SUCCEEDED, SUSPENDED  # noqa: F401

# The PodScheduled=False reason of a pod that still has scheduling gates (the API server sets it).
SCHEDULING_GATED = "SchedulingGated"
# Pod conditions that say why a pod is being deleted: Kubernetes' DisruptionTarget (preemption,
# eviction, ...) and the one Kueue sets on the pods of a workload it stops.
DISRUPTION_CONDITIONS = ("DisruptionTarget", "TerminationTarget")
MAX_CAUSE_LENGTH = 400  # of a worker's failure cause in the job's message
# The trainer's one-line errors (`error: ...`), also behind Accelerate's `[rank0]:` prefix in a log tail.
_ERROR_LINE = re.compile(r"(?:^|\]:\s*)error:\s*(\S.*)$")
_RULE_LINE = re.compile(r"^\s*[=\-]+\s*$")  # a row of = or -, which frames a summary and says nothing


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
    message: str | None = None  # the container's termination message (its error, or its log's tail), or waiting message
    unschedulable: str | None = None  # the scheduler's reason while PodScheduled is False (not for a gated pod)
    gates: tuple[str, ...] = ()  # spec.schedulingGates: the pod is not scheduled while it has any
    finalizers: tuple[str, ...] = ()  # metadata.finalizers (e.g. Kueue's), which keep a deleted pod
    disruption: str | None = None  # why it is being deleted, when a DisruptionTarget-style condition says so
    kueue_group: str | None = None  # its Kueue pod group (so Workload) and LocalQueue, when it has a queue
    kueue_queue: str | None = None

    @property
    def cause(self) -> str | None:
        """Why the container ended: the one line of its termination message that says so."""
        return failure_cause(self.message)

    @property
    def failed(self) -> bool:
        return self.phase == FAILED

    @property
    def succeeded(self) -> bool:
        return self.phase == SUCCEEDED

    @property
    def finished(self) -> bool:
        return self.phase in FINAL_PHASES

    @property
    def failure_reason(self) -> str | None:
        """DataUnavailable, ModelUnavailable, IncompatibleFunction when the cause says so, else None."""
        cause = self.cause or ""
        return next((reason for reason in FAILURE_REASONS if cause.startswith(reason + ":")), None)

    def describe_failure(self) -> str:
        """`worker pets-1 failed (exit code 1; Error): unknown timm model 'resnet5'`: the cause when the pod gives one."""
        details = [f"exit code {self.exit_code}" if self.exit_code is not None else None, self.reason]
        text = f"worker {self.name} failed" + (f" ({'; '.join(str(d) for d in details if d)})" if any(details) else "")
        cause = self.cause
        return f"{text}: {cause}" if cause else text


def failure_cause(message: str | None) -> str | None:
    """The line of a termination message that says why: the last `error: ...` line (without the prefix),
    else the last line with words (a log tail's last word, e.g. a traceback's exception line; not the rows
    of `=` or `-` that frame torch elastic's failure summary)."""
    lines = [line.strip() for line in (message or "").splitlines() if line.strip() and not _RULE_LINE.match(line)]
    if not lines:
        return None
    errors = [match.group(1) for match in map(_ERROR_LINE.search, lines) if match]
    cause = (errors or lines)[-1]
    return cause if len(cause) <= MAX_CAUSE_LENGTH else cause[:MAX_CAUSE_LENGTH - 3] + "..."


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
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    unschedulable = next((c.get("message") or c.get("reason") or "Unschedulable" for c in conditions
                          if c.get("type") == "PodScheduled" and c.get("status") == "False"
                          and c.get("reason") != SCHEDULING_GATED), None)
    gates = tuple(gate.get("name", "") for gate in (pod.get("spec") or {}).get("schedulingGates") or [])
    disruption = next((": ".join(part for part in (c.get("reason"), c.get("message")) if part) or c["type"]
                       for c in conditions if c.get("type") in DISRUPTION_CONDITIONS and c.get("status") == "True"),
                      None)
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
        unschedulable=unschedulable if not meta.get("deletionTimestamp") else None,
        gates=gates, finalizers=tuple(meta.get("finalizers") or ()), disruption=disruption,
        kueue_group=labels.get(names.KUEUE_POD_GROUP_NAME_LABEL), kueue_queue=labels.get(names.KUEUE_QUEUE_NAME_LABEL),
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
