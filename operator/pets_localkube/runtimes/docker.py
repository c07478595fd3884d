"""The local kubelet's docker runtime: each container of a pod is a docker container from its image.

Chosen over podman's `kube play` (which runs whole Pod manifests) because the kubelet must report
each container's state as it changes (waiting reasons, running, OOMKilled, exit codes), stream
its log into the kubelet's log files, restart it per restartPolicy and stop it with the pod's
grace period: `kube play` hides those steps, and podman is not what users of kind run. The
docker CLI is driven as a subprocess (no SDK: the CLI is what the engine ships, and
`docker start -a` is the log stream). `docker_args.py` decides the arguments; `process.py`'s
worker does the rest (volumes, env values, status, deletion).

All pods of the node share one user-defined network, `pets-localkube-<node>`, where each pod has
its own IP (reported as `status.podIP`) and its DNS names as network aliases, so pods reach each
other as on a cluster; nothing in the env is rewritten (the process runtime maps DNS names to
127.0.0.1 and ports; this one does not need to).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from .. import logs, termination
from ..client import ApiStatusError
from ..events import NORMAL, WARNING
from ..storage import now
from .docker_args import LABEL_NODE, ContainerConfigError, create_args, non_root_problem
from .process import ContainerRun, KubeletHandle, PodWorker

logger = logging.getLogger(__name__)

RETRY_FIRST, RETRY_MAX = 1.0, 10.0  # while an image is missing or a container cannot be created
START_TIMEOUT = 30.0  # from `docker start -a` until the container is seen running or ended
OOM_EXIT_CODE = 137


class DockerError(RuntimeError):
    pass


def docker_binary() -> str:
    found = shutil.which("docker")
    if found is None:
        raise DockerError("the docker runtime needs the docker client on PATH")
    return found


async def docker(*args: str, env: dict[str, str] | None = None, check: bool = True, timeout: float = 120) -> str:
    """Run `docker args...`; its stdout. DockerError with docker's own message when it fails and `check`."""
    process = await asyncio.create_subprocess_exec(
        docker_binary(), *args, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        raise DockerError(f"docker {args[0]} did not answer in {timeout:g} s") from None
    if check and process.returncode != 0:
        raise DockerError(err.decode("utf-8", errors="replace").strip() or f"docker {args[0]} failed")
    return out.decode("utf-8", errors="replace")


def network_name(node: str) -> str:
    return f"pets-localkube-{node}"


async def ensure_network(node: str) -> str:
    name = network_name(node)
    if not (await docker("network", "ls", "-q", "--filter", f"name=^{name}$")).strip():
        await docker("network", "create", "--label", f"{LABEL_NODE}={node}", name)
    return name


async def remove_node(node: str) -> None:
    """Every container this node made, then its network (cluster shutdown)."""
    ids = (await docker("ps", "-aq", "--filter", f"label={LABEL_NODE}={node}", check=False)).split()
    if ids:
        await docker("rm", "-f", *ids, check=False)
    await docker("network", "rm", network_name(node), check=False)


async def image_user(image: str) -> str | None:
    """The image's configured user ("" for root by default); None when the image is not present."""
    try:
        found = json.loads(await docker("image", "inspect", "--format", "{{json .Config.User}}", image))
    except DockerError:
        return None
    return found or ""


def _client_env(pod_env: dict[str, str]) -> dict[str, str]:
    """The docker client's environment: its own settings, then the container's values for `-e NAME`."""
    own = {key: value for key, value in os.environ.items() if key.startswith("DOCKER_") or key in ("PATH", "HOME")}
    if "HOME" in own and "DOCKER_CONFIG" not in own:
        own["DOCKER_CONFIG"] = str(Path(own["HOME"]) / ".docker")
    return {**own, **pod_env}


class DockerContainerRun(ContainerRun):
    """One container of a pod as a docker container: created, started attached (its log), inspected, removed."""

    def __init__(self, worker: DockerPodWorker, spec: dict[str, Any], init: bool = False):
        super().__init__(worker, spec, init)
        self.container_id: str | None = None
        self.attached: asyncio.subprocess.Process | None = None

    @property
    def running(self) -> bool:
        return self.attached is not None and self.attached.returncode is None

    def status(self) -> dict[str, Any]:
        entry = super().status()
        if self.container_id is not None:
            entry["containerID"] = f"docker://{self.container_id}"
        return entry

    async def _wait(self, seconds: float) -> bool:
        """Wait `seconds` unless the pod is stopped first; True when it was."""
        try:
            await asyncio.wait_for(self.worker.stop_requested.wait(), seconds)
            return True
        except asyncio.TimeoutError:
            return False

    async def _until_creatable(self) -> bool:
        """Wait, as a kubelet does, while the image is missing or the container may not be made; False if stopped."""
        image = self.spec.get("image", "")
        delay, last = RETRY_FIRST, None
        while not self.worker.stopping:
            user = await image_user(image)
            if user is None:
                reason = "ErrImageNeverPull"
                message = (f'Container image "{image}" is not present with pull policy of '
                           f'{self.spec.get("imagePullPolicy") or "IfNotPresent"} (the local cluster pulls nothing)')
            else:
                problem = non_root_problem(self.worker.pod, self.spec, user)
                if problem is None:
                    return True
                reason, message = "CreateContainerConfigError", problem
            self.state = {"waiting": {"reason": reason, "message": message}}
            if (reason, message) != last:
                await self.event(WARNING, "Failed", f"Error: {reason}" if reason != "CreateContainerConfigError"
                                 else f"Error: {message}")
                await self.worker.report()
                last = (reason, message)
            if await self._wait(delay):
                return False
            delay = min(delay * 2, RETRY_MAX)
        return False

    async def _run_once(self) -> int:
        worker: DockerPodWorker = self.worker  # type: ignore[assignment]
        log_path = logs.container_log_path(worker.kubelet.log_root, worker.pod, self.name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        message_file = termination.local_file(worker.pod_dir, self.name)
        termination.prepare(message_file)
        message_file.chmod(0o666)  # the container's user writes it
        log_offset = log_path.stat().st_size if log_path.exists() else 0
        if not await self._until_creatable():
            self.state = {"terminated": {"exitCode": OOM_EXIT_CODE, "reason": "Error", "startedAt": now(),
                                         "finishedAt": now(), "message": "stopped before the container was created"}}
            return OOM_EXIT_CODE
        started = now()
        try:
            env = await worker.container_env(self.spec)
            args = create_args(worker.pod, self.spec, name=f"{worker.container_prefix}-{self.name}-{self.restart_count}",
                               network=worker.network, node=worker.kubelet.node_name, env=env,
                               volumes=worker.volumes or {}, message_file=message_file,
                               message_path=termination.container_path(self.spec))
            self.container_id = (await docker("create", *args, env=_client_env(env))).strip()
        except (ContainerConfigError, DockerError, ApiStatusError, ValueError) as error:
            await self.event(WARNING, "Failed", f"Error: {error}")
            return self._start_error(log_path, started, str(error))
        await self.event(NORMAL, "Created", f"Created container: {self.name}")
        self.attached = await asyncio.create_subprocess_exec(
            docker_binary(), "start", "-a", self.container_id, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, limit=1024 * 1024)
        pump = asyncio.create_task(self._pump(self.attached, log_path))
        state = await self._inspect_when_started()
        if state.get("Running") or state.get("ExitCode") is not None:
            worker.pod_ip = await self._ip() or worker.pod_ip
            self.state = {"running": {"startedAt": started}}
            await self.event(NORMAL, "Started", f"Started container {self.name}")
            await worker.report()
        await self.attached.wait()
        await asyncio.gather(pump, return_exceptions=True)
        state = json.loads(await docker("inspect", "--format", "{{json .State}}", self.container_id))
        code = int(state.get("ExitCode") or 0)
        if state.get("OOMKilled"):
            reason = "OOMKilled"
        elif state.get("Error"):
            reason = "StartError"
        else:
            reason = "Completed" if code == 0 else "Error"
        message = termination.read_message(self.spec, message_file, log_path, log_offset, code) or state.get("Error") or None
        self.exit_code = code
        self.state = {"terminated": {"exitCode": code, "reason": reason, **({"message": message} if message else {}),
                                     "startedAt": started, "finishedAt": now(),
                                     "containerID": f"docker://{self.container_id}"}}
        await docker("rm", "-f", self.container_id, check=False)
        return code

    async def _inspect_when_started(self) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + START_TIMEOUT
        while True:
            state = json.loads(await docker("inspect", "--format", "{{json .State}}", self.container_id))
            if state.get("Status") != "created" or asyncio.get_running_loop().time() > deadline:
                return state
            await asyncio.sleep(0.1)

    async def _ip(self) -> str | None:
        worker: DockerPodWorker = self.worker  # type: ignore[assignment]
        template = f'{{{{(index .NetworkSettings.Networks "{worker.network}").IPAddress}}}}'
        address = (await docker("inspect", "--format", template, self.container_id, check=False)).strip()
        return address or None

    async def stop(self, grace: float, announce: bool = True) -> None:
        """`docker stop`: SIGTERM, SIGKILL after the grace period, as a kubelet stops a container."""
        if not self.running or self.container_id is None:
            return
        if announce:
            await self.event(NORMAL, "Killing", f"Stopping container {self.name}")
        await docker("stop", "-t", str(max(int(grace), 0)), self.container_id, check=False, timeout=grace + 60)
        assert self.attached is not None
        await self.attached.wait()


class DockerPodWorker(PodWorker):
    """A pod whose containers are docker containers on the node's network."""

    def __init__(self, kubelet: KubeletHandle, pod: dict[str, Any]):
        super().__init__(kubelet, pod)
        self.network = network_name(kubelet.node_name)
        self.container_prefix = f"pets-{pod['metadata']['namespace']}-{pod['metadata']['name']}-{self.uid[:8]}"
        self.init_containers = [DockerContainerRun(self, c, init=True) for c in pod["spec"].get("initContainers") or []]
        self.containers = [DockerContainerRun(self, c) for c in pod["spec"]["containers"]]

    async def _set_up_volumes(self) -> dict[str, Path]:
        volumes = await super()._set_up_volumes()
        # A kubelet's emptyDir is world-writable; the containers here run as their own uid.
        for volume in self.pod["spec"].get("volumes") or []:
            if "hostPath" not in volume and volume["name"] in volumes:
                volumes[volume["name"]].chmod(0o777)
        return volumes

    async def container_env(self, container: dict[str, Any]) -> dict[str, str]:
        """The container's env values (fieldRef, ConfigMap and Secret keys resolved), not rewritten."""
        env: dict[str, str] = {}
        for entry in container.get("env") or []:
            env[entry["name"]] = await self._env_value(entry, env)
        return env

    @property
    def running_pids(self) -> list[int]:
        return []  # no host processes: containers are the engine's
