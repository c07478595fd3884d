"""The job's world (WORLD_SIZE and RANK, set by the launcher) and the world Accelerate sees in a shipped function.

Accelerate forms a group of several processes only on a device with a distributed backend (CUDA: nccl)
or when told it runs on the CPU (`Accelerator(cpu=True)`, or ACCELERATE_USE_CPU). On a node without
a GPU a plain `Accelerator()` would be DistributedType.NO with one process: each process would train
alone, `gather` would be a no-op. The built-in recipe passes `cpu=True`; a shipped function is the
user's unmodified code, so the function runtime sets ACCELERATE_USE_CPU=true there instead
(`use_cpu_without_accelerator`), and fails the run if Accelerate's world still differs from the
job's (`mismatch`, `WorldWatch`).
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass

from .errors import TrainerError

USE_CPU_ENV = "ACCELERATE_USE_CPU"


@dataclass(frozen=True)
class World:
    size: int
    rank: int


class WorldMismatch(TrainerError):
    """Accelerate's processes are not the job's: the run would train several independent models."""

    reason = "WorldMismatch"

    def __init__(self, detail: str):
        super().__init__(f"{self.reason}: {detail}")


def device_accelerator_available() -> bool:
    import torch

    if hasattr(torch, "accelerator"):
        return torch.accelerator.is_available()
    return torch.cuda.is_available()


def use_cpu_without_accelerator(environ: MutableMapping[str, str], device_available: Callable[[], bool]) -> bool:
    """Set ACCELERATE_USE_CPU=true when there is no accelerator device and nobody set it; whether it was set."""
    if environ.get(USE_CPU_ENV, "") != "" or device_available():
        return False
    environ[USE_CPU_ENV] = "true"
    return True


def job_world(environ: Mapping[str, str]) -> World:
    """The world the launcher (torchrun) gave this process; one process when it gave none."""
    try:
        return World(size=int(environ.get("WORLD_SIZE") or 1), rank=int(environ.get("RANK") or 0))
    except ValueError:
        raise WorldMismatch(f"WORLD_SIZE={environ.get('WORLD_SIZE')!r} and RANK={environ.get('RANK')!r} "
                            "must be integers") from None


def mismatch(job: World, seen: World) -> WorldMismatch | None:
    """None when Accelerate sees the job's world, else the error saying how it differs and why it matters."""
    if seen == job:
        return None
    return WorldMismatch(
        f"Accelerate sees {seen.size} process(es) (index {seen.rank}), but the job's world is {job.size} processes "
        f"(this one rank {job.rank}): they would train apart (no gradient sync, gather a no-op). Without a GPU, "
        f"Accelerate joins them only on the CPU: leave {USE_CPU_ENV} unset (the trainer then sets it) or true, "
        f"or use Accelerator(cpu=True)")


def accelerate_world() -> World | None:
    """The world of the Accelerate state this process made (Accelerator(), PartialState()), None before one exists.

    Reads what is already imported; imports nothing (this runs beside the user's code)."""
    state = sys.modules.get("accelerate.state")
    shared = getattr(getattr(state, "PartialState", None), "_shared_state", None)
    if not shared or "num_processes" not in shared or "process_index" not in shared:
        return None
    return World(size=int(shared["num_processes"]), rank=int(shared["process_index"]))


class WorldWatch:
    """Checks Accelerate's world against the job's as soon as the function has made its Accelerator (a
    background thread polls, since the function's code cannot be changed), and once more at the end."""

    def __init__(self, job: World, on_mismatch: Callable[[WorldMismatch], None], interval: float = 0.2,
                 seen: Callable[[], World | None] = accelerate_world):
        self.job = job
        self.on_mismatch = on_mismatch
        self.interval = interval
        self.seen = seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="pets-world-watch", daemon=True)

    def start(self) -> WorldWatch:
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.is_set():
            seen = self.seen()
            if seen is not None:
                error = mismatch(self.job, seen)
                if error is not None:
                    self.on_mismatch(error)
                return
            self._stop.wait(self.interval)

    def finish(self) -> WorldMismatch | None:
        """Stop watching; the mismatch, if the function's Accelerate state (still there) has one."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        seen = self.seen()
        return mismatch(self.job, seen) if seen is not None else None
