"""A shipped function's plain `Accelerator()` sees the job's whole world on CPU nodes: two real `pets-train`
processes as two nodes on 127.0.0.1 (the pod contract's rendezvous environment) run a function that
all-reduces its rank. And when Accelerate's world differs from the job's, the runtime says so and fails."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pets_client.launcher import FUNCTION_KEY, build_payload

pytestmark = [pytest.mark.slow]

PETS_TRAIN = str(Path(sys.executable).parent / "pets-train")
# What the test's own environment may hold that a pod's would not.
POD_KEYS = ("MASTER_ADDR", "MASTER_PORT", "NUM_MACHINES", "MACHINE_RANK", "NPROC_PER_NODE", "WORLD_SIZE", "RANK",
            "LOCAL_RANK", "JOB_COMPLETION_INDEX", "ACCELERATE_USE_CPU", "FORCE_CPU", "FUNCTION_FILE", "DATA_DIR")


def sums_ranks():
    """The user's code, unmodified: a plain Accelerator(), no cpu=True."""
    import json

    import torch
    from accelerate import Accelerator

    accelerator = Accelerator()
    total = accelerator.reduce(torch.tensor([accelerator.process_index]), reduction="sum")
    print(json.dumps({"world": [int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])],
                      "accelerate": [accelerator.process_index, accelerator.num_processes],
                      "distributed_type": str(accelerator.distributed_type), "sum": int(total.item())}), flush=True)
    assert accelerator.num_processes == 2, f"Accelerate sees {accelerator.num_processes} process(es)"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_two_nodes(tmp_path, function, **extra_env):
    data, _ = build_payload(function)
    payload = tmp_path / FUNCTION_KEY
    payload.write_bytes(data)
    base = {key: value for key, value in os.environ.items() if key not in POD_KEYS}
    base.update(FUNCTION_FILE=str(payload), NUM_MACHINES="2", NPROC_PER_NODE="1", WORLD_SIZE="2",
                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1", **extra_env)
    processes, terminations = [], []
    for rank in range(2):
        termination = tmp_path / f"termination-log-{rank}"
        termination.write_text("")
        terminations.append(termination)
        processes.append(subprocess.Popen(
            [PETS_TRAIN], env={**base, "MACHINE_RANK": str(rank), "TERMINATION_MESSAGE_PATH": str(termination)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True))
    results = []
    try:
        for process in processes:
            stdout, stderr = process.communicate(timeout=240)
            results.append((process.returncode, stdout, stderr))
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, 9)
                process.wait(30)
    return results, [t.read_text() for t in terminations]


def test_a_plain_accelerator_in_a_shipped_function_sees_both_nodes(tmp_path):
    results, _ = run_two_nodes(tmp_path, sums_ranks)
    lines = []
    for returncode, stdout, stderr in results:
        assert returncode == 0, stdout + stderr[-3000:]
        lines += [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert sorted(line["world"] for line in lines) == [[0, 2], [1, 2]], lines
    for line in lines:
        assert line["accelerate"] == line["world"], line
        assert line["distributed_type"] == "DistributedType.MULTI_CPU", line
        assert line["sum"] == 0 + 1, "one world: the all-reduce saw both ranks"


def trains_long():
    import time

    from accelerate import Accelerator

    Accelerator()
    time.sleep(90)  # a long training: the run must stop before it ends
    print("trained", flush=True)


def test_an_accelerator_that_misses_the_world_fails_the_run_in_one_line(tmp_path):
    # The user (spec.env) asked Accelerate not to use the CPU on a machine without a GPU: it sees one process.
    results, terminations = run_two_nodes(tmp_path, trains_long, ACCELERATE_USE_CPU="false")
    for (returncode, stdout, stderr), termination in zip(results, terminations):
        assert returncode != 0 and "trained" not in stdout, stdout + stderr
        errors = [line for line in stderr.splitlines() if "error: WorldMismatch:" in line]
        assert errors, stderr[-3000:]
        assert "Accelerate sees 1 process(es) (index 0)" in errors[0] and "the job's world is 2 processes" in errors[0], errors
        assert "WorldMismatch:" in termination, termination
