"""Real training on generated images on CPU: in-process, through the notebook launcher, as two
rendezvousing `pets-train` processes, and killed after an epoch then resumed from its checkpoint."""
from __future__ import annotations

import json
import shutil
import tempfile
import time

import pytest
import torch
from accelerate.state import AcceleratorState

from pets_trainer import train
from pets_trainer.errors import ConfigError, DataError
from pets_trainer.metrics import parse_metric_lines
from pets_trainer.notebook import launch_in_notebook
from pets_trainer.train import supported_mixed_precision, training_loop

pytestmark = pytest.mark.slow

CHANCE = 0.25  # 4 classes
TINY = dict(model="resnet10t", image_size=32, batch_size=8, num_workers=0, seed=7)


@pytest.fixture(autouse=True)
def fresh_accelerate_state():
    AcceleratorState._reset_state(True)
    yield
    AcceleratorState._reset_state(True)


def epoch_events(events):
    return [event for event in events if event["event"] == "epoch"]


def test_training_loop_learns_and_prints_metric_lines(pets_dir, capsys):
    result = training_loop(data_dir=str(pets_dir), epochs=3, **TINY)
    captured_out = capsys.readouterr().out
    events = parse_metric_lines(captured_out)
    epochs = epoch_events(events)
    assert [event["epoch"] for event in epochs] == [0, 1, 2]
    assert all(set(event) == {"event", "epoch", "accuracy", "train_loss", "seconds", "train_seconds", "eval_seconds"} for event in epochs)
    assert all(event["train_seconds"] + event["eval_seconds"] == pytest.approx(event["seconds"], abs=0.01) for event in epochs)
    assert events[-1] == {"event": "done", "epochs": 3, "accuracy": epochs[-1]["accuracy"],
                          "best_accuracy": max(event["accuracy"] for event in epochs)}
    assert [entry.accuracy for entry in result.history] == [event["accuracy"] for event in epochs]
    assert result.best_accuracy >= 2 * CHANCE
    # 96 images split 76/20: each accuracy counts the 20 eval images exactly once.
    assert "96 images, 4 classes, 76 train / 20 eval" in captured_out
    assert all(round(event["accuracy"] * 20, 4) == round(event["accuracy"] * 20) for event in epochs)


@pytest.mark.parametrize(("requested", "native_bf16", "used"), [
    ("bf16", True, "bf16"), ("bf16", False, "no"), ("fp16", True, "no"), ("fp16", False, "no"), ("no", True, "no"),
])
def test_on_a_cpu_only_bf16_is_used_and_only_where_the_cpu_computes_in_it(requested, native_bf16, used):
    assert supported_mixed_precision(requested, cpu=True, native_bf16=lambda: native_bf16) == used


@pytest.mark.parametrize("native_bf16", [True, False])
def test_bf16_on_a_cpu_runs_the_convolutions_in_bf16_only_where_the_cpu_has_it(pets_dir, capsys, monkeypatch, native_bf16):
    monkeypatch.setattr(train, "cpu_has_native_bf16", lambda: native_bf16)
    dtypes = set()
    convolve = torch.nn.Conv2d.forward
    monkeypatch.setattr(torch.nn.Conv2d, "forward", lambda conv, x: _noted(dtypes, convolve(conv, x)))
    result = training_loop(data_dir=str(pets_dir), epochs=1, mixed_precision="bf16", **TINY)
    fell_back = "mixed precision 'bf16' is not available on cpu; using 'no'" in capsys.readouterr().err
    assert (dtypes, fell_back) == (({torch.bfloat16}, False) if native_bf16 else ({torch.float32}, True))
    assert len(result.history) == 1


def _noted(dtypes: set, output: torch.Tensor) -> torch.Tensor:
    dtypes.add(output.dtype)
    return output


def test_fp16_on_a_cpu_falls_back_to_full_precision(pets_dir, capsys):
    result = training_loop(data_dir=str(pets_dir), epochs=1, mixed_precision="fp16", **TINY)
    captured = capsys.readouterr()
    assert "mixed precision 'fp16' is not available on cpu; using 'no'" in captured.err
    assert len(result.history) == 1


