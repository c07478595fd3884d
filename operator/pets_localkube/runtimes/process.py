"""The process runtime: each container of a pod is a local process under its own `shim.py`.

A `PodWorker` does everything the kubelet does for one pod (volumes, env, init containers, restarts,
status, deletion); each `ContainerRun` is one container: its shim and main process, its restarts and
the state it reports. The shim is the container's "init": the main process in its own session,
every process it starts kept below the shim (a child subreaper), all of them ended when the main
process exits, and the container reported terminated with the main process's exit code. Its
stdout+stderr go to the pod log file.

The workers see the kubelet through `KubeletHandle` only, so the runtimes never import it back.
"""
from __future__ import annotations

import asyncio
import base64
import logging
import os
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from .. import logs, termination
from ..client import ApiStatusError, Client
from ..environment import (
    LOOPBACK,
    SERVICE_ACCOUNT_DIR_ENV,
    SERVICE_ACCOUNT_MOUNT,
    PathMap,
    PortMap,
    api_server_env,
    declared_ports,
    expand,
    field_ref,
    rewrite_env,
)
from ..events import NORMAL, WARNING, EventRecorder, container_field_path
from ..projected import config_map_files, projected_files, secret_files, write_files
from ..status_report import StatusReporter
from ..storage import POD_FAILED, POD_SUCCEEDED, TERMINAL_POD_PHASES, now
from ..volumes import MountError, check_host_path, is_read_only

logger = logging.getLogger(__name__)

MAX_RESTART_BACKOFF = 10.0
MOUNT_RETRY_FIRST, MOUNT_RETRY_MAX = 0.5, 8.0  # FailedMount retries (the kubelet's start at 500ms)
PIPE_DRAIN_TIMEOUT = 2.0  # once a container has ended, how long its log pipe may take to reach EOF
SHIM_STOP_TIMEOUT = 5.0  # after the kill signal, how long the shim may take to end its container
SHIM = Path(__file__).with_name("shim.py")
# Every process of a container carries this in its environment, so one left over by a shim that
# was killed itself can still be found.
CONTAINER_MARKER = "PETS_LOCALKUBE_CONTAINER"


class KubeletHandle(Protocol):
    """What a pod worker uses of the kubelet that runs it."""

    client: Client
    events: EventRecorder
    node_name: str
    workdir: Path  # pods' directories and PVCs
    log_root: Path
    ports: PortMap
    entrypoints: Mapping[str, Sequence[str]]  # image repository -> the command of a container that sets none
    api_server: tuple[str, int] | None  # where containers reach the API server (host, port); None: not told
    shutting_down: bool

    async def finish_deletion(self, worker: PodWorker) -> None: ...


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


def processes_marked(marker: str) -> list[int]:
    """Pids whose environment holds `CONTAINER_MARKER=<marker>` (from /proc; empty where there is none)."""
    wanted = f"{CONTAINER_MARKER}={marker}".encode()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if wanted in environ.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def kill_marked(marker: str) -> None:
    """SIGKILL every process of a container whose shim could not end them (it was killed itself)."""
    for _ in range(50):
        pids = processes_marked(marker)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


