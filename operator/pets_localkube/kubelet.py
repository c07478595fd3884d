"""The local kubelet: registers its Node and runs the pods bound to it, through a runtime.

It is an API client: it registers its Node and its Lease (and keeps both fresh, `heartbeat`; `node.py`),
watches pods with `spec.nodeName=<node>` (keeping the latest of each, `pod()`), hands each new
pod to a worker of its runtime (`runtimes/`), and finishes graceful deletions with
`gracePeriodSeconds=0`, then removes the pod's directory (and its logs, unless `keep_logs`). Its
containers are told where the API server is (`api_server`: the address the kubelet itself uses, when
it speaks https; `environment.api_server_env`). The
workers report the pods' status through `/status` and post their Events (Created, Started, Killing,
BackOff, Failed, FailedMount).

A runtime is picked from `RUNTIMES` by name: "process" (each container a local process under its
own shim, `runtimes/process.py`) or "docker" (`runtimes/docker.py`). A simulated pod
(`runtimes/simulated.py`) runs no process, whichever the runtime: its phases and log lines follow
the schedule it carries.
"""
from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from . import logs
from .client import ApiStatusError, Client
from .environment import PortMap
from .events import EventRecorder
from .node import KUBELET_VERSION, NodeAgent
from .runtimes import docker, simulated
from .runtimes.pod_addresses import PodAddresses
from .runtimes.process import SHIM_STOP_TIMEOUT, PodWorker
from .storage import TERMINAL_POD_PHASES

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Runtime:
    """How the kubelet runs a pod's containers, and what it sets up and removes for its node."""
    worker: type[PodWorker]
    node_up: Callable[[str], Awaitable[object]] | None = None
    node_down: Callable[[str], Awaitable[None]] | None = None


RUNTIMES = {
    "process": Runtime(PodWorker),
    "docker": Runtime(docker.DockerPodWorker, node_up=docker.ensure_network, node_down=docker.remove_node),
}


def api_server_address(base_url: str) -> tuple[str, int] | None:
    """(host, port) of an https API server, which containers are told to reach (the `kubernetes` Service's
    variables, `environment.api_server_env`); None for a plain-http one, which no in-cluster client speaks."""
    url = urlsplit(base_url)
    if url.scheme != "https" or not url.hostname:
        return None
    return url.hostname, url.port or 443


