"""The no-cluster demo: the README's `make demo` runs `pets-operator demo`."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from pets_localkube import demo


def test_overrides_set_typed_values_under_spec():
    job = {"spec": {"epochs": 4, "data": {"synthetic": {"classes": 4}}}}
    demo.apply_overrides(job, ["epochs=1", "data.synthetic.imagesPerClass=8", "mixedPrecision=no", "model=resnet18d"])
    assert job["spec"] == {"epochs": 1, "model": "resnet18d", "mixedPrecision": "no",
                           "data": {"synthetic": {"classes": 4, "imagesPerClass": 8}}}


def test_an_override_without_a_value_is_refused():
    with pytest.raises(SystemExit, match="PATH=VALUE"):
        demo.apply_overrides({"spec": {}}, ["epochs"])


def test_the_defaults_are_the_packaged_sample_job_and_crd():
    """From the package (importlib.resources), so an installed wheel finds them too; --job/--crd override."""
    from pets_api import packaged

    args = demo.parse_args([])
    assert args.job is None and args.crd is None
    job = demo.load_single(demo.job_text(None), "the sample job")
    assert job["kind"] == "PetsTrainingJob" and job["metadata"]["name"] == "pets-demo"
    assert demo.job_text(None) == packaged.sample_job_text()


def test_missing_job_or_crd_files_are_clear_errors(tmp_path):
    with pytest.raises(SystemExit, match="cannot read .*nope.yaml"):
        demo.main(["--job", str(tmp_path / "nope.yaml"), "--workdir", str(tmp_path)])
    with pytest.raises(SystemExit, match="CRD manifest .*nope.yaml does not exist"):
        demo.main(["--crd", str(tmp_path / "nope.yaml"), "--workdir", str(tmp_path)])


def test_printer_shows_each_epoch_once_and_a_row_per_change():
    out = io.StringIO()
    printer = demo.StatusPrinter(out=out)
    job = {"metadata": {"name": "j"}, "spec": {"numNodes": 2, "epochs": 2},
           "status": {"phase": "Running", "workers": {"ready": 2}}}
    printer.update(job)
    printer.update(job)  # nothing new: nothing printed
    job["status"].update(epochs=[{"epoch": 0, "accuracy": 0.5, "trainLoss": 1.2}], currentEpoch=1, accuracy=0.5)
    printer.update(job)
    printer.update(job)
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:3] == ["NAME", "PHASE", "NODES"]
    assert sum("epoch 1/2" in line for line in lines) == 1
    assert "accuracy 0.5000" in out.getvalue() and "train_loss 1.200" in out.getvalue()
    rows = [line for line in lines[1:] if line.startswith("j ")]
    assert [row.split()[1] for row in rows] == ["Running", "Running"]
    assert rows[-1].split()[4:6] == ["1", "0.5000"]


@pytest.mark.slow
def test_demo_runs_the_sample_job_to_succeeded_end_to_end(tmp_path: Path):
    """The real thing, with a smaller setting: local cluster, operator process, two trainer pods."""
    command = [sys.executable, "-m", "pets_operator", "demo", "--workdir", str(tmp_path), "--timeout", "420",
               "--set", "epochs=2", "--set", "data.synthetic.imagesPerClass=12"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=480)
    assert result.returncode == 0, f"demo failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    out = result.stdout
    assert "Applied PetsTrainingJob default/pets-demo: 2 nodes x 1 processes" in out
    assert "epoch 1/2" in out and "epoch 2/2" in out
    final = yaml.safe_load(out.split("Final status (kubectl get ptj pets-demo -o yaml):", 1)[1].split("\nConditions:", 1)[0])
    status = final["status"]
    assert status["phase"] == "Succeeded"
    assert [e["epoch"] for e in status["epochs"]] == [0, 1]
    assert status["workers"]["succeeded"] == 2
    assert 0 <= status["bestAccuracy"] <= 1 and status["accuracy"] == status["epochs"][-1]["accuracy"]
    assert "Succeeded=True" in out
    # Both pods really ran the trainer: their logs are in the workdir, rank 0's with the metric lines.
    logs = {p.parent.name.split("_")[1]: p.read_text() for p in (tmp_path / "logs").glob("*/*.log")}
    assert set(logs) == {"pets-demo-0", "pets-demo-1"}
    assert '"event": "done"' in logs["pets-demo-0"]
    # Nothing the demo started is left running.
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert not leftovers
