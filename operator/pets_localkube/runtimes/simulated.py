"""Simulated pods: the kubelet moves them Pending -> Running -> Succeeded/Failed on a schedule, no process.

For load tests of the operator (`benchmarks/operator_scale.py`), as kwok does for Kubernetes: a
simulated pod costs a few timers instead of a shim and a Python process, and its log is written on a
schedule the pod itself carries, into the same log file a real container's output goes to, so the
API server's `/log` (`follow=true` included) serves it unchanged.

A pod is simulated when the kubelet runs in simulate mode (`LocalCluster(simulate=True)`, `local up
--simulate`), or when the pod asks for it, so real and simulated pods mix in one cluster: the
annotation `simulate.pets-localkube.dev/schedule`, or the first container's environment variable
`PETS_SIMULATE`, holding a JSON object:

    {"epochSeconds": 5, "epochs": 10, "startSeconds": 0.5, "accuracy": [0.31, 0.52, ...],
     "exitCode": 0, "failAfterEpoch": null}

every key optional: `epochSeconds` (1) between epoch lines, `epochs` (1), `startSeconds` (0) Pending
before Running, `accuracy` per epoch (a list, its last value repeated; by default a rising curve),
`exitCode` (0) at the end, `failAfterEpoch` (none) ends the container after that epoch with
`exitCode` (1 when it is 0).

What the pod prints, and the keys its schedule may leave to the pod's other settings, belong to the
workload, not to the kit: the cluster is given a `Workload` (`LocalCluster(workload=...)`; the
product's is in `pets_localkube/product.py`). The kit's own, `PLAIN`, prints a line at the start, one
per epoch and one at the end.

Not simulated: volumes (nothing is mounted, so no FailedMount), restarts (`restartPolicy` other than
Never ends the pod as if it were Never), the `Created`/`Started` Events (kwok posts none either).
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import logs
from ..events import WARNING
from ..storage import POD_FAILED, POD_SUCCEEDED, now
from .process import KubeletHandle, PodWorker

logger = logging.getLogger(__name__)

ANNOTATION = "simulate.pets-localkube.dev/schedule"
ENV = "PETS_SIMULATE"
STOPPED_EXIT_CODE = 143  # SIGTERM, as a process that honours it exits


class ScheduleError(ValueError):
    """The pod's schedule is not usable; the message names the key."""


@dataclass(frozen=True)
class Schedule:
    epoch_seconds: float = 1.0
    epochs: int = 1
    start_seconds: float = 0.0
    accuracy: tuple[float, ...] = ()
    exit_code: int = 0
    fail_after_epoch: int | None = None

    def accuracy_of(self, epoch: int) -> float:
        if self.accuracy:
            return self.accuracy[min(epoch, len(self.accuracy) - 1)]
        return round(0.3 + 0.6 * (epoch + 1) / max(self.epochs, 1), 4)  # a rising curve, 0.9 at the end

    @property
    def last_epoch(self) -> int:
        """The last epoch the pod prints (-1: none)."""
        return self.epochs - 1 if self.fail_after_epoch is None else min(self.fail_after_epoch, self.epochs - 1)

    @property
    def final_exit_code(self) -> int:
        if self.fail_after_epoch is not None and self.fail_after_epoch < self.epochs:
            return self.exit_code or 1
        return self.exit_code

    @property
    def run_seconds(self) -> float:
        """From Running to the container's end."""
        return (self.last_epoch + 1) * self.epoch_seconds


def literal_env(pod: Mapping[str, Any]) -> dict[str, str]:
    """The first container's env values given literally (what a simulated pod can read of its env)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        return {}
    return {e["name"]: str(e["value"]) for e in containers[0].get("env") or [] if "value" in e and "name" in e}


def requested(pod: Mapping[str, Any]) -> bool:
    """Whether the pod asks to be simulated (annotation or environment)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return ANNOTATION in annotations or ENV in literal_env(pod)


def _number(raw: Mapping[str, Any], key: str, default: float, minimum: float = 0.0) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        raise ScheduleError(f"{key} must be a number >= {minimum:g}, got {value!r}")
    return float(value)


