"""Fixtures for the trainer tests: generated data sets, free ports, and trainer processes that never outlive a test."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from pets_trainer.synthetic import generate_synthetic_pets

PETS_TRAIN = str(Path(sys.executable).parent / "pets-train")

# Small enough for 2 CPU cores, still a learning problem: 4 classes, chance is 25%.
TINY_TRAINING_ENV = {
    "MODEL": "resnet10t",
    "IMAGE_SIZE": "32",
    "BATCH_SIZE": "8",
    "NUM_WORKERS": "1",
    "SEED": "7",
}
SYNTHETIC_ENV = {"SYNTHETIC_CLASSES": "4", "SYNTHETIC_IMAGES_PER_CLASS": "24", "SYNTHETIC_IMAGE_SIZE": "32"}


@pytest.fixture
def host():
    """A local HTTP host standing in for a data set host (tests/support/http_hosts.py)."""
    from http_hosts import FileHost

    server = FileHost()
    yield server
    server.close()


@pytest.fixture(scope="session")
def pets_dir(tmp_path_factory) -> Path:
    """A learnable synthetic set shared by the in-process training tests (do not modify)."""
    root = tmp_path_factory.mktemp("pets")
    generate_synthetic_pets(root, classes=4, images_per_class=24, image_size=32, seed=7)
    return root


@pytest.fixture
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


POD_KEYS = {"MASTER_ADDR", "MASTER_PORT", "NUM_MACHINES", "MACHINE_RANK", "NPROC_PER_NODE", "WORLD_SIZE",
            "JOB_COMPLETION_INDEX", "RANK", "LOCAL_RANK", "DATA_DIR", "CHECKPOINT_DIR", "OMP_NUM_THREADS",
            "JOB_UID", "JOB_NAME", "JOB_NAMESPACE", "RESUME_FROM"}


def _trainer_env(tiny: bool = True, synthetic: bool = False, **values: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in POD_KEYS and not key.startswith("SYNTHETIC_")}
    if tiny:
        env.update(TINY_TRAINING_ENV)
    if synthetic:
        env.update(SYNTHETIC_ENV)
    env.update(values)
    return env


@pytest.fixture
def trainer_env(tmp_path):
    """`trainer_env(tiny=True, synthetic=False, **VARS)`: this environment minus anything a pod sets,
    plus the tiny training settings, the synthetic-data variables, a TMPDIR of the test's own (a
    killed trainer leaves its temporary image cache there, not in /tmp), and VARS."""
    private_tmp = tmp_path / "tmpdir"
    private_tmp.mkdir()

    def make(tiny: bool = True, synthetic: bool = False, **values: str) -> dict[str, str]:
        return _trainer_env(tiny, synthetic, **{"TMPDIR": str(private_tmp), **values})

    return make


class TrainerProcesses:
    """Starts `pets-train` processes in their own process groups; kills what is left at teardown."""

    def __init__(self):
        self.started: list[subprocess.Popen] = []

    def start(self, env: dict[str, str], *args: str) -> subprocess.Popen:
        process = subprocess.Popen(
            [PETS_TRAIN, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )
        self.started.append(process)
        return process

    def run(self, env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        process = self.start(env, *args)
        stdout, stderr = process.communicate(timeout=timeout)
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

    @staticmethod
    def kill_group(process: subprocess.Popen) -> None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=30)

    def kill_all(self) -> None:
        for process in self.started:
            self.kill_group(process)
            for stream in (process.stdout, process.stderr):
                if stream:
                    stream.close()


@pytest.fixture
def trainer_processes():
    processes = TrainerProcesses()
    yield processes
    processes.kill_all()
