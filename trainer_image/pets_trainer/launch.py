"""`pets-train`: read the pod's environment and flags, prepare the data, then `accelerate launch`.

`pets-train predict DIR IMAGE...` instead classifies images with a job's saved model (`pets_trainer.export`).

Flags override environment variables, which override the defaults: the CRD's for the options a
PetsTrainingJob's spec sets, `TrainConfig`'s for the rest. The names of both come from the pod
contract (`pets_api.contract`), the same table the operator writes the pod's env from.
With no rendezvous environment (NUM_MACHINES unset or 1) it runs on this machine only.
This module imports no torch, so bad configuration or data is reported in well under a second.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from pets_api import contract

from .config import TrainConfig
from .cpus import available_cpus
from .errors import TERMINATION_MESSAGE_ENV, ConfigError, TrainerError, report_error
from .image_index import scan_images
from .prepare import Downloads, prepare_downloads
from .synthetic import generate_synthetic_pets
from .world import USE_CPU_ENV

ACCELERATE_LAUNCH_MODULE = "pets_trainer.accelerate_launch"
WORKER_MODULE = "pets_trainer.worker"
FUNCTION_MODULE = "pets_trainer.function"  # with FUNCTION_FILE: a shipped function instead of the recipe
# Defaults of the options a PetsTrainingJob's spec sets: the CRD's (one source for both).
SPEC_DEFAULTS = contract.option_defaults()
SYNTHETIC_OPTIONS = ("synthetic_classes", "synthetic_images_per_class", "synthetic_image_size")
TRAIN_CONFIG_FIELDS = frozenset(field.name for field in fields(TrainConfig))


@dataclass(frozen=True)
class Option:
    dest: str
    flag: str
    envs: tuple[str, ...]  # first one set wins
    parse: Callable[[str], Any]
    help: str


def _default_text(entry: contract.Entry) -> str:
    if entry.option in SPEC_DEFAULTS:
        return f" ({contract.render(SPEC_DEFAULTS[entry.option])})"
    field = next((f for f in fields(TrainConfig) if f.name == entry.option), None)
    if field is not None and field.default not in (None, dataclasses.MISSING):
        return f" ({contract.render(field.default)})"
    return ""


def _option(entry: contract.Entry) -> Option:
    text = entry.help
    if entry.type == "choice":
        text = f"{' | '.join(contract.choices_of(entry))}; {text}"
    return Option(entry.option, entry.flag, entry.envs, contract.parser_for(entry), text + _default_text(entry))


# The contract's options: those TrainConfig has train the model, the others shape the launch.
TRAIN_OPTIONS = tuple(_option(e) for e in contract.options() if e.option in TRAIN_CONFIG_FIELDS)
LAUNCH_OPTIONS = tuple(_option(e) for e in contract.options() if e.option not in TRAIN_CONFIG_FIELDS)


@dataclass(frozen=True)
class LaunchPlan:
    num_machines: int
    machine_rank: int
    main_process_ip: str
    main_process_port: int
    nproc_per_node: int
    cpu_threads_per_process: int
    synthetic: dict | None  # generate_synthetic_pets keyword arguments, or None
    function_file: str | None = None  # a shipped function's payload (FUNCTION_FILE), run instead of the recipe
    downloads: Downloads = Downloads()  # fetched once per node before the workers start (pets_trainer.prepare)

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
            if option.parse is contract.parse_bool:
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
    num_machines = values.get("num_machines", SPEC_DEFAULTS["num_machines"])
    machine_rank = values.get("machine_rank", 0)
    nproc = values.get("nproc_per_node", SPEC_DEFAULTS["nproc_per_node"])
    port = values.get("main_process_port", SPEC_DEFAULTS["main_process_port"])
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
    if any(key in values for key in SYNTHETIC_OPTIONS):
        synthetic = {key: values.get(key, SPEC_DEFAULTS[key]) for key in SYNTHETIC_OPTIONS}
    return LaunchPlan(
        num_machines=num_machines,
        machine_rank=machine_rank,
        # A single node rendezvouses with itself; its own DNS name may not resolve yet.
        main_process_ip=values["main_process_ip"] if num_machines > 1 else "127.0.0.1",
        main_process_port=port,
        nproc_per_node=nproc,
        cpu_threads_per_process=threads,
        synthetic=synthetic,
        function_file=values.get("function_file") or None,
        downloads=Downloads(
            data_url=values.get("data_url") or None,
            data_checksum=values.get("data_checksum") or None,
            data_archive_dir=values.get("data_archive_dir") or None,
            data_dir=values.get("data_dir") or None,
            # Hub weights: the recipe's model, pretrained, with no local file (a shipped function fetches its own).
            hub_model=values.get("model", SPEC_DEFAULTS["model"])
            if values.get("pretrained") and not values.get("pretrained_weights") and not values.get("function_file")
            else None,
        ),
    )


def make_train_config(values: dict) -> TrainConfig:
    return TrainConfig(**{key: value for key, value in values.items() if key in TRAIN_CONFIG_FIELDS})


def accelerate_command(plan: LaunchPlan, config: TrainConfig, python: str = sys.executable) -> list[str]:
    command = [
        # Accelerate's launch, in a module that names the cause when a training process fails.
        python, "-m", ACCELERATE_LAUNCH_MODULE,
        "--num_machines", str(plan.num_machines),
        "--num_processes", str(plan.num_processes),
        "--mixed_precision", config.mixed_precision,
        "--dynamo_backend", "no",
        "--num_cpu_threads_per_process", str(plan.cpu_threads_per_process),
    ]
    if plan.num_processes > 1:
        # torchrun; on a machine without GPUs the processes form a CPU (gloo) group when Accelerate is told
        # it runs on the CPU: the recipe passes cpu=True, a shipped function gets ACCELERATE_USE_CPU.
        command += [
            "--multi_gpu",
            "--machine_rank", str(plan.machine_rank),
            "--main_process_ip", plan.main_process_ip,
            "--main_process_port", str(plan.main_process_port),
        ]
    elif config.cpu:
        command.append("--cpu")
    if plan.function_file:
        return command + ["-m", FUNCTION_MODULE, "--payload", plan.function_file]
    return command + ["-m", WORKER_MODULE, "--config", config.to_json()]


def prepare_data(plan: LaunchPlan, config: TrainConfig) -> None:
    if not config.data_dir and not plan.function_file:  # a shipped function may need no data
        raise ConfigError("DATA_DIR (or --data-dir) is not set: the directory of <breed>_<n>.jpg images")
    if plan.synthetic and config.data_dir:
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
    if plan.function_file:  # what the data holds is the function's business; its payload must load here
        check_function(plan.function_file)
        return
    index = scan_images(config.data_dir, verify=config.verify_images)
    for line in index.skip_summary():
        print(line, file=sys.stderr, flush=True)


def check_function(path: str) -> None:
    """A payload made with another Python minor or cloudpickle major version stops the pod here, before any
    training process starts (IncompatibleFunction); other differing versions are warnings."""
    from .function import check_compatible, read_payload  # imports no torch

    header, _ = read_payload(path)
    for note in check_compatible(header):
        print(f"warning: {note}", file=sys.stderr, flush=True)


def child_environment(environ: Mapping[str, str], termination_message_path: str | None = None,
                      cpu: bool = False) -> dict[str, str]:
    env = dict(environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env["HF_HUB_OFFLINE"] = "1"  # the workers never download: pets-train fetched what they load
    if cpu:  # FORCE_CPU: a shipped function's plain Accelerator() too (the recipe passes cpu=True itself)
        env[USE_CPU_ENV] = "true"
    if termination_message_path:  # the workers write their errors there too
        env[TERMINATION_MESSAGE_ENV] = termination_message_path
    return env


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["predict"]:  # `pets-train predict DIR IMAGE...`: a job's saved model (spec.output) in use
        from .export import main as predict_main

        return predict_main(argv[1:])
    args = build_parser().parse_args(argv)
    # Known before anything can fail: a flag wins over the environment, as for every option.
    termination_message_path = args.termination_message_path or os.environ.get(TERMINATION_MESSAGE_ENV) or None
    try:
        values = resolve_options(TRAIN_OPTIONS + LAUNCH_OPTIONS, args, os.environ)
        plan = make_plan(values)
        config = make_train_config(values)
        command = accelerate_command(plan, config)
        if args.dry_run:
            print(json.dumps({"command": command, "plan": {**vars(plan), "downloads": vars(plan.downloads)}}))
            return 0
        weights = prepare_downloads(plan.downloads)
        if weights is not None:  # the workers load the file this node fetched; none of them downloads
            config = config.replace(pretrained_weights=weights)
            command = accelerate_command(plan, config)
        prepare_data(plan, config)
    except TrainerError as error:
        return report_error(error, termination_message_path)
    sys.stdout.flush()
    sys.stderr.flush()
    # exec, not a child: signals sent to the pod's main process reach the accelerate launcher directly.
    os.execve(command[0], command, child_environment(os.environ, termination_message_path, cpu=config.cpu))
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