class Kubelet:
    def __init__(self, client: Client, node_name: str, workdir: Path, capacity: dict[str, str],
                 entrypoints: Mapping[str, Sequence[str]] | None = None, keep_logs: bool = False, simulate: bool = False,
                 runtime: str = "process", workload: simulated.Workload = simulated.PLAIN, kubelet_port: int = 0,
                 kubelet_version: str = KUBELET_VERSION, heartbeat: bool = False):
        """`entrypoints`: image repository -> the command of a container that sets none (none by default).
        `simulate`: every pod is a simulated one (`runtimes/simulated.py`); else only those that ask for it;
        `workload`: what simulated pods print. `runtime`: a name in `RUNTIMES`. `kubelet_port`: where the
        kubelet API (`kubelet_api.py`) listens, reported on the Node (0: none is served). `heartbeat`: renew
        the Node's Lease and Ready heartbeat while running, for a node lifecycle controller (Kubernetes'
        own; the emulated server has none, and a quiet store keeps its resourceVersion still)."""
        if runtime not in RUNTIMES:
            raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
        self.client = client
        self.simulate = simulate
        self.workload = workload
        self.runtime = RUNTIMES[runtime]
        self.node_name = node_name
        self.workdir = workdir
        self.log_root = workdir / "logs"
        self.capacity = capacity
        self.entrypoints = {image: list(command) for image, command in (entrypoints or {}).items()}
        self.api_server = api_server_address(client.base_url)
        self.keep_logs = keep_logs  # keep a deleted pod's log files (its directory goes either way)
        self.ports = PortMap()
        self.workers: dict[str, PodWorker] = {}
        self.simulated_addresses = PodAddresses()
        self.events = EventRecorder(client, "kubelet", node_name)
        self.node = NodeAgent(client, node_name, capacity, kubelet_port, kubelet_version)
        self.heartbeat = heartbeat
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}  # (namespace, name) -> the pod as last seen
        self.shutting_down = False

    async def register_node(self) -> None:
        await self.node.register()

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod of that name bound to this node, as its watch last saw it; None if none."""
        return self.pods.get((namespace, name))

    async def run(self) -> None:
        """Register the Node (unless done already), then run the pods bound to it (and keep the Node's
        heartbeat, with `heartbeat`), forever."""
        if self.node.node_uid is None:
            await self.register_node()
        if self.runtime.node_up is not None:
            await self.runtime.node_up(self.node_name)
        beating = asyncio.create_task(self.node.run()) if self.heartbeat else None
        try:
            await self._run_pods()
        finally:
            if beating is not None:
                beating.cancel()
                await asyncio.gather(beating, return_exceptions=True)

    async def _run_pods(self) -> None:
        async for event_type, pod in self.client.watch("/api/v1/pods", fieldSelector=f"spec.nodeName={self.node_name}"):
            meta = pod["metadata"]
            if event_type == "DELETED":
                self.pods.pop((meta["namespace"], meta["name"]), None)
            else:
                self.pods[(meta["namespace"], meta["name"])] = pod
            try:
                await self._handle(event_type, pod)
            except Exception:  # one broken pod must not stop the node
                logger.exception("kubelet: handling %s of pod %s", event_type, pod["metadata"].get("name"))

    async def _handle(self, event_type: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        worker = self.workers.get(uid)
        if event_type == "DELETED":  # gone from the API (force-deleted, or finished and deleted): end it here too
            if worker is None:
                self.remove_pod_files(pod)
            else:
                asyncio.create_task(self._end_deleted(worker, pod))
            return
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        # A node going down starts nothing: shutdown() stops only the workers it found, and a pod bound after
        # that (a ReplicaSet's replacement for a pod it stopped) would outlive the node's event loop.
        if worker is None and not deleting and not self.shutting_down and pod.get("status", {}).get("phase") not in TERMINAL_POD_PHASES:
            worker = self.workers[uid] = self._new_worker(pod)
            worker.task = asyncio.create_task(worker.run())
        elif deleting and worker is not None and not worker.stopping:
            asyncio.create_task(worker.stop(float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)))
        elif deleting and worker is None:
            await self._delete_now(pod)
        if worker is not None and (worker.task is None or worker.task.done()) and deleting:
            await self._delete_now(pod)

    def _new_worker(self, pod: dict[str, Any]) -> PodWorker:
        if self.simulate or simulated.requested(pod):
            worker = simulated.SimulatedPodWorker(self, pod, self.workload)
            worker.pod_ip = self.simulated_addresses.take(lambda: {w.pod_ip for w in self.workers.values()})
            return worker
        return self.runtime.worker(self, pod)

    async def _end_deleted(self, worker: PodWorker, pod: dict[str, Any]) -> None:
        await worker.stop(0)
        if worker.task is not None:
            await asyncio.wait([worker.task], timeout=SHIM_STOP_TIMEOUT + 5)
        if self.workers.get(worker.uid) is worker:
            del self.workers[worker.uid]
        self.remove_pod_files(pod)

    async def finish_deletion(self, worker: PodWorker) -> None:
        if not self.shutting_down:  # a node going down leaves its pods (and their files) as they are
            await self._delete_now(worker.pod)

    async def _delete_now(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            await self.client.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                                     {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}})
        except ApiStatusError as error:
            if error.code not in (404, 409):  # gone already, or another pod of that name (this one is gone)
                raise
        self.workers.pop(meta["uid"], None)
        self.remove_pod_files(pod)

    def remove_pod_files(self, pod: dict[str, Any]) -> None:
        """A deleted pod's directory (volumes, tmp) goes, and its logs unless `keep_logs`, as a kubelet
        removes a deleted pod's directories; only once none of its processes runs any more."""
        meta = pod["metadata"]
        worker = self.workers.get(meta["uid"])
        if worker is not None and worker.running_pids:
            return
        self.events.forget(meta["uid"])
        shutil.rmtree(self.workdir / "pods" / f"{meta['namespace']}_{meta['name']}_{meta['uid']}", ignore_errors=True)
        if not self.keep_logs:
            shutil.rmtree(logs.pod_log_dir(self.log_root, pod), ignore_errors=True)

    async def shutdown(self, grace: float = 2.0) -> None:
        """Stop every process this kubelet started (cluster shutdown); pods and their files stay."""
        self.shutting_down = True
        workers = list(self.workers.values())
        await asyncio.gather(*(w.stop(grace) for w in workers), return_exceptions=True)
        # Let each worker report its last status while the API client is still open.
        tasks = [w.task for w in workers if w.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=grace + 5)
        if self.runtime.node_down is not None:
            await self.runtime.node_down(self.node_name)