def test_unusable_data_raises_a_data_error_inside_the_training_function(tmp_path):
    with pytest.raises(DataError, match="is empty"):
        training_loop(data_dir=str(tmp_path), epochs=1, **TINY)


def test_notebook_launcher_runs_the_same_function_in_two_processes(pets_dir, capfd, free_port):
    launch_in_notebook(num_processes=2, use_port=free_port, data_dir=str(pets_dir), epochs=2, **TINY)
    out = capfd.readouterr().out
    assert "2 process(es) on cpu" in out
    events = parse_metric_lines(out)
    assert [event["epoch"] for event in epoch_events(events)] == [0, 1]  # rank 0 only: no duplicates
    assert [event["event"] for event in events].count("done") == 1


def test_two_pets_train_processes_rendezvous_like_two_pods(tmp_path, trainer_processes, trainer_env, free_port):
    common = dict(
        synthetic=True, DATA_DIR=str(tmp_path / "data"), EPOCHS="3", MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port), NUM_MACHINES="2", NPROC_PER_NODE="1", WORLD_SIZE="2",
        OMP_NUM_THREADS="1",  # two processes on two cores
        SYNTHETIC_IMAGES_PER_CLASS="26",  # 104 images: 21 eval, uneven over two processes
    )
    pods = [trainer_processes.start(trainer_env(**common, MACHINE_RANK=str(rank))) for rank in (0, 1)]
    outputs = [pod.communicate(timeout=300) for pod in pods]
    for pod, (_stdout, stderr) in zip(pods, outputs):
        assert pod.returncode == 0, stderr[-3000:]
    rank0_events = parse_metric_lines(outputs[0][0])
    epochs = epoch_events(rank0_events)
    assert [event["epoch"] for event in epochs] == [0, 1, 2]
    assert rank0_events[-1]["event"] == "done"
    assert "2 process(es) on cpu" in outputs[0][0]
    assert max(event["accuracy"] for event in epochs) >= 2 * CHANCE
    # Counted over exactly 21 images: the sample Accelerate repeats to even out the last batch
    # is not counted (k/21 can only equal m/22 at 0 and 1).
    assert "104 images, 4 classes, 83 train / 21 eval" in outputs[0][0]
    assert all(round(event["accuracy"] * 21, 4) == round(event["accuracy"] * 21) for event in epochs)
    assert any(0 < event["accuracy"] < 1 for event in epochs)
    assert parse_metric_lines(outputs[1][0]) == []  # metric lines come from global rank 0 only


def read_until_first_epoch(process, deadline_s: float) -> list[str]:
    lines = []
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if epoch_events(parse_metric_lines(line)):
            return lines
    raise AssertionError("no epoch line before the deadline:\n" + "".join(lines) + process.stderr.read()[-3000:])


