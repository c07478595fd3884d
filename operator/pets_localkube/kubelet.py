"""The local kubelet: runs the pods bound to the local node as local processes.

It is an API client: it registers its Node, watches pods with `spec.nodeName=<node>`, reports
their status through `/status` and finishes graceful deletions with `gracePeriodSeconds=0`.
Each container is a process in its own session; stdout+stderr go to the pod log file.
"""
from __future__ import annotations

import asyncio
import base64
import logging
import os
import platform
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from . import logs
from .client import ApiStatusError, Client
from .environment import LOOPBACK, PathMap, PortMap, expand, field_ref, rewrite_env
from .storage import POD_FAILED, POD_SUCCEEDED, TERMINAL_POD_PHASES, now

logger = logging.getLogger(__name__)

MAX_RESTART_BACKOFF = 10.0
# Images whose entrypoint is a console script of this installation.
DEFAULT_ENTRYPOINTS = {"pets-trainer": ["pets-train"]}


def resolve_executable(name: str, path_env: str | None) -> str | None:
    """A bare command name: this Python's bin directory first, then PATH."""
    if "/" in name:
        return name if os.access(name, os.X_OK) else None
    beside_python = Path(sys.executable).parent / name
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return str(beside_python)
    return shutil.which(name, path=path_env)


def image_repository(image: str) -> str:
    """`registry:5000/team/pets-trainer:0.1.0@sha256:..` -> `pets-trainer`."""
    last = image.split("@")[0].rsplit("/", 1)[-1]
    return last.split(":")[0]


class ContainerRun:
    """One container of a pod: its process, restarts and reported state."""

    def __init__(self, worker: "PodWorker", spec: dict[str, Any], init: bool = False):
        self.worker = worker
        self.init = init
        self.spec = spec
        self.name = spec["name"]
        self.process: asyncio.subprocess.Process | None = None
        self.restart_count = 0
        self.state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: dict[str, Any] = {}
        self.exit_code: int | None = None

    def status(self) -> dict[str, Any]:
        running = "running" in self.state
        entry = {"name": self.name, "image": self.spec.get("image", ""), "imageID": "", "ready": running, "started": running,
                 "restartCount": self.restart_count, "state": self.state, "lastState": self.last_state}
        if self.process is not None:
            entry["containerID"] = f"local://{self.process.pid}"
        return entry

    async def run(self) -> int:
        """Run (and restart per restartPolicy) until the container stops for good; its last exit code."""
        policy = self.worker.pod["spec"].get("restartPolicy", "Always")
        if self.init and policy == "Always":
            policy = "OnFailure"  # init containers run to completion
        backoff = 1.0
        while True:
            code = await self._run_once()
            if self.worker.stopping or policy == "Never" or (policy == "OnFailure" and code == 0):
                return code
            self.last_state, self.restart_count = self.state, self.restart_count + 1
            self.state = {"waiting": {"reason": "CrashLoopBackOff", "message": f"back-off {backoff:g}s restarting failed container={self.name}"}}
            await self.worker.report()
            try:
                await asyncio.wait_for(self.worker.stop_requested.wait(), backoff)
                return code
            except asyncio.TimeoutError:
                backoff = min(backoff * 2, MAX_RESTART_BACKOFF)

    async def _run_once(self) -> int:
        worker = self.worker
        started = now()
        log_path = logs.container_log_path(worker.kubelet.log_root, worker.pod, self.name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            argv, env, cwd = await worker.process_spec(self.spec)
            self.process = await asyncio.create_subprocess_exec(
                *argv, env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True, limit=1024 * 1024)
        except (OSError, ValueError, ApiStatusError) as error:
            with log_path.open("a", encoding="utf-8") as log:
                log.write(logs.format_line(f"local kubelet: cannot start container {self.name}: {error}"))
            self.state = {"terminated": {"exitCode": 128, "reason": "StartError", "message": str(error),
                                         "startedAt": started, "finishedAt": now()}}
            self.exit_code = 128
            return 128
        self.state = {"running": {"startedAt": started}}
        await worker.report()
        await self._pump(self.process, log_path)
        returncode = await self.process.wait()
        self._kill_group(signal.SIGKILL)  # whatever the main process left behind goes with the container
        code = returncode if returncode >= 0 else 128 - returncode
        self.exit_code = code
        self.state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                     "startedAt": started, "finishedAt": now(), "containerID": f"local://{self.process.pid}"}}
        return code

    @staticmethod
    async def _pump(process: asyncio.subprocess.Process, log_path: Path) -> None:
        assert process.stdout is not None
        with log_path.open("a", encoding="utf-8") as log:
            while True:
                try:
                    line = await process.stdout.readline()
                except ValueError:  # a line longer than the buffer: take it in pieces
                    line = await process.stdout.read(1024 * 1024)
                if not line:
                    return
                log.write(logs.format_line(line.decode("utf-8", errors="replace")))
                log.flush()

    def _kill_group(self, sig: signal.Signals) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    async def stop(self, grace: float) -> None:
        """SIGTERM to the process group, SIGKILL after the grace period."""
        if self.process is None or self.process.returncode is not None:
            return
        self._kill_group(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), max(grace, 0.0))
        except asyncio.TimeoutError:
            self._kill_group(signal.SIGKILL)


