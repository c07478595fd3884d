"""Pod 0's download progress lines -> the job's `Initialized` condition (pure).

`pets-train` downloads the data archive and the Hub weights before the training processes start
and prints `init` lines (bytes done/total per artefact), then one `initialized` line
(`metric_lines`). A job with something to download (`needs_initialization`) shows
`Initialized=False`, reason `Downloading`, with a message of every artefact's progress, and
phase Pending until pod 0 says it is done; then `Initialized=True`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pets_api import contract
from pets_api.metric_lines import EVENT, INIT, INITIALIZED

from . import builders

DOWNLOADING = "Downloading"
DOWNLOADED = "Downloaded"


@dataclass(frozen=True)
class Initialization:
    """What pod 0 said of its downloads: artefact -> (source, done, total); whether they are done."""
    artefacts: dict[str, tuple[str, int, int | None]] = field(default_factory=dict)
    done: bool = False

    def message(self) -> str:
        if self.done:
            fetched = ", ".join(f"{name} from {source}" for name, (source, _, _) in self.artefacts.items())
            return f"downloaded {fetched}" if fetched else "downloads done"
        if not self.artefacts:
            return "waiting for pod 0 to start its downloads"
        parts = [f"{name} {_size(done)} of {_size(total) if total is not None else '?'} from {source}"
                 for name, (source, done, total) in self.artefacts.items()]
        return "downloading: " + "; ".join(parts)


def _size(count: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if count < 1024:
            return f"{count} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def is_init_event(event: Mapping[str, Any] | None) -> bool:
    return event is not None and event.get(EVENT) in (INIT, INITIALIZED)


def fold(state: Initialization, event: Mapping[str, Any]) -> Initialization:
    """`state` with one `init` / `initialized` event applied; other or malformed events change nothing."""
    if event.get(EVENT) == INITIALIZED:
        return replace(state, done=True)
    if event.get(EVENT) != INIT:
        return state
    artefact, source, done, total = (event.get(k) for k in ("artefact", "source", "done", "total"))
    if not isinstance(artefact, str) or not isinstance(done, int) or isinstance(done, bool) or \
            (total is not None and (not isinstance(total, int) or isinstance(total, bool))):
        return state
    return replace(state, artefacts={**state.artefacts, artefact: (str(source or ""), done, total)})


def needs_initialization(spec: Mapping[str, Any]) -> bool:
    """Whether pets-train downloads something before training: an archive, or the Hub's weights."""
    return contract.data_download(spec) is not None or builders.hub_weights(spec)
