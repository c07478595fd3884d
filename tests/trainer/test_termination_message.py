"""`pets-train` and the worker write their one-line error into the container's termination message file."""
from __future__ import annotations

import json
import subprocess
import sys

from pets_api import contract
from pets_trainer import worker
from pets_trainer.errors import TERMINATION_MESSAGE_ENV, ConfigError, report_error, write_termination_message


def run_pets_train(trainer_env, env, *args):
    return subprocess.run([sys.executable, "-m", "pets_trainer.launch", *args], env=trainer_env(**env),
                          capture_output=True, text=True, timeout=60)


def test_the_variable_is_the_contracts():
    entry = contract.BY_ENV[TERMINATION_MESSAGE_ENV]
    assert entry.kind == contract.DERIVED and entry.option == "termination_message_path"


def test_only_an_existing_file_is_written(tmp_path):
    message_file = tmp_path / "termination-log"
    assert not write_termination_message("x", environ={TERMINATION_MESSAGE_ENV: str(message_file)})
    assert not message_file.exists()  # outside a container: no stray file
    message_file.touch()
    assert write_termination_message("model 'resnet5' is not a timm model\n",
                                     environ={TERMINATION_MESSAGE_ENV: str(message_file)})
    assert message_file.read_text() == "model 'resnet5' is not a timm model"
    assert not write_termination_message("x", environ={})


def test_a_long_message_is_cut_to_what_kubernetes_keeps(tmp_path):
    message_file = tmp_path / "termination-log"
    message_file.touch()
    write_termination_message("é" * 5000, str(message_file))
    assert len(message_file.read_bytes()) <= 4096


def test_report_error_prints_one_line_and_writes_the_message(tmp_path, capsys):
    message_file = tmp_path / "termination-log"
    message_file.touch()
    assert report_error(ConfigError("DATA_DIR is not set"), str(message_file)) == 2
    assert capsys.readouterr().err == "error: DATA_DIR is not set\n"
    assert message_file.read_text() == "DATA_DIR is not set"


def test_pets_train_writes_its_error_from_the_environment(trainer_env, tmp_path):
    message_file = tmp_path / "termination-log"
    message_file.touch()
    result = run_pets_train(trainer_env, {"DATA_DIR": str(tmp_path / "missing"),
                                          TERMINATION_MESSAGE_ENV: str(message_file)})
    assert result.returncode == 2 and result.stderr.startswith("error: ")
    assert message_file.read_text() == result.stderr.removeprefix("error: ").strip()
    assert "does not exist" in message_file.read_text()


def test_pets_train_takes_the_path_as_a_flag_too(trainer_env, tmp_path):
    message_file = tmp_path / "termination-log"
    message_file.touch()
    result = run_pets_train(trainer_env, {"BATCH_SIZE": "-1", "DATA_DIR": str(tmp_path)},
                            "--termination-message-path", str(message_file))
    assert result.returncode == 2
    assert "batch_size must be an integer >= 1, got -1" in message_file.read_text()


def test_the_worker_writes_its_error(tmp_path, monkeypatch, capsys):
    message_file = tmp_path / "termination-log"
    message_file.touch()
    monkeypatch.setenv(TERMINATION_MESSAGE_ENV, str(message_file))
    assert worker.main(["--config", json.dumps({"epochs": 0})]) == 2
    assert "epochs must be an integer >= 1, got 0" in message_file.read_text()
    assert capsys.readouterr().err.startswith("error: epochs must be")
