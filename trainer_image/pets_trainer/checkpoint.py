"""Per-epoch checkpoints with `accelerator.save_state`, and resuming from the last finished one.

Layout: `<dir>/epoch-<E>/` holds Accelerate's state (model, optimizer, scheduler, RNG states) and,
written last and atomically by the main process, `finished.json` with the metrics of epochs
0..E, the run's fingerprint and its owner (the PetsTrainingJob that wrote it). A directory without
`finished.json` is an interrupted save and is ignored.

A checkpoint belongs to one job: another job (another metadata.uid, so also a deleted job's
successor of the same name) refuses to resume from it unless told to take it over (resume_from
"AnyJob", spec.checkpoint.resumeFrom), and even then only with the same fingerprint. A refused checkpoint
is a `CheckpointConflict` (`error: CheckpointConflict: ...`): the job fails at once, a restart cannot help.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .atomic import write_atomically
from .errors import ConfigError
from .metrics import EpochResult

FINISHED_MARKER = "finished.json"
KEEP_LAST = 2
SAME_JOB, ANY_JOB = "SameJob", "AnyJob"  # resume_from: the CRD's enum of spec.checkpoint.resumeFrom


class CheckpointConflict(ConfigError):
    """The checkpoint directory holds another job's or another run's state: the message says whose and what to do."""

    reason = "CheckpointConflict"  # the job's failure reason (pets_api.phases.FAILURE_REASONS)

    def __init__(self, message: str):
        super().__init__(f"{self.reason}: {message}")


@dataclass(frozen=True)
class Owner:
    """The job a run belongs to (JOB_UID, JOB_NAME, JOB_NAMESPACE); all None for pets-train run by hand."""

    uid: str | None = None
    name: str | None = None
    namespace: str | None = None

    def __post_init__(self) -> None:
        for key in ("uid", "name", "namespace"):  # "" (an empty variable) is no value
            object.__setattr__(self, key, getattr(self, key) or None)

    @classmethod
    def from_record(cls, record: object) -> Owner:
        """What a checkpoint's `owner` says; a checkpoint without one (by hand, an older trainer) has no uid."""
        if not isinstance(record, dict):
            return cls()
        return cls(**{key: record.get(key) for key in ("uid", "name", "namespace")})

    def record(self) -> dict:
        return asdict(self)

    def describe(self, this: bool = False) -> str:
        """"job <namespace>/<name> (uid <uid>)", "this job ..." for the running one."""
        if not self.uid:
            return ("this run (no JOB_UID: pets-train by hand)" if this
                    else "a run of no PetsTrainingJob (no JOB_UID: pets-train by hand, or an older trainer)")
        job = "/".join(part for part in (self.namespace, self.name) if part)
        return f"{'this ' if this else ''}job {job + ' ' if job else ''}(uid {self.uid})"


def epoch_dir(checkpoint_dir: Path, epoch: int) -> Path:
    return checkpoint_dir / f"epoch-{epoch:04d}"


def finished_epochs(checkpoint_dir: Path) -> list[int]:
    if not checkpoint_dir.is_dir():
        return []
    epochs = []
    for entry in checkpoint_dir.glob("epoch-*"):
        suffix = entry.name.removeprefix("epoch-")
        if suffix.isdigit() and (entry / FINISHED_MARKER).is_file():
            epochs.append(int(suffix))
    return sorted(epochs)


def save_checkpoint(
    accelerator, checkpoint_dir: Path, epoch: int, history: list[EpochResult], fingerprint: dict,
    owner: Owner = Owner(),
) -> None:
    """Called on every process (Accelerate writes each rank's RNG state, the main one the rest).

    `fingerprint` names what the saved state depends on (model, schedule, data, world size);
    a run with a different one refuses to resume from it. `owner` is the job writing it.
    """
    target = epoch_dir(checkpoint_dir, epoch)
    accelerator.save_state(str(target))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        finished = {"epoch": epoch, "owner": owner.record(), "fingerprint": fingerprint,
                    "history": [vars(result) for result in history]}
        write_atomically(target / FINISHED_MARKER, lambda stream: stream.write(json.dumps(finished).encode()))
        for old in finished_epochs(checkpoint_dir)[:-KEEP_LAST]:
            shutil.rmtree(epoch_dir(checkpoint_dir, old), ignore_errors=True)
    accelerator.wait_for_everyone()


def ownership_problem(checkpoint_dir: Path, saved: Owner, owner: Owner, resume_from: str) -> str | None:
    """Why this run (`owner`) may not resume from a checkpoint `saved` wrote; None when it may."""
    if saved.uid == owner.uid or resume_from == ANY_JOB:
        return None
    return (f"the checkpoint in {checkpoint_dir} belongs to {saved.describe()}, not to {owner.describe(this=True)}:"
            f" set spec.checkpoint.resumeFrom: {ANY_JOB} (pets-train --resume-from {ANY_JOB}) to take it over,"
            " or use an empty checkpoint directory")


def restore_checkpoint(accelerator, checkpoint_dir: Path, fingerprint: dict, owner: Owner = Owner(),
                       resume_from: str = SAME_JOB) -> list[EpochResult]:
    """Load the newest checkpoint every process can see; return the finished epochs' metrics.

    All processes agree on the epoch (the minimum over ranks), so nodes without the shared
    checkpoint volume make the whole group start fresh instead of diverging. Another job's
    checkpoint is refused (CheckpointConflict) unless `resume_from` is "AnyJob"; one of another run
    (a different fingerprint) always is.
    """
    local = finished_epochs(checkpoint_dir)
    latest_here = torch.tensor([local[-1] if local else -1], device=accelerator.device)
    agreed = int(accelerator.gather(latest_here).min().item())
    if agreed < 0:
        return []
    available_here = torch.tensor([1 if agreed in local else 0], device=accelerator.device)
    if int(accelerator.gather(available_here).min().item()) == 0:
        return []
    source = epoch_dir(checkpoint_dir, agreed)
    saved = json.loads((source / FINISHED_MARKER).read_text())
    saved_owner = Owner.from_record(saved.get("owner"))
    problem = ownership_problem(checkpoint_dir, saved_owner, owner, resume_from)
    if problem:
        raise CheckpointConflict(problem)
    if saved.get("fingerprint") != fingerprint:
        differences = ", ".join(
            f"{key}={saved.get('fingerprint', {}).get(key)!r} there, {value!r} now"
            for key, value in fingerprint.items()
            if saved.get("fingerprint", {}).get(key) != value
        )
        raise CheckpointConflict(
            f"the checkpoint in {checkpoint_dir} is from a different run ({differences}):"
            " use an empty checkpoint directory for a new run"
        )
    if saved_owner.uid != owner.uid:
        accelerator.print(f"taking over the checkpoint of {saved_owner.describe()} in {checkpoint_dir}"
                          f" (resume from {ANY_JOB})")
    accelerator.load_state(str(source))
    return [EpochResult(**entry) for entry in saved["history"] if entry["epoch"] <= agreed]
