"""`pets-train`: read the pod's environment and flags, prepare the data, then `accelerate launch`.

Flags override environment variables, which override the defaults (the tutorial's values).
With no rendezvous environment (NUM_MACHINES unset or 1) it runs on this machine only.
This module imports no torch, so bad configuration or data is reported in well under a second.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping

from .config import MIXED_PRECISION_CHOICES, PIN_MEMORY_CHOICES, TrainConfig
from .cpus import available_cpus
from .errors import ConfigError, TrainerError
from .image_index import scan_images
from .synthetic import generate_synthetic_pets

WORKER_MODULE = "pets_trainer.worker"
DEFAULT_MASTER_PORT = 29500
SYNTHETIC_DEFAULTS = {"synthetic_classes": 4, "synthetic_images_per_class": 20, "synthetic_image_size": 64}


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("must be true or false")


def parse_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("must be an integer") from None


def parse_float(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise ValueError("must be a number") from None


def choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return text

    return parse


@dataclass(frozen=True)
class Option:
    dest: str
    flag: str
    envs: tuple[str, ...]  # first one set wins
    parse: Callable[[str], Any]
    help: str


TRAIN_OPTIONS = (
    Option("data_dir", "--data-dir", ("DATA_DIR",), str, "directory of <breed>_<n>.jpg images"),
    Option("model", "--model", ("MODEL",), str, "timm model name (resnet50d)"),
    Option("pretrained", "--pretrained", ("PRETRAINED",), parse_bool, "load pretrained weights from --pretrained-weights (false)"),
    Option("pretrained_weights", "--pretrained-weights", ("PRETRAINED_WEIGHTS",), str, "local weights file (safetensors or torch)"),
    Option("mixed_precision", "--mixed-precision", ("MIXED_PRECISION",), choice(*MIXED_PRECISION_CHOICES), "no | fp16 | bf16; falls back to no where the device lacks it (no)"),
    Option("seed", "--seed", ("SEED",), parse_int, "seed of the split, the model init and the synthetic data (42)"),
    Option("batch_size", "--batch-size", ("BATCH_SIZE",), parse_int, "per-process training batch size (64)"),
    Option("eval_batch_size", "--eval-batch-size", ("EVAL_BATCH_SIZE",), parse_int, "per-process eval batch size (2 x batch size)"),
    Option("epochs", "--epochs", ("EPOCHS",), parse_int, "epochs (5)"),
    Option("max_lr", "--max-lr", ("MAX_LR",), parse_float, "OneCycleLR max learning rate (0.03)"),
    Option("num_workers", "--num-workers", ("NUM_WORKERS",), parse_int, "data loader workers per process (4)"),
    Option("image_size", "--image-size", ("IMAGE_SIZE",), parse_int, "side of the square model input (224)"),
    Option("checkpoint_dir", "--checkpoint-dir", ("CHECKPOINT_DIR",), str, "save state after each epoch here and resume from it"),
    Option("verify_images", "--verify-images", ("VERIFY_IMAGES",), parse_bool, "decode every image once up front and skip unreadable ones (true)"),
    Option("cpu", "--cpu", ("FORCE_CPU",), parse_bool, "train on the CPU even if a GPU is present (false)"),
    Option("draft_decode", "--draft-decode", ("DRAFT_DECODE",), parse_bool, "speed: decode JPEGs at the needed size (true)"),
    Option("image_cache", "--image-cache", ("IMAGE_CACHE",), parse_bool, "speed: decode each image once per run, not once per epoch (true)"),
    Option("image_cache_dir", "--image-cache-dir", ("IMAGE_CACHE_DIR",), str, "keep the decoded images here (kept after the run); default: a temporary directory"),
    Option("persistent_workers", "--persistent-workers", ("PERSISTENT_WORKERS",), parse_bool, "speed: keep loader workers between epochs (true)"),
    Option("prefetch_factor", "--prefetch-factor", ("PREFETCH_FACTOR",), parse_int, "speed: batches prefetched per loader worker (2)"),
    Option("channels_last", "--channels-last", ("CHANNELS_LAST",), parse_bool, "speed: channels_last memory format (true)"),
    Option("keep_freed_memory", "--keep-freed-memory", ("KEEP_FREED_MEMORY",), parse_bool, "speed: malloc keeps freed memory for the next batch instead of unmapping it (true)"),
    Option("frozen_encoder_no_grad", "--frozen-encoder-no-grad", ("FROZEN_ENCODER_NO_GRAD",), parse_bool, "speed: run the frozen encoder under no_grad (true)"),
    Option("pin_memory", "--pin-memory", ("PIN_MEMORY",), choice(*PIN_MEMORY_CHOICES), "speed: pinned loader memory; auto = on GPU only (auto)"),
)

LAUNCH_OPTIONS = (
    Option("num_machines", "--num-machines", ("NUM_MACHINES",), parse_int, "nodes (pods) in the group (1)"),
    Option("machine_rank", "--machine-rank", ("MACHINE_RANK", "JOB_COMPLETION_INDEX"), parse_int, "this node's index (0)"),
    Option("main_process_ip", "--main-process-ip", ("MASTER_ADDR",), str, "address of node 0 (127.0.0.1)"),
    Option("main_process_port", "--main-process-port", ("MASTER_PORT",), parse_int, f"rendezvous port on node 0 ({DEFAULT_MASTER_PORT})"),
    Option("nproc_per_node", "--nproc-per-node", ("NPROC_PER_NODE",), parse_int, "training processes per node, one per GPU (1)"),
    Option("world_size", "--world-size", ("WORLD_SIZE",), parse_int, "checked against num-machines x nproc-per-node when set"),
    Option("cpu_threads_per_process", "--cpu-threads-per-process", ("OMP_NUM_THREADS",), parse_int, "torch threads per process (CPUs / nproc-per-node)"),
    Option("synthetic_classes", "--synthetic-classes", ("SYNTHETIC_CLASSES",), parse_int, "generate a synthetic set of this many classes into the data dir"),
    Option("synthetic_images_per_class", "--synthetic-images-per-class", ("SYNTHETIC_IMAGES_PER_CLASS",), parse_int, "synthetic images per class (20)"),
    Option("synthetic_image_size", "--synthetic-image-size", ("SYNTHETIC_IMAGE_SIZE",), parse_int, "side of the synthetic JPEGs (64)"),
)


@dataclass(frozen=True)
class LaunchPlan:
    num_machines: int
    machine_rank: int
    main_process_ip: str
    main_process_port: int
    nproc_per_node: int
    cpu_threads_per_process: int
    synthetic: dict | None  # generate_synthetic_pets keyword arguments, or None

    @property
    def num_processes(self) -> int:
        return self.num_machines * self.nproc_per_node


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pets-train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Each flag's environment variable is in brackets; flags win over the environment.",
    )
    for group_name, options in (("training", TRAIN_OPTIONS), ("launch", LAUNCH_OPTIONS)):
        group = parser.add_argument_group(group_name)
        for option in options:
            text = f"{option.help} [{' or '.join(option.envs)}]"
            if option.parse is parse_bool:
                group.add_argument(option.flag, dest=option.dest, action=argparse.BooleanOptionalAction, default=None, help=text)
            else:
                group.add_argument(option.flag, dest=option.dest, default=None, metavar=option.envs[0], help=text)
    parser.add_argument("--dry-run", action="store_true", help="print the accelerate command as JSON and exit")
    return parser


def resolve_options(options, args: argparse.Namespace, environ: Mapping[str, str]) -> dict:
    """Values from flags, then the environment; unset options are left out (defaults apply)."""
    values = {}
    for option in options:
        given = getattr(args, option.dest)
        if isinstance(given, bool):
            values[option.dest] = given
            continue
        source, text = (option.flag, given) if given is not None else next(
            ((env, environ[env]) for env in option.envs if environ.get(env, "") != ""), (None, None)
        )
        if text is None:
            continue
        try:
            values[option.dest] = option.parse(text)
        except ValueError as error:
            raise ConfigError(f"{source}={text!r}: {error}") from None
    return values


def make_plan(values: dict) -> LaunchPlan:
    num_machines = values.get("num_machines", 1)
    machine_rank = values.get("machine_rank", 0)
    nproc = values.get("nproc_per_node", 1)
    port = values.get("main_process_port", DEFAULT_MASTER_PORT)
    if num_machines < 1:
        raise ConfigError(f"NUM_MACHINES must be >= 1, got {num_machines}")
    if nproc < 1:
        raise ConfigError(f"NPROC_PER_NODE must be >= 1, got {nproc}")
    if not 0 <= machine_rank < num_machines:
        raise ConfigError(f"MACHINE_RANK must be between 0 and NUM_MACHINES-1 ({num_machines - 1}), got {machine_rank}")
    if not 1 <= port <= 65535:
        raise ConfigError(f"MASTER_PORT must be a TCP port (1-65535), got {port}")
    world_size = values.get("world_size")
    if world_size is not None and world_size != num_machines * nproc:
        raise ConfigError(
            f"WORLD_SIZE={world_size} does not match NUM_MACHINES x NPROC_PER_NODE = {num_machines} x {nproc}"
        )
    if num_machines > 1 and not values.get("main_process_ip"):
        raise ConfigError("MASTER_ADDR must be set when NUM_MACHINES > 1: the address of node 0")
    threads = values.get("cpu_threads_per_process") or max(1, available_cpus() // nproc)
    synthetic = None
    if any(key in values for key in SYNTHETIC_DEFAULTS):
        synthetic = {key: values.get(key, default) for key, default in SYNTHETIC_DEFAULTS.items()}
    return LaunchPlan(
        num_machines=num_machines,
        machine_rank=machine_rank,
        # A single node rendezvouses with itself; its own DNS name may not resolve yet.
        main_process_ip=values["main_process_ip"] if num_machines > 1 else "127.0.0.1",
        main_process_port=port,
        nproc_per_node=nproc,
        cpu_threads_per_process=threads,
        synthetic=synthetic,
    )


def make_train_config(values: dict) -> TrainConfig:
    known = {field.name for field in fields(TrainConfig)}
    return TrainConfig(**{key: value for key, value in values.items() if key in known})


def accelerate_command(plan: LaunchPlan, config: TrainConfig, python: str = sys.executable) -> list[str]:
    command = [
        python, "-m", "accelerate.commands.launch",
        "--quiet",  # the worker prints its own one-line errors; no launcher traceback on top
        "--num_machines", str(plan.num_machines),
        "--num_processes", str(plan.num_processes),
        "--mixed_precision", config.mixed_precision,
        "--dynamo_backend", "no",
        "--num_cpu_threads_per_process", str(plan.cpu_threads_per_process),
    ]
    if plan.num_processes > 1:
        # On a machine without GPUs Accelerate turns this into MULTI_CPU (gloo).
        command += [
            "--multi_gpu",
            "--machine_rank", str(plan.machine_rank),
            "--main_process_ip", plan.main_process_ip,
            "--main_process_port", str(plan.main_process_port),
        ]
    elif config.cpu:
        command.append("--cpu")
    return command + ["-m", WORKER_MODULE, "--config", config.to_json()]


def prepare_data(plan: LaunchPlan, config: TrainConfig) -> None:
    if not config.data_dir:
        raise ConfigError("DATA_DIR (or --data-dir) is not set: the directory of <breed>_<n>.jpg images")
    if plan.synthetic:
        try:
            generate_synthetic_pets(
                config.data_dir,
                classes=plan.synthetic["synthetic_classes"],
                images_per_class=plan.synthetic["synthetic_images_per_class"],
                image_size=plan.synthetic["synthetic_image_size"],
                seed=config.seed,
            )
        except ValueError as error:
            raise ConfigError(f"synthetic data: {error}") from None
        except OSError as error:
            raise ConfigError(f"cannot write synthetic data into {config.data_dir}: {error.strerror or error}") from None
    index = scan_images(config.data_dir, verify=config.verify_images)
    for line in index.skip_summary():
        print(line, file=sys.stderr, flush=True)


def child_environment(environ: Mapping[str, str]) -> dict[str, str]:
    env = dict(environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        values = resolve_options(TRAIN_OPTIONS + LAUNCH_OPTIONS, args, os.environ)
        plan = make_plan(values)
        config = make_train_config(values)
        command = accelerate_command(plan, config)
        if args.dry_run:
            print(json.dumps({"command": command, "plan": vars(plan)}))
            return 0
        prepare_data(plan, config)
    except TrainerError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    # exec, not a child: signals sent to the pod's main process reach the accelerate launcher directly.
    os.execve(command[0], command, child_environment(os.environ))
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
