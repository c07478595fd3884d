"""The scheduler of the one local node: binds a pod when its requests fit and its nodeSelector matches.

Pods that do not fit stay Pending with `PodScheduled=False`, reason `Unschedulable`, and are
retried whenever a pod changes (a finished pod frees its share). It posts the Events a scheduler
posts: `Scheduled` on a binding, `FailedScheduling` (Warning) with the reason a pod does not fit.

A pod with `spec.schedulingGates` is not considered until they are all removed: it stays Pending with
`PodScheduled=False`, reason `SchedulingGated` (the condition a real API server gives it). With a
gang scheduler name (`LocalCluster(gang_scheduler=...)`) it also places the pods that ask for that
scheduler as all-or-nothing groups (`gang.py`: Coscheduling's PodGroup and its minMember).
"""
from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

from pets_api.quantities import parse_quantity

from . import gang
from .client import ApiStatusError, Client
from .events import NORMAL, WARNING, EventRecorder
from .storage import TERMINAL_POD_PHASES, now

logger = logging.getLogger(__name__)
NOTHING = Decimal(0)
DEFAULT_SCHEDULER = "default-scheduler"
GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


def pod_requests(pod: dict[str, Any]) -> dict[str, Decimal]:
    """Summed container requests (limits stand in for missing requests, as in Kubernetes), exact."""
    total: dict[str, Decimal] = {}
    for container in pod.get("spec", {}).get("containers") or []:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, quantity in wanted.items():
            total[name] = total.get(name, NOTHING) + parse_quantity(quantity)
    return total


def unschedulable_reason(pod: dict[str, Any], node: dict[str, Any], free: dict[str, Decimal]) -> str | None:
    """None when the pod fits the node, else the scheduler's message."""
    labels = node["metadata"].get("labels") or {}
    selector = pod.get("spec", {}).get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
    short = sorted(name for name, amount in pod_requests(pod).items() if amount > free.get(name, NOTHING))
    if short:
        return "0/1 nodes are available: " + ", ".join(f"1 Insufficient {name}" for name in short) + "."
    return None


