"""The throughput benchmark runs end to end at its tiniest settings (a smoke test, not a timing)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pets_trainer.config import TrainConfig

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "trainer_throughput.py"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("trainer_throughput", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_each_ablation_turns_off_one_speed_switch_that_is_on_by_default():
    ablations = load_benchmark().ABLATIONS
    defaults = TrainConfig()
    for name, switches in ablations.items():
        [(field, value)] = switches.items()
        if field == "mixed_precision":  # the user's choice, not a switch: turned off against --mixed-precision
            assert value == "no" == defaults.mixed_precision, name
        else:
            assert getattr(defaults, field) is True and value is False, name


@pytest.mark.slow
def test_tiny_benchmark_reports_baseline_trainer_and_ablation(tmp_path):
    report_file = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), "--tiny", "--no-scaling", "--ablation", "no keep freed memory",
         "--json", str(report_file)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tutorial baseline" in done.stdout and "trainer (all speed choices)" in done.stdout
    report = json.loads(report_file.read_text())
    assert report["settings"]["model"] == "resnet10t"
    for run in (report["baseline"], report["trainer"], *report["ablation"]):
        assert len(run["train_seconds"]) == len(run["eval_seconds"]) == 1  # one epoch
        assert run["train_rate"] == run["last_train_rate"] == run["train_images_per_epoch"] / run["train_seconds"][0]
        assert run["train_rate"] > 0 and run["eval_rate"] > 0
        assert 0.0 <= run["accuracy"] <= 1.0
    assert [run["name"] for run in report["ablation"]] == ["no keep freed memory"]
    micro = report["micro"]
    assert "train image load (draft decode, from the image cache) ms/image" in micro
    assert "train step (channels_last, no_grad encoder, malloc keeps freed memory) ms/image" in micro
    assert "eval forward of 16 (contiguous, glibc default malloc) ms/image" in micro
    assert all(value > 0 for value in micro.values())


@pytest.mark.slow  # a Python that imports torch and timm
@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU, mixed precision is measured, not refused")
def test_mixed_precision_the_trainer_would_not_use_is_refused_with_the_reason():
    done = subprocess.run([sys.executable, str(BENCHMARK), "--tiny", "--mixed-precision", "fp16"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--mixed-precision fp16 needs a GPU or, for bf16, a CPU with AVX512-BF16 or AMX" in done.stderr