class PodWorker:
    """Everything the kubelet does for one pod, from volumes to the final status."""

    def __init__(self, kubelet: "Kubelet", pod: dict[str, Any]):
        self.kubelet = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.uid = meta["uid"]
        self.path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        self.pod_dir = kubelet.workdir / "pods" / f"{meta['namespace']}_{meta['name']}_{self.uid}"
        self.init_containers = [ContainerRun(self, c, init=True) for c in pod["spec"].get("initContainers") or []]
        self.containers = [ContainerRun(self, c) for c in pod["spec"]["containers"]]
        self.stop_requested = asyncio.Event()
        self.stopping = False
        self.phase = "Pending"
        self.started = now()
        self._paths: PathMap | None = None
        self.task: asyncio.Task | None = None

    # --- volumes and processes ---------------------------------------------------------------

    async def _volume_dirs(self) -> dict[str, Path]:
        dirs: dict[str, Path] = {}
        for volume in self.pod["spec"].get("volumes") or []:
            name = volume["name"]
            if "hostPath" in volume:
                local = Path(volume["hostPath"]["path"])
            elif "persistentVolumeClaim" in volume:
                local = self.kubelet.workdir / "pvc" / volume["persistentVolumeClaim"]["claimName"]
            else:
                local = self.pod_dir / "volumes" / name
            local.mkdir(parents=True, exist_ok=True)
            if "configMap" in volume or "secret" in volume:
                await self._project(volume, local)
            dirs[name] = local
        return dirs

    async def _project(self, volume: dict[str, Any], local: Path) -> None:
        namespace = self.pod["metadata"]["namespace"]
        if "configMap" in volume:
            source = await self.kubelet.client.get(f"/api/v1/namespaces/{namespace}/configmaps/{volume['configMap']['name']}")
            files = dict(source.get("data") or {})
        else:
            source = await self.kubelet.client.get(f"/api/v1/namespaces/{namespace}/secrets/{volume['secret']['secretName']}")
            files = {k: base64.b64decode(v).decode() for k, v in (source.get("data") or {}).items()}
            files.update(source.get("stringData") or {})
        for key, content in files.items():
            (local / key).write_text(content, encoding="utf-8")

    async def _env_value(self, entry: dict[str, Any], env: dict[str, str]) -> str:
        if "value" in entry or "valueFrom" not in entry:
            return expand(str(entry.get("value", "")), env)
        source = entry["valueFrom"]
        namespace = self.pod["metadata"]["namespace"]
        if "fieldRef" in source:
            return field_ref(self.pod, source["fieldRef"]["fieldPath"])
        if "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            found = await self.kubelet.client.get(f"/api/v1/namespaces/{namespace}/configmaps/{ref['name']}")
            return str((found.get("data") or {}).get(ref["key"], ""))
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            found = await self.kubelet.client.get(f"/api/v1/namespaces/{namespace}/secrets/{ref['name']}")
            return base64.b64decode((found.get("data") or {}).get(ref["key"], "")).decode()
        raise ValueError(f"unsupported env valueFrom for {entry.get('name')}: {sorted(source)}")

    async def process_spec(self, container: dict[str, Any]) -> tuple[list[str], dict[str, str], str]:
        """argv, environment and working directory of a container's local process."""
        volumes = await self._volume_dirs()
        mounts = [(m["mountPath"], volumes[m["name"]] / m.get("subPath", "")) for m in container.get("volumeMounts") or []
                  if m.get("name") in volumes]
        paths = PathMap(mounts)
        spec = self.pod["spec"]
        hostname = spec.get("hostname") or self.pod["metadata"]["name"]
        pod_env: dict[str, str] = {"HOSTNAME": hostname}
        for entry in container.get("env") or []:
            pod_env[entry["name"]] = await self._env_value(entry, pod_env)
        pod_env = rewrite_env(pod_env, paths, self.kubelet.ports, self.uid)
        # A container's /tmp is its own; here it is the pod directory's, unless the pod sets TMPDIR.
        private_tmp = self.pod_dir / "tmp"
        private_tmp.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "TMPDIR": str(private_tmp), **pod_env}
        command = list(container.get("command") or [])
        if not command:
            command = list(self.kubelet.entrypoints.get(image_repository(container.get("image", "")), []))
        if not command:
            raise ValueError(f"image {container.get('image')!r} has no local entrypoint; set the container's command")
        # argv is left as written (a host path such as sys.executable may sit under a mountPath);
        # $(VAR) references pick up the already mapped env values.
        argv = [expand(a, pod_env) for a in command + list(container.get("args") or [])]
        executable = resolve_executable(argv[0], env.get("PATH"))
        if executable is None:
            raise ValueError(f'exec: "{argv[0]}": executable file not found in $PATH')
        argv[0] = executable
        cwd = paths.local(container["workingDir"]) if container.get("workingDir") else str(self.pod_dir)
        Path(cwd).mkdir(parents=True, exist_ok=True)
        return argv, env, cwd

    # --- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            self.pod_dir.mkdir(parents=True, exist_ok=True)
            await self.report()
            for init in self.init_containers:  # one after another, each to success
                if await init.run() != 0 or self.stopping:
                    self.phase = POD_FAILED
                    await self.report()
                    return
            self.phase = "Running"
            codes = await asyncio.gather(*(c.run() for c in self.containers))
            self.phase = POD_SUCCEEDED if all(code == 0 for code in codes) else POD_FAILED
            await self.report()
        finally:
            self.kubelet.ports.release(self.uid)
            if self.stopping:
                await self.kubelet.finish_deletion(self)

    async def stop(self, grace: float) -> None:
        self.stopping = True
        self.stop_requested.set()
        await asyncio.gather(*(c.stop(grace) for c in self.init_containers + self.containers))

    async def report(self) -> None:
        statuses = [c.status() for c in self.containers]
        init_statuses = [c.status() for c in self.init_containers]
        started = any(c.process is not None or c.restart_count or "terminated" in c.state for c in self.containers)
        phase = self.phase if self.phase in TERMINAL_POD_PHASES else ("Running" if started else "Pending")
        ready = phase == "Running" and all(s["ready"] for s in statuses)
        ready_reason = {} if ready else {"reason": "PodCompleted" if phase in TERMINAL_POD_PHASES else "ContainersNotReady"}
        status = {
            "phase": phase, "hostIP": LOOPBACK, "hostIPs": [{"ip": LOOPBACK}], "podIP": LOOPBACK, "podIPs": [{"ip": LOOPBACK}],
            "startTime": self.started, "containerStatuses": statuses, "qosClass": "BestEffort",
            **({"initContainerStatuses": init_statuses} if init_statuses else {}),
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "False" if self.init_containers and self.phase == "Pending" else "True"},
                {"type": "ContainersReady", "status": "True" if ready else "False", **ready_reason},
                {"type": "Ready", "status": "True" if ready else "False", **ready_reason},
            ],
        }
        try:
            await self.kubelet.client.merge_patch(self.path + "/status", {"status": status})
        except ApiStatusError as error:
            logger.debug("status of %s: %s", self.path, error)