class Scheduler:
    def __init__(self, client: Client, node_name: str, gang_scheduler: str | None = None):
        """`gang_scheduler`: also serve pods of this schedulerName, their pod groups all or nothing."""
        self.client = client
        self.node_name = node_name
        self.gang_scheduler = gang_scheduler
        self.scheduler_names = {DEFAULT_SCHEDULER, *([gang_scheduler] if gang_scheduler else [])}
        self._pods: dict[str, dict[str, Any]] = {}
        self.events = EventRecorder(client, "default-scheduler")
        self._min_member: dict[tuple[str, str], int] = {}

    async def run(self) -> None:
        async for event_type, pod in self.client.watch("/api/v1/pods"):
            if event_type == "DELETED":
                self._pods.pop(pod["metadata"]["uid"], None)
                self.events.forget(pod["metadata"]["uid"])
            else:
                self._pods[pod["metadata"]["uid"]] = pod
            await self._schedule()

    def _free(self, node: dict[str, Any]) -> dict[str, Decimal]:
        allocatable = {k: parse_quantity(v) for k, v in (node.get("status", {}).get("allocatable") or {}).items()}
        for pod in self._pods.values():
            if pod["spec"].get("nodeName") == self.node_name and pod.get("status", {}).get("phase") not in TERMINAL_POD_PHASES:
                for name, amount in pod_requests(pod).items():
                    allocatable[name] = allocatable.get(name, NOTHING) - amount
        return allocatable

    async def _schedule(self) -> None:
        waiting = sorted((p for p in self._pods.values()
                          if not p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
                          and p["spec"].get("schedulerName", DEFAULT_SCHEDULER) in self.scheduler_names),
                         key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
        if not waiting:
            return
        try:
            node = await self.client.get(f"/api/v1/nodes/{self.node_name}")
        except ApiStatusError:
            return  # the kubelet has not registered the node yet
        free = self._free(node)
        groups: dict[tuple[str, str], list[dict[str, Any]] | None] = {}
        for pod in waiting:
            if pod["spec"].get("schedulingGates"):
                await self._gated(pod)
                continue
            group = gang.group_of(pod, self.gang_scheduler)
            if group is not None:
                if group not in groups:
                    groups[group] = await self._group_members(group, waiting)
                if groups[group] is not None:  # placed (or refused) as a whole, once per pass
                    await self._place_group(group, groups[group], node, free)
                    groups[group] = []
                    continue
            await self._place(pod, node, free)

    async def _gated(self, pod: dict[str, Any]) -> None:
        if any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated"
               for c in pod.get("status", {}).get("conditions") or []):
            return
        meta = pod["metadata"]
        try:
            await self.client.merge_patch(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status", {
                "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                                           "message": GATED_MESSAGE, "lastTransitionTime": now()}]}})
        except ApiStatusError as error:
            logger.debug("gating %s/%s: %s", meta["namespace"], meta["name"], error)

    async def _group_members(self, group: tuple[str, str], waiting: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """The group's pods waiting to be placed, or None when its PodGroup does not exist (placed one by one)."""
        try:
            pod_group = await self.client.get(gang.pod_group_path(*group))
        except ApiStatusError:
            return None
        self._min_member[group] = gang.min_member(pod_group)
        return [p for p in waiting if gang.group_of(p, self.gang_scheduler) == group and not p["spec"].get("schedulingGates")]

    async def _place_group(self, group: tuple[str, str], members: list[dict[str, Any]], node: dict[str, Any],
                           free: dict[str, Decimal]) -> None:
        if not members:
            return
        placed = sum(1 for p in self._pods.values() if gang.group_of(p, self.gang_scheduler) == group
                     and p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
                     and p.get("status", {}).get("phase") not in TERMINAL_POD_PHASES)
        reason = gang.too_few(members[0]["metadata"]["name"], placed + len(members), self._min_member[group])
        if reason is None:
            try:
                # Each pod's own fit but for resources (its nodeSelector), then the group's requests together.
                reasons = [unschedulable_reason(p, node, {}) for p in members]
                reason = next((r for r in reasons if r and "Insufficient" not in r), None) or \
                    gang.shortfall(gang.summed(pod_requests(p) for p in members), free, "/".join(group), len(members))
            except ValueError as error:
                reason = f"0/1 nodes are available: {error}."
        for pod in members:
            await self._place(pod, node, free, reason=reason)

    async def _place(self, pod: dict[str, Any], node: dict[str, Any], free: dict[str, Decimal],
                     reason: str | None = "") -> None:
        """Bind `pod` when it fits (`reason` "": check it here; None: it fits), else say why it does not."""
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        if reason == "":
            try:
                reason = unschedulable_reason(pod, node, free)
            except ValueError as error:
                reason = f"0/1 nodes are available: {error}."
        try:
            if reason is None:
                await self.client.create(path + "/binding", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"]},
                                                             "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name}})
                pod["spec"]["nodeName"] = self.node_name
                for name, amount in pod_requests(pod).items():
                    free[name] = free.get(name, NOTHING) - amount
                await self.events.record(pod, NORMAL, "Scheduled",
                                         f"Successfully assigned {meta['namespace']}/{meta['name']} to {self.node_name}")
            elif not any(c.get("type") == "PodScheduled" and c.get("message") == reason
                         for c in pod.get("status", {}).get("conditions") or []):
                await self.client.merge_patch(path + "/status", {"status": {"conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": reason,
                    "lastTransitionTime": now()}]}})
                await self.events.record(pod, WARNING, "FailedScheduling", reason)
        except ApiStatusError as error:
            logger.debug("scheduling %s/%s: %s", meta["namespace"], meta["name"], error)
