"""`LocalCluster`: the API server, scheduler and kubelet on one event loop in a background thread."""
from __future__ import annotations

import asyncio
import atexit
import socket
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from . import errors, gang
from .client import Client
from .kubelet import Kubelet
from .runtimes.simulated import PLAIN, Workload
from .scheduler import Scheduler
from .server import ApiServer

NODE_NAME = "local-node"
CONTEXT = "pets-local"


def kubeconfig_text(url: str, namespace: str = "default") -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": CONTEXT, "preferences": {},
        "clusters": [{"name": CONTEXT, "cluster": {"server": url}}],
        "users": [{"name": CONTEXT, "user": {}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace}}],
    }, sort_keys=False)


def load_manifests(source: Path | dict[str, Any]) -> list[dict[str, Any]]:
    """The objects of a manifest file, or an object given as it is."""
    if isinstance(source, dict):
        return [source]
    with Path(source).open(encoding="utf-8") as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc]


class LocalCluster:
    """A Kubernetes API server and a one-node kubelet on 127.0.0.1, with no Kubernetes.

        with LocalCluster(workdir=tmp, cpu=2, crds=[Path("manifests/crd.yaml")]) as cluster:
            subprocess.run(["kubectl", "--kubeconfig", cluster.kubeconfig, "get", "pods"])

    `crds` are manifest files or CRD objects, applied at start.
    A deleted pod's directory and logs are removed, as on a node; `keep_logs=True` keeps the logs
    (`<workdir>/logs/<namespace>_<pod>_<uid>/`). Stopping the cluster leaves every file in place.
    `gang_scheduler` (e.g. "scheduler-plugins-scheduler"): the scheduler also serves pods of that
    schedulerName, placing Coscheduling pod groups all or nothing, and the PodGroup kind is served (`gang.py`).
    `simulate=True`: every pod is simulated (no process; `runtimes/simulated.py`); else only pods that ask for it.
    `runtime="docker"`: containers run as docker containers from their images (`runtimes/docker.py`).

    The cluster knows no workload; what it needs of one is handed in: `entrypoints` (image repository ->
    the command of a container that sets none; none by default) and `workload` (what simulated pods
    print; by default plain lines). `product.py` holds the pets trainer's.
    """

    def __init__(self, workdir: Path, cpu: float = 2, memory: str = "8Gi", gpus: int = 0,
                 crds: Iterable[Path | dict[str, Any]] = (), host: str = "127.0.0.1", port: int = 0,
                 entrypoints: Mapping[str, Sequence[str]] | None = None, node_name: str = NODE_NAME, keep_logs: bool = False,
                 gang_scheduler: str | None = None, simulate: bool = False, runtime: str = "process",
                 workload: Workload = PLAIN, pods: int = 110):
        self.workdir = Path(workdir).resolve()
        self.simulate = simulate
        self.runtime = runtime
        self.crds = [crd if isinstance(crd, dict) else Path(crd) for crd in crds]
        self.gang_scheduler = gang_scheduler
        if gang_scheduler:
            self.crds.append(gang.POD_GROUP_CRD)
        self.host, self.port = host, port
        self.capacity = {"cpu": f"{cpu:g}", "memory": memory, "pods": str(pods)}
        if gpus:
            self.capacity["nvidia.com/gpu"] = str(gpus)
        self.entrypoints = entrypoints
        self.workload = workload
        self.keep_logs = keep_logs
        self.node_name = node_name
        self.url = ""
        self.kubeconfig = self.workdir / "kubeconfig"
        self.server: ApiServer | None = None
        self.kubelet: Kubelet | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._thread_main, name="pets-local-cluster", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error:
            self._thread.join()
            raise self._error
        atexit.register(self.stop)
        return self

    def stop(self) -> None:
        if self._loop and self._stop and self._thread and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=60)
        atexit.unregister(self.stop)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> LocalCluster:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    def _thread_main(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as error:  # reported to start() when it happens during startup
            self._error = error
        finally:
            self._ready.set()
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        self.server = ApiServer(log_root=self.workdir / "logs")
        runner = web.AppRunner(self.server.app(), handler_cancellation=True, shutdown_timeout=2)
        await runner.setup()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        site = web.SockSite(runner, listener)
        await site.start()
        self.port = listener.getsockname()[1]
        self.url = f"http://{self.host}:{self.port}"
        self.kubeconfig.write_text(kubeconfig_text(self.url), encoding="utf-8")
        for crd in self.crds:
            for manifest in load_manifests(crd):
                self._create_now(manifest)
        async with Client(self.url) as scheduler_client, Client(self.url) as kubelet_client:
            self.kubelet = Kubelet(kubelet_client, self.node_name, self.workdir, self.capacity, self.entrypoints,
                                   keep_logs=self.keep_logs, simulate=self.simulate, runtime=self.runtime,
                                   workload=self.workload)
            await self.kubelet.register_node()
            tasks = [asyncio.create_task(Scheduler(scheduler_client, self.node_name, self.gang_scheduler).run()),
                     asyncio.create_task(self.kubelet.run())]
            self._ready.set()
            await self._stop.wait()
            await self.kubelet.shutdown()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await runner.cleanup()

    # --- objects applied at start, process inspection ------------------------------------------

    def _create_now(self, manifest: dict[str, Any]) -> dict[str, Any]:
        assert self.server is not None
        api_version = manifest.get("apiVersion", "")
        group, _, version = api_version.rpartition("/")
        kind = manifest.get("kind")
        for resource in self.server.registry:
            if resource.group == group and version in resource.versions and resource.kind == kind:
                namespace = (manifest.get("metadata") or {}).get("namespace") if resource.namespaced else None
                return self.server.storage.create(resource, namespace, manifest, version)[0]
        raise errors.bad_request(f"no resource of kind {kind} in {api_version} is served")

    def process_ids(self) -> list[int]:
        """Pids of the containers' main processes now running (for tests of process hygiene)."""
        if self.kubelet is None or self._loop is None:
            return []
        kubelet = self.kubelet

        async def running() -> list[int]:  # read on the cluster's loop, where the kubelet mutates it
            return [pid for worker in kubelet.workers.values() for pid in worker.running_pids]

        return asyncio.run_coroutine_threadsafe(running(), self._loop).result(timeout=10)

