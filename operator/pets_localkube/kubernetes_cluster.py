"""`KubernetesCluster`: Kubernetes' own control plane (`control_plane.py`) with the local kubelet as its Node.

Where `LocalCluster` runs the emulated API server, this runs the real one (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, built by `hack/control_plane.sh`) and joins the local
kubelet to it as a real Node, on the same runtimes:

    with KubernetesCluster(workdir=Path("/tmp/k"), cpu=2, crds=[Path("manifests/crd.yaml")]) as cluster:
        cluster.kubeconfig   # <workdir>/kubeconfig, the admin's (system:masters), certificates embedded
        cluster.url          # https://127.0.0.1:<port>

The kubelet is `system:node:<node>` in `system:nodes`, with a client certificate the cluster CA
signs, so the Node authorizer and NodeRestriction admission judge its requests as a kubelet's: its
own Node and Lease, the pods bound to it and their status, their Events, their secrets, configmaps
and tokens. kube-scheduler binds the pods; the kubelet runs them and reports their status; the
garbage collector, the namespace and job controllers are Kubernetes' own.

Logs go through kube-apiserver as on any cluster: it asks the Node's InternalIP (127.0.0.1; hence
`--kubelet-preferred-address-types=InternalIP,Hostname`, the node's hostname resolving nowhere) at
`daemonEndpoints.kubeletEndpoint.Port`, where `kubelet_api.py` serves `/containerLogs` over TLS
with a serving certificate for 127.0.0.1, to kube-apiserver's kubelet-client certificate only.

Files: `<workdir>/kubeconfig`, `<workdir>/control-plane/` (the PKI, component logs, etcd),
`<workdir>/node/` (the kubelet's certificates and its kubeconfig, for acting as the node),
`<workdir>/pods`, `<workdir>/logs` (the pods'), as `LocalCluster` has them.
"""
from __future__ import annotations

import asyncio
import atexit
import os
import socket
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .client import ApiStatusError, Client, tls_context
from .cluster import NODE_NAME, load_manifests
from .control_plane import APISERVER, Certificate, KubernetesControlPlane, Pki, kubeconfig_text
from .kubelet import Kubelet
from .kubelet_api import KubeletApi, serving_context
from .node import KUBELET_VERSION
from .runtimes.simulated import PLAIN, Workload

# kube-apiserver reaches a kubelet at the first of these the Node reports: its InternalIP first.
APISERVER_FLAGS = ("--kubelet-preferred-address-types=InternalIP,Hostname",)
CRD_ESTABLISHED_TIMEOUT = 60.0


@dataclass(frozen=True)
class NodeCertificates:
    ca: Path          # the cluster CA: trusted for kube-apiserver, required of the kubelet API's clients
    client: Certificate   # CN=system:node:<node>, O=system:nodes
    serving: Certificate  # the kubelet API's: 127.0.0.1, localhost, the node name


