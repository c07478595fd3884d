"""Per-epoch checkpoints with `accelerator.save_state`, and resuming from the last finished one.

Layout: `<dir>/epoch-<E>/` holds Accelerate's state (model, optimizer, scheduler, RNG states) and,
written last and atomically by the main process, `finished.json` with the metrics of epochs
0..E. A directory without `finished.json` is an interrupted save and is ignored.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from .atomic import write_atomically
from .errors import ConfigError
from .metrics import EpochResult

FINISHED_MARKER = "finished.json"
KEEP_LAST = 2


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
    accelerator, checkpoint_dir: Path, epoch: int, history: list[EpochResult], fingerprint: dict
) -> None:
    """Called on every process (Accelerate writes each rank's RNG state, the main one the rest).

    `fingerprint` names what the saved state depends on (model, schedule, classes, world size);
    a run with a different one refuses to resume from it.
    """
    target = epoch_dir(checkpoint_dir, epoch)
    accelerator.save_state(str(target))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        finished = {"epoch": epoch, "fingerprint": fingerprint, "history": [vars(result) for result in history]}
        write_atomically(target / FINISHED_MARKER, lambda stream: stream.write(json.dumps(finished).encode()))
        for old in finished_epochs(checkpoint_dir)[:-KEEP_LAST]:
            shutil.rmtree(epoch_dir(checkpoint_dir, old), ignore_errors=True)
    accelerator.wait_for_everyone()


def restore_checkpoint(accelerator, checkpoint_dir: Path, fingerprint: dict) -> list[EpochResult]:
    """Load the newest checkpoint every process can see; return the finished epochs' metrics.

    All processes agree on the epoch (the minimum over ranks), so nodes without the shared
    checkpoint volume make the whole group start fresh instead of diverging.
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
    if saved.get("fingerprint") != fingerprint:
        differences = ", ".join(
            f"{key}={saved.get('fingerprint', {}).get(key)!r} there, {value!r} now"
            for key, value in fingerprint.items()
            if saved.get("fingerprint", {}).get(key) != value
        )
        raise ConfigError(
            f"the checkpoint in {checkpoint_dir} is from a different run ({differences}):"
            " use an empty checkpoint directory for a new run"
        )
    accelerator.load_state(str(source))
    return [EpochResult(**entry) for entry in saved["history"] if entry["epoch"] <= agreed]
