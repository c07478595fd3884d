"""A shipped function's Accelerate world against the job's (pets_trainer.world): when the runtime tells
Accelerate to use the CPU, and how a differing world is told apart and caught while the function runs."""
from __future__ import annotations

import threading

import pytest

from pets_trainer.world import World, WorldMismatch, WorldWatch, job_world, mismatch, use_cpu_without_accelerator


def test_no_device_means_accelerate_is_told_to_use_the_cpu():
    environ = {}
    assert use_cpu_without_accelerator(environ, lambda: False) and environ == {"ACCELERATE_USE_CPU": "true"}
    gpu = {}
    assert not use_cpu_without_accelerator(gpu, lambda: True) and gpu == {}, "GPU nodes: unchanged"
    chosen = {"ACCELERATE_USE_CPU": "false"}
    assert not use_cpu_without_accelerator(chosen, lambda: False) and chosen == {"ACCELERATE_USE_CPU": "false"}


def test_the_job_world_is_the_launcher_s():
    assert job_world({"WORLD_SIZE": "4", "RANK": "3"}) == World(4, 3)
    assert job_world({}) == World(1, 0)
    with pytest.raises(WorldMismatch, match="WORLD_SIZE='four'"):
        job_world({"WORLD_SIZE": "four"})


def test_a_differing_world_is_named_in_one_line():
    assert mismatch(World(2, 1), World(2, 1)) is None
    error = mismatch(World(2, 1), World(1, 0))
    text = str(error)
    assert text.startswith("WorldMismatch: Accelerate sees 1 process(es) (index 0), but the job's world is 2 "
                           "processes (this one rank 1)"), text
    assert "\n" not in text and len(text) <= 400, "the operator keeps 400 characters of a cause"
    assert mismatch(World(2, 1), World(2, 0)) is not None, "the same size, another rank"


def test_the_watch_reports_once_as_soon_as_accelerate_has_a_world():
    seen = [None, None, World(1, 0)]
    reported = []
    done = threading.Event()

    def on_mismatch(error):
        reported.append(error)
        done.set()

    watch = WorldWatch(World(2, 1), on_mismatch, interval=0.01, seen=lambda: seen.pop(0) if len(seen) > 1 else seen[0])
    watch.start()
    assert done.wait(5)
    assert len(reported) == 1 and "Accelerate sees 1 process(es)" in str(reported[0])
    assert watch.finish() is not None, "still different at the end"


def test_the_watch_is_quiet_for_the_job_s_world_and_without_accelerate():
    for seen in (World(2, 1), None):
        reported = []
        watch = WorldWatch(World(2, 1), reported.append, interval=0.01, seen=lambda: seen).start()
        assert watch.finish() is None and reported == []
