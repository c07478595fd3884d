"""The pets product, handed to the local cluster kit: what only the product knows.

The kit (API server, scheduler, kubelet, runtimes, `LocalCluster`, the `local up` command) runs any
workload; this module says what the pets trainer is to it, from the pod contract (`pets_api`):
- `ENTRYPOINTS`: the trainer image's command, for a container that sets none;
- `TRAINER`: what a simulated trainer pod prints (rank 0: the trainer's metric lines, an epoch line
  per epoch, then the done line; every rank: one text line at its start) and its epochs when its
  schedule names none (the pod's `EPOCHS`, the job's `spec.epochs`);
- `crds()`: what `pets-operator local up` applies when no `--crd` is given (the PetsTrainingJob CRD);
- `main`: `pets-operator local`, the kit's command with these three.

    LocalCluster(workdir=..., crds=product.crds(), entrypoints=product.ENTRYPOINTS, workload=product.TRAINER)
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pets_api import contract, metric_lines, packaged
from pets_api.k8s_names import ANNOTATION_COMPLETION_INDEX

from . import cli
from .runtimes.simulated import Schedule, Workload, literal_env

TRAINER_IMAGE_REPOSITORY = "pets-trainer"  # the trainer image's name, whatever its registry and tag
ENTRYPOINTS = {TRAINER_IMAGE_REPOSITORY: list(contract.TRAINER_COMMAND)}
RANK_ENV = contract.BY_OPTION["machine_rank"].envs  # MACHINE_RANK, then JOB_COMPLETION_INDEX
EPOCHS_ENV = contract.BY_OPTION["epochs"].env


def crds() -> list[dict[str, Any]]:
    return [packaged.crd()]


def rank_of(pod: Mapping[str, Any]) -> int:
    """The node's rank: its env, else the completion index an Indexed Job's pod carries; 0 when neither."""
    env = literal_env(pod)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    for text in (*(env.get(name) for name in RANK_ENV), annotations.get(ANNOTATION_COMPLETION_INDEX)):
        if text is not None and text.strip().isdigit():
            return int(text)
    return 0


def trainer_log_lines(schedule: Schedule, pod: Mapping[str, Any]) -> list[tuple[float, str]]:
    """(seconds after Running, line): rank 0 prints the trainer's metric lines, the others one line only."""
    rank = rank_of(pod)
    name = (pod.get("metadata") or {}).get("name", "")
    lines = [(0.0, f"simulated pod {name} rank {rank}: {schedule.epochs} epochs every {schedule.epoch_seconds:g}s")]
    if rank != 0:
        return lines
    for epoch in range(schedule.last_epoch + 1):
        event = metric_lines.epoch_event(epoch, schedule.accuracy_of(epoch), round(1.0 / (epoch + 1), 4),
                                         schedule.epoch_seconds)
        lines.append(((epoch + 1) * schedule.epoch_seconds, metric_lines.format_line(event)))
    if schedule.final_exit_code == 0:
        accuracies = [schedule.accuracy_of(e) for e in range(schedule.epochs)]
        done = metric_lines.done_event(schedule.epochs, accuracies[-1] if accuracies else None,
                                       max(accuracies) if accuracies else None)
        lines.append((schedule.run_seconds, metric_lines.format_line(done)))
    else:
        lines.append((schedule.run_seconds, f"simulated failure: exit code {schedule.final_exit_code}"))
    return lines


def trainer_schedule_defaults(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod's `EPOCHS` as the schedule's epochs, when it is a number."""
    text = literal_env(pod).get(EPOCHS_ENV, "")
    return {"epochs": int(text)} if text.strip().isdigit() else {}


TRAINER = Workload(log_lines=trainer_log_lines, schedule_defaults=trainer_schedule_defaults)


def main(argv: list[str] | None = None) -> int:
    """`pets-operator local`: the kit's `local up`, with the product's CRD, entrypoints and simulated trainer."""
    return cli.main(argv, prog="pets-operator local", default_crds=crds(), crds_help="the PetsTrainingJob CRD",
                    entrypoints=ENTRYPOINTS, workload=TRAINER)
