"""The end of a job: success once every worker succeeded, where its model is, the TTL after it finished (pure)."""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from ..status import FAILED, RUNNING, SUCCEEDED, parse_timestamp
from .group import alive
from .plan import Event, Plan
from .step import STOPS_THE_GROUP, Step


def succeeded(step: Step) -> Plan:
    """Every worker succeeded: the job does, once the last metric lines of pod 0's log are read."""
    if not step.logs_drained:
        step.status["message"] = "all workers succeeded; reading the last metric lines"
        return Plan(step.status, wake_at=step.wake_at)
    message = f"all {step.num_nodes} worker(s) succeeded"
    if step.spec.get("output") is not None:
        step.status["output"] = output_status(step.spec["output"])
        message += f"; the model is in {_where(step.status['output'])}"
    step.finish(SUCCEEDED, message)
    step.condition(SUCCEEDED, True, "AllWorkersSucceeded", message)
    step.clear(RUNNING, "Completed", message)
    step.clear("Restarting", "Completed", message)
    due = ttl_due(step)
    return Plan(step.status, events=[Event("Normal", "Succeeded", message)], finished=due is None, wake_at=due)


def finished(step: Step) -> Plan:
    """A job that has finished: the leftover pods of a job the operator failed (deadline, refusal, name
    conflict) are stopped, a failed worker's group is kept for its logs; the job goes once its TTL passes."""
    stopped = step.status.get("phase") == FAILED and step.failed_reason() in STOPS_THE_GROUP
    leftovers = alive(step.pods) if stopped else []
    due = ttl_due(step)
    if due is not None and step.now >= due:
        return Plan(step.status, delete_job=True, finished=True)
    return Plan(step.status, delete_pods=leftovers, finished=due is None and not leftovers, wake_at=due)


def ttl_due(step: Step) -> datetime | None:
    """When spec.ttlSecondsAfterFinished deletes the finished job; None without a TTL."""
    ttl = step.spec.get("ttlSecondsAfterFinished")
    if ttl is None:
        return None
    completed = parse_timestamp(step.status.get("completionTime")) or step.now
    return completed + timedelta(seconds=int(ttl))


def output_status(output: Mapping[str, Any]) -> dict[str, str]:
    """status.output: where the trained model is (spec.output's volume and the path inside the pods)."""
    where = {"path": str(output["path"])}
    if output.get("persistentVolumeClaim") is not None:
        where["persistentVolumeClaim"] = str(output["persistentVolumeClaim"]["claimName"])
    elif output.get("hostPath") is not None:
        where["hostPath"] = str(output["hostPath"])
    return where


def _where(output: Mapping[str, str]) -> str:
    if "persistentVolumeClaim" in output:
        return f"PVC {output['persistentVolumeClaim']} ({output['path']} in the pods)"
    if "hostPath" in output:
        return f"{output['hostPath']} on the node of pod 0 ({output['path']} in the pods)"
    return f"{output['path']} of pod 0 (an emptyDir: set output.persistentVolumeClaim or hostPath to keep it)"