def _integer(raw: Mapping[str, Any], key: str, default: int | None, minimum: int) -> int | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ScheduleError(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def parse_schedule(text: str | None, defaults: Mapping[str, Any] | None = None) -> Schedule:
    """The schedule of a JSON object (None or "": the defaults); `defaults` fill keys the text leaves out."""
    raw: Any = {}
    if text and text.strip():
        try:
            raw = json.loads(text)
        except ValueError as error:
            raise ScheduleError(f"not JSON: {error}") from None
    if not isinstance(raw, dict):
        raise ScheduleError(f"must be a JSON object, got {text!r}")
    raw = {**(defaults or {}), **raw}
    known = {"epochSeconds", "epochs", "startSeconds", "accuracy", "exitCode", "failAfterEpoch"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ScheduleError(f"unknown keys {unknown}; known: {sorted(known)}")
    accuracy = raw.get("accuracy") or []
    if not isinstance(accuracy, list) or not all(isinstance(a, (int, float)) and not isinstance(a, bool)
                                                 and 0 <= a <= 1 for a in accuracy):
        raise ScheduleError(f"accuracy must be a list of numbers within 0..1, got {accuracy!r}")
    exit_code = _integer(raw, "exitCode", 0, 0)
    if exit_code > 255:
        raise ScheduleError(f"exitCode must be within 0..255, got {exit_code}")
    return Schedule(epoch_seconds=_number(raw, "epochSeconds", 1.0), epochs=_integer(raw, "epochs", 1, 0),
                    start_seconds=_number(raw, "startSeconds", 0.0), accuracy=tuple(float(a) for a in accuracy),
                    exit_code=exit_code, fail_after_epoch=_integer(raw, "failAfterEpoch", None, 0))


def schedule_of(pod: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> Schedule:
    """The pod's schedule: its annotation, else its `PETS_SIMULATE`; `defaults` fill the keys it leaves out."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return parse_schedule(annotations.get(ANNOTATION, literal_env(pod).get(ENV)), defaults)


# (schedule, pod) -> (seconds after Running, line) for every line the pod prints, in order.
LogLines = Callable[[Schedule, Mapping[str, Any]], list[tuple[float, str]]]


def plain_log_lines(schedule: Schedule, pod: Mapping[str, Any]) -> list[tuple[float, str]]:
    """The kit's own lines, in no workload's format: one at the start, one per epoch, one at the end."""
    name = (pod.get("metadata") or {}).get("name", "")
    lines = [(0.0, f"simulated pod {name}: {schedule.epochs} epochs every {schedule.epoch_seconds:g}s")]
    lines += [((epoch + 1) * schedule.epoch_seconds, f"epoch {epoch}: accuracy {schedule.accuracy_of(epoch):g}")
              for epoch in range(schedule.last_epoch + 1)]
    lines.append((schedule.run_seconds, f"simulated pod {name}: exit code {schedule.final_exit_code}"))
    return lines


def no_defaults(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return {}


@dataclass(frozen=True)
class Workload:
    """What simulated pods print (`log_lines`), and the schedule keys a pod's own schedule leaves to
    the pod's other settings (`schedule_defaults`, e.g. its epochs from its env)."""
    log_lines: LogLines = plain_log_lines
    schedule_defaults: Callable[[Mapping[str, Any]], Mapping[str, Any]] = no_defaults


PLAIN = Workload()


class SimulatedContainer:
    """A container's reported state, as `PodWorker.report` reads it from a `ContainerRun`."""

    def __init__(self, spec: Mapping[str, Any]):
        self.spec = spec
        self.name = spec["name"]
        self.process = None  # never a process
        self.main_pid = None
        self.restart_count = 0
        self.state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
        self.started = False
        self.running = False

    def status(self) -> dict[str, Any]:
        running = "running" in self.state
        return {"name": self.name, "image": self.spec.get("image", ""), "imageID": "", "ready": running,
                "started": running, "restartCount": 0, "state": self.state, "lastState": {},
                **({"containerID": f"simulated://{self.name}"} if self.started else {})}

    def start(self) -> None:
        self.started = True
        self.process = True  # what `report` reads as "started"
        self.state = {"running": {"startedAt": now()}}

    def end(self, code: int, message: str = "") -> None:
        started = (self.state.get("running") or {}).get("startedAt") or now()
        self.state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                     **({"message": message} if message else {}),
                                     "startedAt": started, "finishedAt": now(), "containerID": f"simulated://{self.name}"}}


class SimulatedPodWorker(PodWorker):
    """`PodWorker`'s reporting and deletion, with the schedule instead of processes."""

    def __init__(self, kubelet: KubeletHandle, pod: dict[str, Any], workload: Workload = PLAIN):
        super().__init__(kubelet, pod)
        self.workload = workload
        self.init_containers = [SimulatedContainer(c) for c in pod["spec"].get("initContainers") or []]
        self.containers = [SimulatedContainer(c) for c in pod["spec"]["containers"]]

    async def run(self) -> None:
        try:
            await self._simulate()
        finally:
            if self.stopping:
                await self.kubelet.finish_deletion(self)

    async def _sleep_until(self, moment: float) -> bool:
        """False when the pod is stopped first."""
        delay = moment - asyncio.get_running_loop().time()
        if delay <= 0:
            return not self.stopping
        try:
            await asyncio.wait_for(self.stop_requested.wait(), delay)
            return False
        except asyncio.TimeoutError:
            return not self.stopping

    async def _simulate(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            schedule = schedule_of(self.pod, self.workload.schedule_defaults(self.pod))
        except ScheduleError as error:
            message = f"simulated pod: bad schedule ({ANNOTATION} / {ENV}): {error}"
            await self.kubelet.events.record(self.pod, WARNING, "Failed", message)
            for container in self.containers:
                container.end(128, message)
            self.phase = POD_FAILED
            await self.report()
            return
        begin = loop.time()
        if schedule.start_seconds > 0:
            await self.report()  # Pending, ContainerCreating
            if not await self._sleep_until(begin + schedule.start_seconds):
                return await self._stopped()
        for init in self.init_containers:
            init.start()
            init.end(0)
        for container in self.containers:  # the log exists before the pod is reported Running
            path = logs.container_log_path(self.kubelet.log_root, self.pod, container.name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
            container.start()
        self.phase = "Running"
        await self.report()
        started = loop.time()
        log_path = logs.container_log_path(self.kubelet.log_root, self.pod, self.containers[0].name)
        with log_path.open("a", encoding="utf-8") as log:
            for offset, line in self.workload.log_lines(schedule, self.pod):
                if not await self._sleep_until(started + offset):
                    return await self._stopped()
                log.write(logs.format_line(line))
                log.flush()
        if not await self._sleep_until(started + schedule.run_seconds):
            return await self._stopped()
        code = schedule.final_exit_code
        for container in self.containers:
            container.end(code)
        self.phase = POD_SUCCEEDED if code == 0 else POD_FAILED
        await self.report()

    async def _stopped(self) -> None:
        for container in self.containers:
            if container.started:  # one never started stays waiting, as on a node
                container.end(STOPPED_EXIT_CODE)
        self.phase = POD_FAILED
        if not self.kubelet.shutting_down:
            await self.report()

    async def stop(self, grace: float) -> None:
        self.stopping = True
        self.stop_requested.set()

    @property
    def running_pids(self) -> list[int]:
        return []
