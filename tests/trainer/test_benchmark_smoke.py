"""The throughput benchmark runs end to end at its tiniest settings (a smoke test, not a timing)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "trainer_throughput.py"


@pytest.mark.slow
def test_tiny_benchmark_reports_baseline_trainer_and_ablation(tmp_path):
    report_file = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), "--tiny", "--no-scaling", "--json", str(report_file)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tutorial baseline" in done.stdout and "trainer (all speed choices)" in done.stdout
    report = json.loads(report_file.read_text())
    assert report["settings"]["model"] == "resnet10t"
    for run in (report["baseline"], report["trainer"], *report["ablation"]):
        assert run["train_seconds"] > 0 and run["eval_seconds"] > 0
        assert 0.0 <= run["accuracy"] <= 1.0
    assert [run["name"] for run in report["ablation"]] == [
        "no draft decode", "no persistent workers", "no channels_last", "no no_grad encoder"]
