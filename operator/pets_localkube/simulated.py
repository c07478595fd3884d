"""Simulated pods: the kubelet moves them Pending -> Running -> Succeeded/Failed on a schedule, no process.

For load tests of the operator (`benchmarks/operator_scale.py`), as kwok does for Kubernetes: a
simulated pod costs a few timers instead of a shim and a Python process, and its log is written on a
schedule the pod itself carries, into the same log file a real container's output goes to, so the
API server's `/log` (`follow=true` included) serves it unchanged.

A pod is simulated when the kubelet runs in simulate mode (`pets-operator local up --simulate`,
`LocalCluster(simulate=True)`), or when the pod asks for it, so real and simulated pods mix in one
cluster: the annotation `simulate.pets-localkube.dev/schedule`, or the first container's environment
variable `PETS_SIMULATE` (what a PetsTrainingJob's `spec.env` reaches), holding a JSON object:

    {"epochSeconds": 5, "epochs": 10, "startSeconds": 0.5, "accuracy": [0.31, 0.52, ...],
     "exitCode": 0, "failAfterEpoch": null}

every key optional: `epochSeconds` (1) between epoch lines, `epochs` (the pod's `EPOCHS`, else 1),
`startSeconds` (0) Pending before Running, `accuracy` per epoch (a list, its last value repeated; by
default a rising curve), `exitCode` (0) at the end, `failAfterEpoch` (none) ends the container after
that epoch with `exitCode` (1 when it is 0). The node's rank 0 (`MACHINE_RANK`, `JOB_COMPLETION_INDEX`
or the completion-index annotation) prints the trainer's metric lines (`pets_api.metric_lines`):
one epoch line per epoch, then the done line; every rank prints one text line at its start.

Not simulated: volumes (nothing is mounted, so no FailedMount), restarts (`restartPolicy` other than
Never ends the pod as if it were Never), the `Created`/`Started` Events (kwok posts none either).
"""
from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from pets_api import metric_lines
from pets_api.k8s_names import ANNOTATION_COMPLETION_INDEX

from . import logs
from .events import WARNING
from .kubelet import PodWorker
from .storage import POD_FAILED, POD_SUCCEEDED, now

if TYPE_CHECKING:
    from .kubelet import Kubelet

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


def _literal_env(pod: Mapping[str, Any]) -> dict[str, str]:
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        return {}
    return {e["name"]: str(e["value"]) for e in containers[0].get("env") or [] if "value" in e and "name" in e}


def requested(pod: Mapping[str, Any]) -> bool:
    """Whether the pod asks to be simulated (annotation or environment)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return ANNOTATION in annotations or ENV in _literal_env(pod)


def rank_of(pod: Mapping[str, Any]) -> int:
    env = _literal_env(pod)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    for text in (env.get("MACHINE_RANK"), env.get("JOB_COMPLETION_INDEX"), annotations.get(ANNOTATION_COMPLETION_INDEX)):
        if text is not None and text.strip().isdigit():
            return int(text)
    return 0


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


def parse_schedule(text: str | None, default_epochs: int = 1, defaults: Mapping[str, Any] | None = None) -> Schedule:
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
    return Schedule(epoch_seconds=_number(raw, "epochSeconds", 1.0), epochs=_integer(raw, "epochs", default_epochs, 0),
                    start_seconds=_number(raw, "startSeconds", 0.0), accuracy=tuple(float(a) for a in accuracy),
                    exit_code=exit_code, fail_after_epoch=_integer(raw, "failAfterEpoch", None, 0))


def schedule_of(pod: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> Schedule:
    """The pod's schedule: its annotation, else its `PETS_SIMULATE`, else the defaults; epochs default to `EPOCHS`."""
    env = _literal_env(pod)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    epochs_text = env.get("EPOCHS", "")
    default_epochs = int(epochs_text) if epochs_text.strip().isdigit() else 1
    return parse_schedule(annotations.get(ANNOTATION, env.get(ENV)), default_epochs, defaults)


def log_plan(schedule: Schedule, rank: int, pod_name: str = "") -> list[tuple[float, str]]:
    """(seconds after Running, line) for every line the pod prints, in order."""
    plan = [(0.0, f"simulated pod {pod_name} rank {rank}: {schedule.epochs} epochs every {schedule.epoch_seconds:g}s")]
    if rank != 0:
        return plan
    for epoch in range(schedule.last_epoch + 1):
        event = metric_lines.epoch_event(epoch, schedule.accuracy_of(epoch), round(1.0 / (epoch + 1), 4),
                                         schedule.epoch_seconds)
        plan.append(((epoch + 1) * schedule.epoch_seconds, metric_lines.format_line(event)))
    if schedule.final_exit_code == 0:
        accuracies = [schedule.accuracy_of(e) for e in range(schedule.epochs)]
        done = metric_lines.done_event(schedule.epochs, accuracies[-1] if accuracies else None,
                                       max(accuracies) if accuracies else None)
        plan.append((schedule.run_seconds, metric_lines.format_line(done)))
    else:
        plan.append((schedule.run_seconds, f"simulated failure: exit code {schedule.final_exit_code}"))
    return plan


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

    def __init__(self, kubelet: "Kubelet", pod: dict[str, Any], defaults: Mapping[str, Any] | None = None):
        """`defaults`: schedule keys for pods whose own schedule leaves them out (the kubelet's)."""
        super().__init__(kubelet, pod)
        self.defaults = defaults
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
            schedule = schedule_of(self.pod, self.defaults)
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
            for offset, line in log_plan(schedule, rank_of(self.pod), self.pod["metadata"]["name"]):
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
