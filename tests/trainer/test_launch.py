"""`pets-train`: environment and flags -> the `accelerate launch` command; bad input -> exit 2, one line."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pets_operator.builders import pod_env
from pets_operator.spec import with_defaults
from pets_trainer.config import TrainConfig
from pets_trainer.errors import ConfigError
from pets_trainer.launch import (
    LAUNCH_OPTIONS,
    TRAIN_OPTIONS,
    accelerate_command,
    build_parser,
    child_environment,
    make_plan,
    make_train_config,
    resolve_options,
)
from pets_trainer.synthetic import generate_synthetic_pets

# What the operator writes into pod 2 of a 3-node job (the env contract, through its own builder).
JOB_SPEC = {
    "numNodes": 3, "processesPerNode": 2, "masterPort": 29555, "mixedPrecision": "bf16", "seed": 9, "batchSize": 16,
    "epochs": 7, "maxLearningRate": 0.01, "model": "resnet18d", "numWorkers": 2, "imageSize": 128,
    "pretrained": True, "pretrainedWeights": "/weights/resnet18d.safetensors",
    "data": {"persistentVolumeClaim": {"claimName": "pets"}, "path": "images"}, "checkpoint": {},
}
POD_ENV = {
    **{item["name"]: item["value"]
       for item in pod_env("job", "default", 2, with_defaults(JOB_SPEC, "img"), uid="uid-9")},
    "OMP_NUM_THREADS": "3",
}


def plan_and_config(environ, argv=()):
    values = resolve_options(TRAIN_OPTIONS + LAUNCH_OPTIONS, build_parser().parse_args(list(argv)), environ)
    return make_plan(values), make_train_config(values)


def option_value(command, flag):
    return command[command.index(flag) + 1]


def test_pod_environment_becomes_a_multi_node_launch():
    plan, config = plan_and_config(POD_ENV)
    command = accelerate_command(plan, config, python="python")
    assert command[:3] == ["python", "-m", "pets_trainer.accelerate_launch"]
    assert "--multi_gpu" in command
    assert option_value(command, "--num_machines") == "3"
    assert option_value(command, "--machine_rank") == "2"
    assert option_value(command, "--main_process_ip") == "job-0.job-workers.default.svc"
    assert option_value(command, "--main_process_port") == "29555"
    assert option_value(command, "--num_processes") == "6"
    assert option_value(command, "--mixed_precision") == "bf16"
    assert option_value(command, "--num_cpu_threads_per_process") == "3"
    assert command[-4:-1] == ["-m", "pets_trainer.worker", "--config"]
    assert TrainConfig.from_json(command[-1]) == config == TrainConfig(
        data_dir="/data/images", model="resnet18d", pretrained=True,
        pretrained_weights="/weights/resnet18d.safetensors", mixed_precision="bf16", seed=9, batch_size=16,
        epochs=7, max_lr=0.01, num_workers=2, image_size=128, checkpoint_dir="/checkpoints",
        job_uid="uid-9", job_name="job", job_namespace="default", resume_from="SameJob",
    )


def test_no_rendezvous_environment_runs_single_node_single_process():
    plan, config = plan_and_config({"DATA_DIR": "/d"})
    command = accelerate_command(plan, config, python="python")
    assert "--multi_gpu" not in command and "--main_process_ip" not in command
    assert option_value(command, "--num_machines") == "1"
    assert option_value(command, "--num_processes") == "1"
    assert option_value(command, "--mixed_precision") == "no"
    assert config == TrainConfig(data_dir="/d")


def test_single_node_with_several_processes_rendezvouses_on_localhost():
    plan, config = plan_and_config({"DATA_DIR": "/d", "NUM_MACHINES": "1", "NPROC_PER_NODE": "2",
                                    "MASTER_ADDR": "job-0.job-workers.ns.svc"})
    command = accelerate_command(plan, config)
    assert "--multi_gpu" in command
    assert option_value(command, "--main_process_ip") == "127.0.0.1"
    assert option_value(command, "--num_processes") == "2"


def test_flags_override_the_environment():
    plan, config = plan_and_config(POD_ENV, ["--epochs", "2", "--machine-rank", "1", "--no-pretrained", "--model", "resnet10t"])
    assert (config.epochs, config.pretrained, config.model) == (2, False, "resnet10t")
    assert plan.machine_rank == 1


def test_job_completion_index_stands_in_for_machine_rank():
    env = {key: value for key, value in POD_ENV.items() if key != "MACHINE_RANK"}
    plan, _ = plan_and_config({**env, "JOB_COMPLETION_INDEX": "1"})
    assert plan.machine_rank == 1


def test_speed_switches_are_flags():
    _, config = plan_and_config({"DATA_DIR": "/d"}, [
        "--no-draft-decode", "--no-persistent-workers", "--no-channels-last", "--no-frozen-encoder-no-grad",
        "--no-image-cache", "--no-keep-freed-memory", "--no-low-priority-workers", "--pin-memory", "false", "--prefetch-factor", "4",
    ])
    assert (config.draft_decode, config.persistent_workers, config.channels_last, config.frozen_encoder_no_grad,
            config.image_cache, config.keep_freed_memory, config.low_priority_workers) == (False,) * 7
    assert (config.pin_memory, config.prefetch_factor) == ("false", 4)
    _, config = plan_and_config({"DATA_DIR": "/d", "IMAGE_CACHE_DIR": "/cache"})
    assert (config.image_cache, config.image_cache_dir) == (True, "/cache")


def test_synthetic_variables_ask_for_generation_with_crd_defaults():
    plan, _ = plan_and_config({"DATA_DIR": "/d", "SYNTHETIC_CLASSES": "5"})
    assert plan.synthetic == {"synthetic_classes": 5, "synthetic_images_per_class": 20, "synthetic_image_size": 64}
    plan, _ = plan_and_config({"DATA_DIR": "/d"})
    assert plan.synthetic is None


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"EPOCHS": "five"}, "EPOCHS='five': must be an integer"),
        ({"MAX_LR": "fast"}, "MAX_LR='fast': must be a number"),
        ({"PRETRAINED": "maybe"}, "PRETRAINED='maybe': must be true or false"),
        ({"MIXED_PRECISION": "fp8"}, "MIXED_PRECISION='fp8': must be one of no, fp16, bf16"),
        ({"EPOCHS": "0"}, "epochs must be an integer >= 1, got 0"),
        ({"NUM_MACHINES": "2", "MACHINE_RANK": "2", "MASTER_ADDR": "a"}, "MACHINE_RANK must be between 0 and NUM_MACHINES-1 (1), got 2"),
        ({"NUM_MACHINES": "2", "MACHINE_RANK": "0"}, "MASTER_ADDR must be set when NUM_MACHINES > 1"),
        ({"NUM_MACHINES": "2", "MASTER_ADDR": "a", "WORLD_SIZE": "3"}, "WORLD_SIZE=3 does not match NUM_MACHINES x NPROC_PER_NODE = 2 x 1"),
        ({"MASTER_PORT": "70000"}, "MASTER_PORT must be a TCP port"),
        ({"NPROC_PER_NODE": "0"}, "NPROC_PER_NODE must be >= 1"),
    ],
)
def test_bad_configuration_is_a_clear_error(environ, message):
    with pytest.raises(ConfigError) as raised:
        plan_and_config({"DATA_DIR": "/d", **environ})
    assert message in str(raised.value)


def run_pets_train(trainer_env, env, *args):
    return subprocess.run(
        [sys.executable, "-m", "pets_trainer.launch", *args], env=trainer_env(**env), capture_output=True,
        text=True, timeout=60,
    )


def test_dry_run_prints_the_command(trainer_env, tmp_path):
    result = run_pets_train(trainer_env, {"DATA_DIR": str(tmp_path)}, "--dry-run")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed["command"][1:3] == ["-m", "pets_trainer.accelerate_launch"]
    assert TrainConfig.from_json(printed["command"][-1]).data_dir == str(tmp_path)


def assert_one_line_error(result, message):
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_cli_reports_bad_configuration_in_one_line(trainer_env, tmp_path):
    assert_one_line_error(run_pets_train(trainer_env, {"DATA_DIR": str(tmp_path), "BATCH_SIZE": "-1"}),
                          "batch_size must be an integer >= 1, got -1")
    assert_one_line_error(run_pets_train(trainer_env, {}), "DATA_DIR (or --data-dir) is not set")


def test_cli_reports_each_bad_data_case_in_one_line(trainer_env, tmp_path):
    assert_one_line_error(run_pets_train(trainer_env, {"DATA_DIR": str(tmp_path / "missing")}), "does not exist")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(run_pets_train(trainer_env, {"DATA_DIR": str(empty)}), "is empty")
    other_names = tmp_path / "other-names"
    other_names.mkdir()
    (other_names / "cat.png").write_bytes(b"x")
    assert_one_line_error(run_pets_train(trainer_env, {"DATA_DIR": str(other_names)}), "matches <breed>_<n>.jpg")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "pug_1.jpg").write_bytes(b"broken")
    (corrupt / "beagle_1.jpg").write_bytes(b"broken")
    assert_one_line_error(run_pets_train(trainer_env, {"DATA_DIR": str(corrupt)}), "could be read")


def test_cli_generates_synthetic_data_and_rejects_one_class(trainer_env, tmp_path):
    result = run_pets_train(trainer_env, {"DATA_DIR": str(tmp_path), "SYNTHETIC_CLASSES": "1"})
    assert_one_line_error(result, "synthetic data: classes must be between 2 and 37, got 1")
    # Real images of a single breed: the class count check.
    generate_synthetic_pets(tmp_path, classes=2, images_per_class=2, image_size=16)
    for path in tmp_path.glob("american_bulldog_*.jpg"):
        path.unlink()
    assert_one_line_error(run_pets_train(trainer_env, {"DATA_DIR": str(tmp_path)}), "found only one class")


def test_force_cpu_reaches_a_shipped_function_s_plain_accelerator():
    _, config = plan_and_config({"DATA_DIR": "/d", "FORCE_CPU": "true", "NPROC_PER_NODE": "2"})
    assert child_environment({}, cpu=config.cpu)["ACCELERATE_USE_CPU"] == "true"
    assert "ACCELERATE_USE_CPU" not in child_environment({}, cpu=False), "no GPU: decided by the function runtime"
