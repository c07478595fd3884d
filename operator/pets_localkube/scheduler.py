"""The scheduler of the one local node: binds a pod when its requests fit and its nodeSelector matches.

Pods that do not fit stay Pending with `PodScheduled=False`, reason `Unschedulable`, and are
retried whenever a pod changes (a finished pod frees its share).
"""
from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

from pets_operator.quantities import parse_quantity

from .client import ApiStatusError, Client
from .storage import TERMINAL_POD_PHASES, now

logger = logging.getLogger(__name__)
NOTHING = Decimal(0)


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
    def __init__(self, client: Client, node_name: str):
        self.client = client
        self.node_name = node_name
        self._pods: dict[str, dict[str, Any]] = {}

    async def run(self) -> None:
        async for event_type, pod in self.client.watch("/api/v1/pods"):
            if event_type == "DELETED":
                self._pods.pop(pod["metadata"]["uid"], None)
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
                          and p["spec"].get("schedulerName", "default-scheduler") == "default-scheduler"),
                         key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
        if not waiting:
            return
        try:
            node = await self.client.get(f"/api/v1/nodes/{self.node_name}")
        except ApiStatusError:
            return  # the kubelet has not registered the node yet
        free = self._free(node)
        for pod in waiting:
            meta = pod["metadata"]
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
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
                elif not any(c.get("type") == "PodScheduled" and c.get("message") == reason
                             for c in pod.get("status", {}).get("conditions") or []):
                    await self.client.merge_patch(path + "/status", {"status": {"conditions": [{
                        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": reason,
                        "lastTransitionTime": now()}]}})
            except ApiStatusError as error:
                logger.debug("scheduling %s/%s: %s", meta["namespace"], meta["name"], error)
