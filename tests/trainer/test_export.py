"""A trained model out (`model.safetensors`, `config.json`, `labels.json`) and in use (`predict`)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import timm
import torch
from accelerate.state import AcceleratorState

import pets_trainer
from pets_trainer.errors import ConfigError
from pets_trainer.export import load_model, save_model
from pets_trainer.synthetic import generate_synthetic_pets
from pets_trainer.train import training_loop

TINY = dict(model="resnet10t", image_size=32, batch_size=8, num_workers=0, seed=7)


def breed(path) -> str:
    return path.name.rsplit("_", 1)[0]


@pytest.mark.slow
def test_a_trained_model_is_saved_and_predicts_held_out_images_at_the_job_s_accuracy(pets_dir, tmp_path, capsys):
    AcceleratorState._reset_state(True)
    output = tmp_path / "model"
    result = training_loop(data_dir=str(pets_dir), epochs=3, output_dir=str(output), **TINY)
    AcceleratorState._reset_state(True)
    assert sorted(p.name for p in output.iterdir()) == ["config.json", "labels.json", "model.safetensors"]
    config = json.loads((output / "config.json").read_text())
    assert (config["model"], config["image_size"], config["accuracy"]) == ("resnet10t", 32, result.best_accuracy)
    assert json.loads((output / "labels.json").read_text()) == list(result.classes)
    # Images the job never saw: the same breeds drawn with another seed.
    held_out = generate_synthetic_pets(tmp_path / "held-out", classes=4, images_per_class=6, image_size=32, seed=99)
    predictions = pets_trainer.predict(output, held_out, top=2)
    assert all(len(ranked) == 2 and ranked[0][1] >= ranked[1][1] for ranked in predictions)
    right = sum(ranked[0][0] == breed(path) for path, ranked in zip(held_out, predictions)) / len(held_out)
    assert right >= result.best_accuracy - 0.25 and right > 0.5, (right, result.best_accuracy)
    # The command line prints the same.
    command = subprocess.run([sys.executable, "-m", "pets_trainer.launch", "predict", str(output), str(held_out[0])],
                             capture_output=True, text=True, timeout=120)
    assert command.returncode == 0, command.stderr
    line = json.loads(command.stdout)
    assert line["image"] == str(held_out[0]) and line["predictions"][0]["label"] == predictions[0][0][0]


def test_save_and_load_round_trip_the_weights(tmp_path):
    model = timm.create_model("resnet10t", pretrained=False, num_classes=3).to(memory_format=torch.channels_last)
    save_model(tmp_path, model, "resnet10t", 32, ["a", "b", "c"], epoch=0, accuracy=0.5)
    loaded, config, labels = load_model(tmp_path)
    assert labels == ["a", "b", "c"] and config["mean"] == list(model.pretrained_cfg["mean"])
    assert torch.equal(loaded.state_dict()["fc.weight"], model.state_dict()["fc.weight"])
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically: no temporary files left


def test_the_files_are_readable_by_other_uids_whatever_the_umask(tmp_path):
    import os
    import stat

    existing = tmp_path / "volume"
    existing.mkdir(mode=0o700)
    model = timm.create_model("resnet10t", pretrained=False, num_classes=2)
    previous = os.umask(0o077)
    try:
        output = save_model(existing / "runs" / "best", model, "resnet10t", 32, ["a", "b"])
        save_model(output, model, "resnet10t", 32, ["a", "b"])  # the next best epoch replaces them
    finally:
        os.umask(previous)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in output.iterdir()}
    assert modes == {"config.json": 0o644, "labels.json": 0o644, "model.safetensors": 0o644}
    assert stat.S_IMODE(output.stat().st_mode) == stat.S_IMODE(output.parent.stat().st_mode) == 0o755
    assert stat.S_IMODE(existing.stat().st_mode) == 0o700, "a directory it did not create is left alone"


def test_a_directory_without_a_model_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="holds no saved model"):
        load_model(tmp_path)


def run_predict(*args):
    return subprocess.run([sys.executable, "-m", "pets_trainer.launch", "predict", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # two Pythons that import torch and timm
def test_predict_reports_each_unreadable_image_and_goes_on(tmp_path):
    model = timm.create_model("resnet10t", pretrained=False, num_classes=2)
    output = save_model(tmp_path / "model", model, "resnet10t", 32, ["beagle", "pug"])
    first, second = generate_synthetic_pets(tmp_path / "images", classes=2, images_per_class=1, image_size=32, seed=3)
    corrupt = tmp_path / "corrupt.jpg"
    corrupt.write_bytes(b"\xff\xd8 not a jpeg")
    missing = tmp_path / "missing.jpg"

    result = run_predict(output, first, corrupt, missing, second)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["image"] for line in lines] == [str(first), str(corrupt), str(missing), str(second)], "in order"
    assert [("predictions" in line, "error" in line) for line in lines] == [(True, False), (False, True),
                                                                            (False, True), (True, False)]
    assert lines[1]["error"].startswith(f"cannot read image {corrupt}: cannot identify image file"), lines[1]
    assert lines[2]["error"].startswith(f"cannot read image {missing}: [Errno 2] No such file"), lines[2]
    assert result.stderr.splitlines() == [f"error: {lines[1]['error']}", f"error: {lines[2]['error']}"]

    nothing = run_predict(output, corrupt, missing)
    assert nothing.returncode == 2, "no image could be read"
    assert len(nothing.stdout.splitlines()) == 2 and len(nothing.stderr.splitlines()) == 2

    with pytest.raises(ConfigError, match=f"cannot read image {corrupt}"):  # the library call: a clear error
        pets_trainer.predict(output, [first, corrupt])
