"""A job's progress as `job.wait()` shows it: a live bar in Jupyter, plain lines elsewhere.

What to show is decided by pure functions of the resource (`progress`, `summary`, `epoch_line`);
the displays only draw it. In a Jupyter kernel the bar is `tqdm.auto`'s (a widget that updates in
place: epochs done over the total, phase, latest and best accuracy); anywhere else each change of
phase and each finished epoch is one printed line, so logs and CI output stay readable.

Epochs are counted from 1, as `status.currentEpoch` and the EPOCH column of `kubectl get ptj` count
them: the `status.epochs` entry with `epoch: 0` (the trainer's index) is shown as epoch 1.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from pets_api.phases import FAILED, FINAL_PHASES


@dataclass(frozen=True)
class Progress:
    name: str
    phase: str | None = None
    message: str | None = None
    epochs: list[dict[str, Any]] = field(default_factory=list)
    total: int | None = None  # epochs the run will have: spec.epochs for the built-in recipe; unknown for a function

    @property
    def done(self) -> int:
        """Epochs completed: the latest epoch's number, counted from 1 (status.currentEpoch)."""
        return epoch_number(self.epochs[-1]) if self.epochs else 0

    @property
    def latest(self) -> float | None:
        return self.epochs[-1]["accuracy"] if self.epochs else None

    @property
    def best(self) -> float | None:
        return max((entry["accuracy"] for entry in self.epochs), default=None)


def epoch_number(entry: Mapping[str, Any]) -> int:
    """The number a person reads for a `status.epochs` entry: its 0-based `epoch` + 1."""
    return int(entry["epoch"]) + 1


def progress(name: str, resource: Mapping[str, Any], total: int | None = None) -> Progress:
    """The progress of a PetsTrainingJob as the API server returned it (status and spec). `total`: the epochs
    a shipped function runs, which only the notebook knows (its spec.epochs is the CRD's default, unused)."""
    status = resource.get("status") or {}
    spec = resource.get("spec") or {}
    if total is None and not spec.get("function") and isinstance(spec.get("epochs"), int):
        total = spec["epochs"]
    epochs = sorted((dict(entry) for entry in status.get("epochs") or []), key=lambda entry: entry["epoch"])
    return Progress(name=name, phase=status.get("phase"), message=status.get("message"), epochs=epochs, total=total)


def accuracy_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def summary(p: Progress) -> str:
    """`Running, 2/5 epochs, accuracy 0.8812 (best 0.9012)`."""
    parts = [p.phase or "submitted"]
    if p.done or p.total:
        parts.append(f"{p.done}/{p.total} epochs" if p.total else f"{p.done} epoch(s)")
    if p.epochs:
        parts.append(f"accuracy {accuracy_text(p.latest)} (best {accuracy_text(p.best)})")
    return ", ".join(parts)


def epoch_line(p: Progress, entry: Mapping[str, Any]) -> str:
    """One finished epoch: `training-loop: epoch 1/5: accuracy 0.8812, train loss 0.4100, 12.3 s` (`epoch 1:`
    when the total is unknown)."""
    number = f"{epoch_number(entry)}/{p.total}" if p.total else str(epoch_number(entry))
    text = f"{p.name}: epoch {number}: accuracy {accuracy_text(entry.get('accuracy'))}"
    if entry.get("trainLoss") is not None:
        text += f", train loss {entry['trainLoss']:.4f}"
    if entry.get("seconds") is not None:
        text += f", {entry['seconds']:.1f} s"
    return text


def phase_line(p: Progress) -> str:
    return f"{p.name}: {p.phase or 'submitted'}" + (f" ({p.message})" if p.message else "")


def in_jupyter() -> bool:
    """Whether this runs in a Jupyter kernel (an IPython shell with a kernel), where widgets display."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and hasattr(shell, "kernel")


class PlainDisplay:
    """One line per change of phase and per finished epoch."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream
        self._phase: object = ()  # nothing shown yet: the first update shows its phase, even none
        self._shown: set[int] = set()

    def _print(self, text: str) -> None:
        print(text, file=self.stream or sys.stdout, flush=True)

    def update(self, p: Progress) -> None:
        new_phase = p.phase != self._phase
        self._phase = p.phase
        if new_phase and p.phase not in FINAL_PHASES:
            self._print(phase_line(p))
        for entry in p.epochs:
            if entry["epoch"] not in self._shown:
                self._shown.add(entry["epoch"])
                self._print(epoch_line(p, entry))
        if new_phase and p.phase in FINAL_PHASES:  # after the epochs it ends
            self._print(phase_line(p))

    def close(self, p: Progress) -> None:
        self.update(p)
        if p.epochs:
            self._print(f"{p.name}: {summary(p)}")


class BarDisplay:
    """tqdm.auto's bar over the epochs, redrawn in place; the phase and accuracies in its postfix."""

    def __init__(self, name: str):
        from tqdm.auto import tqdm

        self._bar = tqdm(total=None, desc=name, unit="epoch", dynamic_ncols=True)
        self._failed_shown = False

    def update(self, p: Progress) -> None:
        bar = self._bar
        if p.total is not None and bar.total != p.total:
            bar.total = p.total
        if p.done != bar.n:
            bar.n = p.done
        postfix = p.phase or "submitted"
        if p.epochs:
            postfix += f", accuracy {accuracy_text(p.latest)}, best {accuracy_text(p.best)}"
        bar.set_postfix_str(postfix, refresh=False)
        bar.refresh()

    def close(self, p: Progress) -> None:
        self.update(p)
        if p.phase == FAILED:  # red, not the green a closed bar gets
            self._bar.colour = "red"
            if hasattr(self._bar, "container"):  # tqdm.notebook: its closing keeps a danger style
                self._bar.disp(bar_style="danger", check_delay=False)
        self._bar.close()
        # The cell's text output, which GitHub and nbconvert show (the widget's own text stays `0epoch`).
        print(f"{p.name}: {summary(p)}", flush=True)
        if p.phase == FAILED and p.message:
            print(f"{p.name} failed: {p.message}", file=sys.stderr, flush=True)


def live_display(name: str, jupyter: bool | None = None):
    """The bar in a Jupyter kernel, plain lines elsewhere (`jupyter` forces one or the other)."""
    if jupyter if jupyter is not None else in_jupyter():
        try:
            return BarDisplay(name)
        except ImportError:  # no tqdm: lines work everywhere
            pass
    return PlainDisplay()
