"""The Node a kubelet keeps: its registration, its Ready heartbeat and its Lease in `kube-node-lease`.

As a kubelet does it, against the emulated API server and Kubernetes' own kube-apiserver alike:
- registration: create the Node (only labels a kubelet may set itself; NodeRestriction refuses
  others such as `node-role.kubernetes.io/*`), then its status: capacity and allocatable, the
  addresses (InternalIP 127.0.0.1, Hostname), `daemonEndpoints.kubeletEndpoint.Port` (where
  kube-apiserver reaches the kubelet API for logs), `nodeInfo` and the conditions (Ready=True, no
  memory, disk or PID pressure);
- the Lease `kube-node-lease/<node>` (holder the node, `leaseDurationSeconds` 40, owned by the
  Node), renewed every 10 s: the node lifecycle controller counts a node as alive while its lease
  is fresh, and never taints it `unreachable`;
- the Ready condition's `lastHeartbeatTime`, refreshed every `status_interval` (a kubelet reports
  an unchanged status every few minutes; the lease is the frequent heartbeat).

The bodies are pure functions (`node_object`, `node_status`, `lease_object`); `NodeAgent` sends them.
"""
from __future__ import annotations

import asyncio
import datetime
import logging
import platform
from collections.abc import Mapping
from typing import Any

import aiohttp

from .client import ApiStatusError, Client
from .environment import LOOPBACK
from .storage import now

logger = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
LEASE_RENEW_SECONDS = 10.0  # a quarter of the duration, as a kubelet renews
STATUS_REPORT_SECONDS = 60.0
KUBELET_VERSION = "v1.32.0-pets-local"
KUBELET_COMPONENT = "kubelet"


def micro_time(moment: datetime.datetime | None = None) -> str:
    """A `MicroTime` (Lease times): RFC 3339 with microseconds."""
    moment = moment or datetime.datetime.now(datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_labels(name: str) -> dict[str, str]:
    """The labels a kubelet sets on its own Node (all in NodeRestriction's allowed set)."""
    return {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}


def node_object(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": node_labels(name)}}


def node_conditions(heartbeat: str, ready_since: str) -> list[dict[str, str]]:
    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {"type": kind, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": heartbeat, "lastTransitionTime": ready_since}

    return [condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "local kubelet is posting ready status")]


def node_status(name: str, capacity: Mapping[str, str], heartbeat: str, ready_since: str, kubelet_port: int = 0,
                kubelet_version: str = KUBELET_VERSION) -> dict[str, Any]:
    """The Node's status as the kubelet reports it; `kubelet_port` 0: no kubelet API is served."""
    status: dict[str, Any] = {
        "capacity": dict(capacity), "allocatable": dict(capacity),
        "addresses": [{"type": "InternalIP", "address": LOOPBACK}, {"type": "Hostname", "address": name}],
        "conditions": node_conditions(heartbeat, ready_since),
        "nodeInfo": {"kubeletVersion": kubelet_version, "kubeProxyVersion": "", "operatingSystem": "linux",
                     "architecture": "amd64", "containerRuntimeVersion": "local://processes",
                     "osImage": platform.platform(), "kernelVersion": platform.release(),
                     "machineID": name, "systemUUID": name, "bootID": name},
    }
    if kubelet_port:
        status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": kubelet_port}}
    return status


def lease_object(name: str, node_uid: str | None, renew_time: str) -> dict[str, Any]:
    """The node's Lease, owned by its Node (it goes with it), as a kubelet creates it."""
    metadata: dict[str, Any] = {"name": name, "namespace": LEASE_NAMESPACE}
    if node_uid:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}]
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
            "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_SECONDS, "renewTime": renew_time}}


class NodeAgent:
    """Registers the Node, then keeps its Lease and Ready heartbeat fresh (`run`, forever)."""

    def __init__(self, client: Client, name: str, capacity: Mapping[str, str], kubelet_port: int = 0,
                 kubelet_version: str = KUBELET_VERSION, lease_renew_seconds: float = LEASE_RENEW_SECONDS,
                 status_report_seconds: float = STATUS_REPORT_SECONDS):
        self.client = client
        self.name = name
        self.capacity = dict(capacity)
        self.kubelet_port = kubelet_port
        self.kubelet_version = kubelet_version
        self.lease_renew_seconds = lease_renew_seconds
        self.status_report_seconds = status_report_seconds
        self.node_uid: str | None = None
        self.ready_since = now()

    @property
    def node_path(self) -> str:
        return f"/api/v1/nodes/{self.name}"

    @property
    def lease_path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{self.name}"

    async def register(self) -> None:
        try:
            node = await self.client.create("/api/v1/nodes", node_object(self.name))
        except ApiStatusError as error:
            if error.code != 409:
                raise
            node = await self.client.get(self.node_path)
        self.node_uid = node["metadata"]["uid"]
        await self.report_status()
        await self.renew_lease()

    async def report_status(self) -> None:
        await self.client.merge_patch(self.node_path + "/status", {"status": node_status(
            self.name, self.capacity, now(), self.ready_since, self.kubelet_port, self.kubelet_version)})

    async def renew_lease(self) -> None:
        stamp = micro_time()
        try:
            await self.client.merge_patch(self.lease_path, {"spec": {
                "holderIdentity": self.name, "leaseDurationSeconds": LEASE_DURATION_SECONDS, "renewTime": stamp}})
        except ApiStatusError as error:
            if error.code != 404:
                raise
            await self.client.create(f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases",
                                     lease_object(self.name, self.node_uid, stamp))

    async def run(self) -> None:
        """Renew the lease every `lease_renew_seconds` and report the status every `status_report_seconds`;
        a failed renewal is logged and retried at the next tick (the API server may be restarting)."""
        loop = asyncio.get_running_loop()
        next_status = loop.time() + self.status_report_seconds
        while True:
            await asyncio.sleep(self.lease_renew_seconds)
            try:
                await self.renew_lease()
                if loop.time() >= next_status:
                    await self.report_status()
                    next_status = loop.time() + self.status_report_seconds
            except (ApiStatusError, aiohttp.ClientError, OSError, asyncio.TimeoutError) as error:
                logger.warning("node %s: heartbeat failed: %r", self.name, error)