def test_killed_run_resumes_from_the_last_finished_epoch(tmp_path, trainer_processes, trainer_env):
    env = trainer_env(synthetic=True, DATA_DIR=str(tmp_path / "data"), CHECKPOINT_DIR=str(tmp_path / "ckpt"),
                      EPOCHS="4", SYNTHETIC_IMAGES_PER_CLASS="40", NUM_WORKERS="0")
    first = trainer_processes.start(env)
    first_lines = read_until_first_epoch(first, deadline_s=240)
    trainer_processes.kill_group(first)
    killed_events = parse_metric_lines("".join(first_lines) + first.stdout.read())
    assert "done" not in [event["event"] for event in killed_events], "the run finished before it was killed"
    killed_epochs = epoch_events(killed_events)

    resumed = trainer_processes.run(env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    events = parse_metric_lines(resumed.stdout)
    epochs = epoch_events(events)
    assert [event["epoch"] for event in epochs] == [0, 1, 2, 3]
    replayed = [event for event in epochs if event.get("resumed")]
    assert len(replayed) >= len(killed_epochs) >= 1
    assert [event["epoch"] for event in replayed] == list(range(len(replayed)))
    for before, again in zip(killed_epochs, replayed):
        assert {**before, "resumed": True} == again  # the same figures, reported again
    assert not any(event.get("resumed") for event in epochs[len(replayed):])
    assert f"resumed from the checkpoint of epoch {len(replayed) - 1}" in resumed.stdout
    assert events[-1] == {"event": "done", "epochs": 4, "accuracy": epochs[-1]["accuracy"],
                          "best_accuracy": max(event["accuracy"] for event in epochs)}


def test_a_checkpoint_from_a_different_run_is_refused(pets_dir, tmp_path, capsys):
    checkpoints = tmp_path / "ckpt"
    training_loop(data_dir=str(pets_dir), epochs=3, checkpoint_dir=str(checkpoints), **TINY)
    assert sorted(path.name for path in checkpoints.iterdir()) == ["epoch-0001", "epoch-0002"]  # the last two
    AcceleratorState._reset_state(True)
    with pytest.raises(ConfigError, match=r"from a different run \(batch_size=8 there, 16 now\)"):
        training_loop(data_dir=str(pets_dir), epochs=3, checkpoint_dir=str(checkpoints), **{**TINY, "batch_size": 16})


def test_a_checkpoint_belongs_to_its_job_unless_another_takes_it_over(pets_dir, tmp_path, capsys):
    checkpoints = tmp_path / "ckpt"
    first = dict(job_uid="uid-a", job_name="first", job_namespace="ml")
    second = dict(job_uid="uid-b", job_name="second", job_namespace="ml")
    done = training_loop(data_dir=str(pets_dir), epochs=3, checkpoint_dir=str(checkpoints), **first, **TINY)
    AcceleratorState._reset_state(True)
    # The bug: a second job with the same settings on the finished job's checkpoint "resumed" it and trained nothing.
    with pytest.raises(ConfigError) as refused:
        training_loop(data_dir=str(pets_dir), epochs=3, checkpoint_dir=str(checkpoints), **second, **TINY)
    assert str(refused.value).startswith(
        f"CheckpointConflict: the checkpoint in {checkpoints} belongs to job ml/first (uid uid-a), "
        "not to this job ml/second (uid uid-b): set spec.checkpoint.resumeFrom: AnyJob")
    assert "\n" not in str(refused.value)
    # Taken over on purpose, from an interrupted state of the first job (its last epoch not saved):
    shutil.rmtree(checkpoints / "epoch-0002")
    capsys.readouterr()
    AcceleratorState._reset_state(True)
    taken = training_loop(data_dir=str(pets_dir), epochs=3, checkpoint_dir=str(checkpoints), resume_from="AnyJob",
                          **second, **TINY)
    out = capsys.readouterr().out
    assert f"taking over the checkpoint of job ml/first (uid uid-a) in {checkpoints}" in out
    assert [e["epoch"] for e in epoch_events(parse_metric_lines(out)) if e.get("resumed")] == [0, 1]
    assert taken.history[:2] == done.history[:2] and len(taken.history) == 3
    # What the second job saves is its own: it resumes from it as it would from any of its checkpoints.
    owner = json.loads((checkpoints / "epoch-0002" / "finished.json").read_text())["owner"]
    assert owner == {"uid": "uid-b", "name": "second", "namespace": "ml"}
    AcceleratorState._reset_state(True)
    again = training_loop(data_dir=str(pets_dir), epochs=3, checkpoint_dir=str(checkpoints), **second, **TINY)
    assert again.history == taken.history


def test_the_image_cache_changes_no_figure_and_goes_with_the_run(pets_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the run's own cache directory goes
    cached = training_loop(data_dir=str(pets_dir), epochs=2, **TINY)
    assert not list(tmp_path.glob("pets-image-cache-*")), "the run's temporary cache was left behind"
    AcceleratorState._reset_state(True)
    uncached = training_loop(data_dir=str(pets_dir), epochs=2, image_cache=False, **TINY)
    figures = [[(entry.accuracy, entry.train_loss) for entry in result.history] for result in (cached, uncached)]
    assert figures[0] == figures[1]


def test_a_given_image_cache_directory_is_filled_once_and_kept(pets_dir, tmp_path):
    cache_dir = tmp_path / "cache"
    training_loop(data_dir=str(pets_dir), epochs=2, image_cache_dir=str(cache_dir), **TINY)
    # One entry per image: train and eval images are different files, and epoch 2 only reads.
    assert len(list(cache_dir.glob("*.npy"))) == len(list(pets_dir.glob("*.jpg")))