class Kubelet:
    def __init__(self, client: Client, node_name: str, workdir: Path, capacity: dict[str, str],
                 entrypoints: dict[str, list[str]] | None = None):
        self.client = client
        self.node_name = node_name
        self.workdir = workdir
        self.log_root = workdir / "logs"
        self.capacity = capacity
        self.entrypoints = {**DEFAULT_ENTRYPOINTS, **(entrypoints or {})}
        self.ports = PortMap()
        self.workers: dict[str, PodWorker] = {}

    async def register_node(self) -> None:
        labels = {"kubernetes.io/hostname": self.node_name, "kubernetes.io/os": "linux",
                  "kubernetes.io/arch": "amd64", "node-role.kubernetes.io/local": ""}
        try:
            await self.client.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node_name, "labels": labels}})
        except ApiStatusError as error:
            if error.code != 409:
                raise
        stamp = now()
        await self.client.merge_patch(f"/api/v1/nodes/{self.node_name}/status", {"status": {
            "capacity": self.capacity, "allocatable": self.capacity,
            "addresses": [{"type": "InternalIP", "address": LOOPBACK}, {"type": "Hostname", "address": self.node_name}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "local kubelet is posting ready status",
                            "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}],
            "nodeInfo": {"kubeletVersion": "v1.32.0-pets-local", "kubeProxyVersion": "", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "local://processes", "osImage": platform.platform(),
                         "kernelVersion": platform.release(), "machineID": self.node_name, "systemUUID": self.node_name,
                         "bootID": self.node_name},
        }})

    async def run(self) -> None:
        await self.register_node()
        async for event_type, pod in self.client.watch("/api/v1/pods", fieldSelector=f"spec.nodeName={self.node_name}"):
            try:
                await self._handle(event_type, pod)
            except Exception:  # one broken pod must not stop the node
                logger.exception("kubelet: handling %s of pod %s", event_type, pod["metadata"].get("name"))

    async def _handle(self, event_type: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        worker = self.workers.get(uid)
        if event_type == "DELETED":
            if worker:
                await worker.stop(0)
            self.workers.pop(uid, None)
            return
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        if worker is None and not deleting and pod.get("status", {}).get("phase") not in TERMINAL_POD_PHASES:
            worker = self.workers[uid] = PodWorker(self, pod)
            worker.task = asyncio.create_task(worker.run())
        elif deleting and worker is not None and not worker.stopping:
            asyncio.create_task(worker.stop(float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)))
        elif deleting and worker is None:
            await self._delete_now(pod)
        if worker is not None and (worker.task is None or worker.task.done()) and deleting:
            await self._delete_now(pod)

    async def finish_deletion(self, worker: PodWorker) -> None:
        await self._delete_now(worker.pod)

    async def _delete_now(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            await self.client.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                                     {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}})
        except ApiStatusError as error:
            if error.code not in (404, 409):
                raise
        self.workers.pop(meta["uid"], None)

    async def shutdown(self, grace: float = 2.0) -> None:
        """Stop every process this kubelet started (cluster shutdown)."""
        workers = list(self.workers.values())
        await asyncio.gather(*(w.stop(grace) for w in workers), return_exceptions=True)
        # Let each worker report its last status while the API client is still open.
        tasks = [w.task for w in workers if w.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=grace + 5)