class ContainerRun:
    """One container of a pod: its shim and main process, restarts and reported state."""

    def __init__(self, worker: PodWorker, spec: dict[str, Any], init: bool = False):
        self.worker = worker
        self.init = init
        self.spec = spec
        self.name = spec["name"]
        self.field_path = container_field_path(self.name, init)
        self.process: asyncio.subprocess.Process | None = None  # the shim
        self.main_pid: int | None = None  # the container's main process
        self.restart_count = 0
        self.state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: dict[str, Any] = {}
        self.exit_code: int | None = None
        self.marker = f"{worker.uid}/{self.name}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def status(self) -> dict[str, Any]:
        running = "running" in self.state
        entry = {"name": self.name, "image": self.spec.get("image", ""), "imageID": "", "ready": running, "started": running,
                 "restartCount": self.restart_count, "state": self.state, "lastState": self.last_state}
        if self.main_pid is not None:
            entry["containerID"] = f"local://{self.main_pid}"
        return entry

    async def event(self, event_type: str, reason: str, message: str) -> None:
        await self.worker.kubelet.events.record(self.worker.pod, event_type, reason, message, self.field_path)

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
            meta = self.worker.pod["metadata"]
            await self.event(WARNING, "BackOff", f"Back-off restarting failed container {self.name} in pod "
                                                 f"{meta['name']}_{meta['namespace']}({meta['uid']})")
            await self.worker.report()
            try:
                await asyncio.wait_for(self.worker.stop_requested.wait(), backoff)
                return code
            except asyncio.TimeoutError:
                backoff = min(backoff * 2, MAX_RESTART_BACKOFF)

    def _start_error(self, log_path: Path, started: str, message: str) -> int:
        with log_path.open("a", encoding="utf-8") as log:
            log.write(logs.format_line(f"local kubelet: cannot start container {self.name}: {message}"))
        self.state = {"terminated": {"exitCode": 128, "reason": "StartError", "message": message,
                                     "startedAt": started, "finishedAt": now()}}
        self.exit_code = 128
        return 128

    async def _run_once(self) -> int:
        worker = self.worker
        started = now()
        log_path = logs.container_log_path(worker.kubelet.log_root, worker.pod, self.name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        message_file = termination.local_file(worker.pod_dir, self.name)  # its terminationMessagePath
        termination.prepare(message_file)
        log_offset = log_path.stat().st_size if log_path.exists() else 0
        try:
            argv, env, cwd, read_only = await worker.process_spec(self.spec)
        except (OSError, ValueError, ApiStatusError) as error:
            await self.event(WARNING, "Failed", f"Error: {error}")
            return self._start_error(log_path, started, str(error))
        env[CONTAINER_MARKER] = self.marker
        status_read, status_write = os.pipe()
        shim_argv = [sys.executable, "-I", "-S", str(SHIM), "--status-fd", str(status_write)]
        for path in read_only:
            shim_argv += ["--read-only", path]
        try:
            self.process = await asyncio.create_subprocess_exec(
                *shim_argv, "--", *argv, env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True, pass_fds=(status_write,), limit=1024 * 1024)
        except (OSError, ValueError) as error:
            os.close(status_read)
            await self.event(WARNING, "Failed", f"Error: {error}")
            return self._start_error(log_path, started, str(error))
        finally:
            os.close(status_write)
        report = await asyncio.to_thread(_read_all, status_read)
        self.main_pid = None
        failure = None
        for line in report.splitlines():
            word, _, rest = line.partition(" ")
            if word == "started":
                self.main_pid = int(rest)
            elif word == "error":
                failure = rest
            elif word == "read-only-unenforced":
                await worker.kubelet.events.record(worker.pod, WARNING, "ReadOnlyNotEnforced",
                                                   "the local kubelet cannot make readOnly mounts read-only here "
                                                   f"(no mount namespace: {rest}); the container sees them writable", self.field_path)
        if self.main_pid is None:
            await self.process.wait()
            message = failure or f"the container shim exited with code {self.process.returncode} before starting it"
            await self.event(WARNING, "Failed", f"Error: {message}")
            return self._start_error(log_path, started, message)
        await self.event(NORMAL, "Created", f"Created container: {self.name}")
        self.state = {"running": {"startedAt": started}}
        await self.event(NORMAL, "Started", f"Started container {self.name}")
        await worker.report()
        pump = asyncio.create_task(self._pump(self.process, log_path))
        returncode = await self.process.wait()
        if returncode < 0:  # the shim itself was killed: end what it could not
            await asyncio.to_thread(kill_marked, self.marker)
        # The shim has ended every process of the container, so the pipe is at its end; whatever
        # holds it open past that (nothing should) does not keep the container running.
        try:
            await asyncio.wait_for(asyncio.shield(pump), PIPE_DRAIN_TIMEOUT)
        except asyncio.TimeoutError:
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)
            logger.warning("container %s of pod %s ended but its output pipe stayed open; stopped reading it",
                           self.name, worker.pod["metadata"]["name"])
        code = returncode if returncode >= 0 else 128 - returncode
        self.exit_code = code
        message = termination.read_message(self.spec, message_file, log_path, log_offset, code)
        self.state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                     **({"message": message} if message else {}),
                                     "startedAt": started, "finishedAt": now(), "containerID": f"local://{self.main_pid}"}}
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

    def _signal_shim(self, sig: signal.Signals) -> None:
        if self.process is not None and self.process.returncode is None:
            try:
                self.process.send_signal(sig)
            except ProcessLookupError:
                pass

    async def stop(self, grace: float, announce: bool = True) -> None:
        """SIGTERM to the main process's group, SIGKILL to it after the grace period (the shim then ends
        every other process of the container); the shim itself is killed only if it does not end."""
        if not self.running:
            return
        assert self.process is not None
        if announce:
            await self.event(NORMAL, "Killing", f"Stopping container {self.name}")
        self._signal_shim(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(self.process.wait()), max(grace, 0.0))
            return
        except asyncio.TimeoutError:
            self._signal_shim(signal.SIGUSR1)
        try:
            await asyncio.wait_for(asyncio.shield(self.process.wait()), SHIM_STOP_TIMEOUT)
        except asyncio.TimeoutError:
            self._signal_shim(signal.SIGKILL)
            await asyncio.to_thread(kill_marked, self.marker)


