"""`Table` responses (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`) as `kubectl get` asks for."""
from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from typing import Any

from .resources import ResourceType
from .store import Obj

_JSONPATH_PART = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]|\['([^']+)'\]")


def wants_table(accept: str) -> bool:
    first = accept.split(",")[0].replace(" ", "")
    return "as=Table" in first and "g=meta.k8s.io" in first


def human_age(timestamp: str | None) -> str:
    """`5s`, `3m`, `2h5m`, `4d` as kubectl prints durations."""
    if not timestamp:
        return "<unknown>"
    then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    seconds = max(0, int((datetime.datetime.now(datetime.timezone.utc) - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m" if minutes < 60 else f"{minutes // 60}h{minutes % 60}m" if minutes % 60 else f"{minutes // 60}h"
    hours = minutes // 60
    return f"{hours}h" if hours < 48 else f"{hours // 24}d"


def json_path(obj: Any, path: str) -> Any:
    """The simple JSONPath subset printer columns use: `.status.phase`, `.spec.items[0].name`."""
    node = obj
    for key, index, quoted in _JSONPATH_PART.findall(path.strip().strip("{}")):
        if index:
            if not isinstance(node, list) or int(index) >= len(node):
                return None
            node = node[int(index)]
        else:
            if not isinstance(node, dict):
                return None
            node = node.get(key or quoted)
        if node is None:
            return None
    return node


def _column(name: str, kind: str = "string", fmt: str = "", description: str = "", priority: int = 0) -> dict[str, Any]:
    return {"name": name, "type": kind, "format": fmt, "description": description, "priority": priority}


def _pod_status(pod: Obj) -> str:
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated"):
            terminated = state["terminated"]
            reason = terminated.get("reason") or f"ExitCode:{terminated.get('exitCode')}"
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False" and status.get("phase") == "Pending":
            reason = "Pending"
    return reason


def _readiness_gates(pod: Obj) -> str:
    """`ready/total` of spec.readinessGates, as kubectl prints them; <none> without gates."""
    gates = [g.get("conditionType") for g in (pod.get("spec") or {}).get("readinessGates") or []]
    if not gates:
        return "<none>"
    true = {c.get("type") for c in (pod.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}
    return f"{sum(1 for gate in gates if gate in true)}/{len(gates)}"


def _pod_columns() -> tuple[list[dict[str, Any]], Callable[[Obj], list[Any]]]:
    columns = [_column("Name", fmt="name"), _column("Ready"), _column("Status"), _column("Restarts", "string"),
               _column("Age"), _column("IP", priority=1), _column("Node", priority=1),
               _column("Nominated Node", priority=1), _column("Readiness Gates", priority=1)]

    def cells(pod: Obj) -> list[Any]:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        ready = sum(1 for c in statuses if c.get("ready"))
        total = len(pod.get("spec", {}).get("containers") or [])
        restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
        return [pod["metadata"]["name"], f"{ready}/{total}", _pod_status(pod), str(restarts),
                human_age(pod["metadata"].get("creationTimestamp")), (pod.get("status") or {}).get("podIP") or "<none>",
                pod.get("spec", {}).get("nodeName") or "<none>",
                (pod.get("status") or {}).get("nominatedNodeName") or "<none>", _readiness_gates(pod)]

    return columns, cells


def _custom_columns(resource: ResourceType, version: str) -> tuple[list[dict[str, Any]], Callable[[Obj], list[Any]]]:
    printer = resource.printer_columns.get(version) or []
    if not printer:
        printer = [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
    columns = [_column("Name", fmt="name", description="Name must be unique within a namespace.")]
    columns += [_column(c["name"], c.get("type", "string"), c.get("format", ""), c.get("description", ""), c.get("priority", 0)) for c in printer]

    def cells(obj: Obj) -> list[Any]:
        row: list[Any] = [obj["metadata"]["name"]]
        for column in printer:
            value = json_path(obj, column["jsonPath"])
            if column.get("type") == "date" and isinstance(value, str):
                value = human_age(value)
            row.append(value)
        return row

    return columns, cells


def _default_columns() -> tuple[list[dict[str, Any]], Callable[[Obj], list[Any]]]:
    columns = [_column("Name", fmt="name"), _column("Created At", "date")]
    return columns, lambda obj: [obj["metadata"]["name"], obj["metadata"].get("creationTimestamp")]


def _event_columns() -> tuple[list[dict[str, Any]], Callable[[Obj], list[Any]]]:
    columns = [_column("Last Seen"), _column("Type"), _column("Reason"), _column("Object"), _column("Message")]

    def cells(event: Obj) -> list[Any]:
        involved = event.get("involvedObject") or event.get("regarding") or {}
        seen = event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp")
        return [human_age(seen), event.get("type", ""), event.get("reason", ""),
                f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}", event.get("message") or event.get("note", "")]

    return columns, cells


def columns_for(resource: ResourceType, version: str):
    if resource.is_custom:
        return _custom_columns(resource, version)
    if resource.key == ("", "pods"):
        return _pod_columns()
    if resource.plural == "events":
        return _event_columns()
    return _default_columns()


def _row_object(obj: Obj, include_object: str | None) -> dict[str, Any] | None:
    """What a row carries per `includeObject`: `Metadata` (the default), `Object`, or `None`."""
    if include_object == "None":
        return None
    if include_object == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def to_table(resource: ResourceType, version: str, objects: list[Obj], list_meta: dict[str, Any] | None = None,
             include_object: str | None = None) -> dict[str, Any]:
    """A list, one object (`kubectl get KIND NAME`) or one watch event: the same columns for each."""
    columns, cells = columns_for(resource, version)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": cells(obj)}
        carried = _row_object(obj, include_object)
        if carried is not None:
            row["object"] = carried
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta or {},
            "columnDefinitions": columns, "rows": rows}
