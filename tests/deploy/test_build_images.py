"""hack/build_images.sh's options about the trainer's torch, now that the locks pin it (checked
before any docker call, so no engine is needed)."""
from __future__ import annotations

import subprocess

from hack import chart

SCRIPT = chart.REPO_ROOT / "hack" / "build_images.sh"


def build_images(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "DOCKER": "/bin/false"})


def test_torch_requirements_are_no_option_any_more():
    result = build_images("--torch", "torch>=2.1")
    assert result.returncode == 1
    assert "--torch is gone: the trainer's torch is pinned in requirements/trainer.lock" in result.stderr


def test_a_trainer_variant_without_its_lock_says_how_to_make_it():
    result = build_images("--trainer-variant", "cu999")
    assert result.returncode == 1
    assert "no requirements/trainer-cu999.lock: make locks LOCKS_ARGS='--torch-backend cu999'" in result.stderr


def test_an_unknown_trainer_variant_is_refused():
    result = build_images("--trainer-variant", "gpu")
    assert result.returncode == 1 and "--trainer-variant must be cpu, cuNNN" in result.stderr