def with_transitions(previous: Sequence[Mapping[str, Any]], wanted: Sequence[dict[str, Any]], stamp: str) -> list[dict[str, Any]]:
    """`wanted` conditions, each with its `lastTransitionTime`: kept from `previous` while the
    condition's status stays, `stamp` when it is new or changed (as a kubelet reports them)."""
    before = {c["type"]: c for c in previous}
    result = []
    for condition in wanted:
        old = before.get(condition["type"])
        same = old is not None and old.get("status") == condition["status"]
        result.append({**condition, "lastTransitionTime": old["lastTransitionTime"] if same else stamp})
    return result


def _read_all(fd: int) -> str:
    chunks = []
    with os.fdopen(fd, "rb") as stream:
        while chunk := stream.read(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


class PodWorker:
    """Everything the kubelet does for one pod, from volumes to the final status."""

    def __init__(self, kubelet: KubeletHandle, pod: dict[str, Any]):
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
        self.volumes: dict[str, Path] | None = None
        self.task: asyncio.Task | None = None
        self.pod_ip = LOOPBACK  # the docker runtime reports each pod's own address
        self.conditions: list[dict[str, Any]] = []  # as last reported, with their transition times
        self.status_reporter = StatusReporter(self._write_status, self.path)  # written until it lands

    # --- volumes and processes ---------------------------------------------------------------

    async def _set_up_volumes(self) -> dict[str, Path]:
        """Each volume's local path; MountError as the kubelet's volume manager reports it."""
        dirs: dict[str, Path] = {}
        for volume in self.pod["spec"].get("volumes") or []:
            name = volume["name"]
            if "hostPath" in volume:
                local = Path(volume["hostPath"]["path"])
                check_host_path(name, local, volume["hostPath"].get("type") or "")
            else:
                if "persistentVolumeClaim" in volume:
                    local = self.kubelet.workdir / "pvc" / volume["persistentVolumeClaim"]["claimName"]
                else:
                    local = self.pod_dir / "volumes" / name
                local.mkdir(parents=True, exist_ok=True)
                if "configMap" in volume or "secret" in volume:
                    await self._project(volume, local)
                elif "projected" in volume:  # e.g. kube-api-access-*: a token, the cluster CA, the namespace
                    write_files(local, await projected_files(self.kubelet.client, self.pod, volume))
            dirs[name] = local
        return dirs

    async def _mount_volumes(self) -> bool:
        """Set up the volumes, retrying as the kubelet does while one fails (a `FailedMount` Warning each
        time, the pod `ContainerCreating`); False when the pod is stopped before they are ready."""
        wait = MOUNT_RETRY_FIRST
        while not self.stopping:
            try:
                self.volumes = await self._set_up_volumes()
                return True
            except MountError as error:
                await self.kubelet.events.record(self.pod, WARNING, "FailedMount", error.event_message)
            await self.report()
            try:
                await asyncio.wait_for(self.stop_requested.wait(), wait)
            except asyncio.TimeoutError:
                wait = min(wait * 2, MOUNT_RETRY_MAX)
        return False

    async def _project(self, volume: dict[str, Any], local: Path) -> None:
        namespace = self.pod["metadata"]["namespace"]
        if "configMap" in volume:
            source_spec, kind, plural, field = volume["configMap"], "configmap", "configmaps", "name"
        else:
            source_spec, kind, plural, field = volume["secret"], "secret", "secrets", "secretName"
        try:
            source = await self.kubelet.client.get(f"/api/v1/namespaces/{namespace}/{plural}/{source_spec.get(field)}")
        except ApiStatusError as error:
            if error.code != 404:
                raise MountError(volume["name"], str(error)) from None
            if source_spec.get("optional"):
                return
            raise MountError(volume["name"], f'{kind} "{source_spec.get(field)}" not found') from None
        # Each key becomes a file of its bytes: a ConfigMap's data (text) and binaryData (base64, e.g. a
        # cluster_launcher function payload), a Secret's data (base64) and stringData.
        files = config_map_files(source) if kind == "configmap" else secret_files(source)
        for key, content in files.items():
            (local / key).write_bytes(content)

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

    async def process_spec(self, container: dict[str, Any]) -> tuple[list[str], dict[str, str], str, list[str]]:
        """argv, environment, working directory and read-only paths of a container's local process."""
        volumes = self.volumes if self.volumes is not None else await self._set_up_volumes()
        by_name = {v["name"]: v for v in self.pod["spec"].get("volumes") or []}
        mounts, read_only = [], []
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") not in volumes:
                continue
            local = volumes[mount["name"]] / mount.get("subPath", "")
            mounts.append((mount["mountPath"], local))
            if is_read_only(by_name[mount["name"]], mount) and str(local) not in read_only:
                read_only.append(str(local))
        mounts.append((termination.container_path(container), termination.local_file(self.pod_dir, container["name"])))
        paths = PathMap(mounts)
        spec = self.pod["spec"]
        hostname = spec.get("hostname") or self.pod["metadata"]["name"]
        # As a kubelet: the `kubernetes` Service's variables first, the container's own env over them.
        pod_env: dict[str, str] = {"HOSTNAME": hostname,
                                   **(api_server_env(*self.kubelet.api_server) if self.kubelet.api_server else {})}
        for entry in container.get("env") or []:
            pod_env[entry["name"]] = await self._env_value(entry, pod_env)
        local_ports = {port: self.kubelet.ports.pod_port(self.uid, port) for port in declared_ports(container)}
        pod_env = rewrite_env(pod_env, paths, self.kubelet.ports, self.uid, local_ports)
        if paths.local(SERVICE_ACCOUNT_MOUNT) != SERVICE_ACCOUNT_MOUNT:  # the token volume, e.g. kube-api-access-*
            pod_env[SERVICE_ACCOUNT_DIR_ENV] = paths.local(SERVICE_ACCOUNT_MOUNT)
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
        return argv, env, cwd, read_only

    # --- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            self.pod_dir.mkdir(parents=True, exist_ok=True)
            await self.report()
            if not await self._mount_volumes():
                return
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
        announce = not self.kubelet.shutting_down
        await asyncio.gather(*(c.stop(grace, announce) for c in self.init_containers + self.containers))

    @property
    def running_pids(self) -> list[int]:
        return [c.main_pid for c in self.init_containers + self.containers if c.running and c.main_pid is not None]

    async def report(self) -> None:
        statuses = [c.status() for c in self.containers]
        init_statuses = [c.status() for c in self.init_containers]
        started = any(c.process is not None or c.restart_count or "terminated" in c.state for c in self.containers)
        phase = self.phase if self.phase in TERMINAL_POD_PHASES else ("Running" if started else "Pending")
        ready = phase == "Running" and all(s["ready"] for s in statuses)
        ready_reason = {} if ready else {"reason": "PodCompleted" if phase in TERMINAL_POD_PHASES else "ContainersNotReady"}
        self.conditions = with_transitions(self.conditions, [
            {"type": "Initialized", "status": "False" if self.init_containers and self.phase == "Pending" else "True"},
            {"type": "ContainersReady", "status": "True" if ready else "False", **ready_reason},
            {"type": "Ready", "status": "True" if ready else "False", **ready_reason},
        ], now())
        # The scheduler's PodScheduled stays as it set it (a merge patch replaces the whole list).
        scheduled = next((c for c in (self.pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"),
                         {"type": "PodScheduled", "status": "True"})
        # No qosClass: the API server sets it when the pod is created, and it may not change.
        status = {
            "phase": phase, "hostIP": LOOPBACK, "hostIPs": [{"ip": LOOPBACK}], "podIP": self.pod_ip, "podIPs": [{"ip": self.pod_ip}],
            "startTime": self.started, "containerStatuses": statuses,
            **({"initContainerStatuses": init_statuses} if init_statuses else {}),
            "conditions": [scheduled, *self.conditions],
        }
        await self.status_reporter.send(status)

    async def _write_status(self, status: dict[str, Any]) -> None:
        await self.kubelet.client.merge_patch(self.path + "/status", {"status": status})