def node_certificates(pki_dir: Path, out_dir: Path, node_name: str) -> NodeCertificates:
    """Issue the kubelet's certificates with the cluster CA in `pki_dir` (control_plane.py's `ca.crt`/`ca.key`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ca = Certificate(pki_dir / "ca.crt", pki_dir / "ca.key")
    pki = Pki(out_dir)
    client = pki.issue(ca, "kubelet-client", f"system:node:{node_name}", organizations=["system:nodes"], client=True)
    serving = pki.issue(ca, "kubelet-serving", node_name, server=True, dns=[node_name, "localhost"], ips=["127.0.0.1"])
    return NodeCertificates(ca.cert, client, serving)


def crd_established(crd: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])


class KubernetesCluster:
    """Kubernetes' control plane on 127.0.0.1 and the local kubelet as its one Node.

    Takes what `LocalCluster` takes (capacity, CRDs, entrypoints, workload, runtime, simulate,
    keep_logs, pods), plus `bin_dir` (the binaries; default: what `hack/control_plane.sh` built),
    `kubeconfig_out` (also write the admin kubeconfig there) and `extra_args` (more flags per
    component name, e.g. {"kube-scheduler": ["--kube-api-qps=200"]}). Stopping ends the pods' processes,
    the kubelet and every control-plane process; the files stay.
    """

    def __init__(self, workdir: Path, cpu: float = 2, memory: str = "8Gi", gpus: int = 0,
                 crds: Iterable[Path | dict[str, Any]] = (), port: int = 0, bin_dir: Path | str | None = None,
                 kubeconfig_out: Path | None = None, entrypoints: Mapping[str, Sequence[str]] | None = None,
                 node_name: str = NODE_NAME, keep_logs: bool = False, simulate: bool = False, runtime: str = "process",
                 workload: Workload = PLAIN, startup_timeout: float = 180, pods: int = 110,
                 extra_args: Mapping[str, Iterable[str]] | None = None):
        self.workdir = Path(workdir).resolve()
        self.crds = [crd if isinstance(crd, dict) else Path(crd) for crd in crds]
        self.capacity = {"cpu": f"{cpu:g}", "memory": memory, "pods": str(pods)}
        if gpus:
            self.capacity["nvidia.com/gpu"] = str(gpus)
        self.entrypoints = entrypoints
        self.node_name = node_name
        self.keep_logs = keep_logs
        self.simulate = simulate
        self.runtime = runtime
        self.workload = workload
        flags = {name: list(args) for name, args in (extra_args or {}).items()}
        flags[APISERVER] = [*APISERVER_FLAGS, *flags.get(APISERVER, [])]
        self.plane = KubernetesControlPlane(self.workdir / "control-plane", port=port, bin_dir=bin_dir,
                                            kubeconfig_out=kubeconfig_out, startup_timeout=startup_timeout,
                                            extra_args=flags)
        self.certificates: NodeCertificates | None = None
        self.kubeconfig = self.workdir / "kubeconfig"  # the admin's (system:masters), as LocalCluster's is there
        self.node_kubeconfig = self.workdir / "node" / "kubelet.kubeconfig"
        self.kubelet: Kubelet | None = None
        self.kubelet_port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return self.plane.url


    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> KubernetesCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            self.plane.start()
            with os.fdopen(os.open(self.kubeconfig, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
                out.write(self.plane.kubeconfig.read_text())
            self.certificates = node_certificates(self.plane.workdir / "pki", self.workdir / "node", self.node_name)
            self.node_kubeconfig.write_text(kubeconfig_text(self.url, self.certificates.ca, self.certificates.client,
                                                            f"system:node:{self.node_name}", embed=False))
            self._thread = threading.Thread(target=self._thread_main, name="pets-kubelet", daemon=True)
            self._thread.start()
            self._ready.wait()
            if self._error is not None:
                self._thread.join()
                raise self._error
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._loop and self._stop and self._thread and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=60)
        self.plane.stop()
        atexit.unregister(self.stop)

    def __enter__(self) -> KubernetesCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def process_ids(self) -> dict[str, list[int]]:
        """Pids of the control plane's components and of the containers' main processes now running."""
        pids = {name: [pid] for name, pid in self.plane.process_ids().items()}
        if self.kubelet is not None and self._loop is not None and self._loop.is_running():
            kubelet = self.kubelet

            async def running() -> list[int]:
                return [pid for worker in kubelet.workers.values() for pid in worker.running_pids]

            pids["containers"] = asyncio.run_coroutine_threadsafe(running(), self._loop).result(timeout=10)
        return pids

    # --- the kubelet's thread ----------------------------------------------------------------

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
        assert self.certificates is not None
        certs = self.certificates
        self._stop = asyncio.Event()
        pki = self.plane.workdir / "pki"
        admin_tls = tls_context(certs.ca, pki / "admin.crt", pki / "admin.key")
        async with Client(self.url, admin_tls) as admin:
            for crd in self.crds:
                for manifest in load_manifests(crd):
                    await apply_crd(admin, manifest)
            version = (await admin.get("/version")).get("gitVersion") or ""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        self.kubelet_port = listener.getsockname()[1]
        async with Client(self.url, tls_context(certs.ca, certs.client.cert, certs.client.key)) as client:
            self.kubelet = Kubelet(client, self.node_name, self.workdir, self.capacity, self.entrypoints,
                                   keep_logs=self.keep_logs, simulate=self.simulate, runtime=self.runtime,
                                   workload=self.workload, kubelet_port=self.kubelet_port,
                                   kubelet_version=f"{version}-pets-local" if version else KUBELET_VERSION,
                                   heartbeat=True)
            api = KubeletApi(self.kubelet)
            await api.start(listener, serving_context(certs.serving.cert, certs.serving.key, certs.ca))
            try:
                await self.kubelet.register_node()
                task = asyncio.create_task(self.kubelet.run())
                self._ready.set()
                await self._stop.wait()
                await self.kubelet.shutdown()
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            finally:
                await api.stop()


async def apply_crd(admin: Client, manifest: dict[str, Any]) -> None:
    """Create a CRD (one that exists already stays) and wait until it is Established."""
    if manifest.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"only CustomResourceDefinitions are applied at start, not {manifest.get('kind')!r}")
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    try:
        await admin.create(path, manifest)
    except ApiStatusError as error:
        if error.code != 409:
            raise
    name = manifest["metadata"]["name"]
    deadline = asyncio.get_running_loop().time() + CRD_ESTABLISHED_TIMEOUT
    while not crd_established(await admin.get(f"{path}/{name}")):
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"CRD {name} was not Established after {CRD_ESTABLISHED_TIMEOUT:.0f} s")
        await asyncio.sleep(0.2)
