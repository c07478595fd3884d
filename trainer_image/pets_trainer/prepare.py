"""Before the workers start: the data archive and the Hub weights, once per node, progress as metric lines.

`pets-train` runs `prepare_downloads` after reading its options and before `accelerate launch`,
so a node downloads each artefact once (never once per process), and pods sharing a cache volume
once in all (`fetch.ensure_archive` locks the volume; the Hub cache is keyed by file). Pod 0's
progress lines (`{"event": "init", ...}`) let the operator show `Initialized=False` with reason
`Downloading` and bytes done/total per artefact; `{"event": "initialized"}` ends the step. A
failure is a `DataUnavailable` / `ModelUnavailable` (one `error:` line naming the URL and why),
which the operator puts into status.message with that reason.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pets_api import metric_lines

from . import metrics
from .errors import DataError
from .fetch import DataUnavailable, ensure_archive, parse_checksum
from .image_index import scan_images

PROGRESS_INTERVAL = 2.0  # seconds between progress lines of one artefact (the issue asks "every few seconds")


@dataclass(frozen=True)
class Downloads:
    """What to fetch: an archive (url, "algo:hex", directory) and/or the Hub weights of a model."""
    data_url: str | None = None
    data_checksum: str | None = None
    data_archive_dir: str | None = None
    hub_model: str | None = None  # a timm model name: fetch its pretrained weights from the Hub
    data_dir: str | None = None  # where the images must be once the archive is unpacked (DATA_DIR)

    @property
    def empty(self) -> bool:
        return self.data_url is None and self.hub_model is None


class Reporter:
    """Prints `init` lines for one artefact, at most one every `interval` seconds (and always the last)."""

    def __init__(self, artefact: str, source: str, emit: Callable[[dict], None], interval: float = PROGRESS_INTERVAL,
                 clock: Callable[[], float] = time.monotonic):
        self.artefact, self.source, self.emit, self.interval, self.clock = artefact, source, emit, interval, clock
        self.last: float | None = None

    def __call__(self, done: int, total: int | None) -> None:
        now = self.clock()
        finished = total is not None and done >= total
        if self.last is not None and now - self.last < self.interval and not finished:
            return
        self.last = now
        self.emit(metric_lines.init_event(self.artefact, self.source, done, total))


def _require_images(url: str, data_dir: Path) -> None:
    """An archive that unpacked without `<breed>_<n>.jpg` images where data.path points is unusable data."""
    try:
        scan_images(data_dir, verify=False)
    except DataError as error:
        raise DataUnavailable(f"{url}: the unpacked archive has no usable images: {error}") from None


def prepare_downloads(downloads: Downloads, emit: Callable[[dict], None] = metrics.emit) -> str | None:
    """Fetch what `downloads` names; the local weights file when the Hub's were fetched, else None."""
    if downloads.empty:
        return None
    weights = None
    if downloads.data_url is not None:
        if not downloads.data_checksum or not downloads.data_archive_dir:
            raise DataUnavailable(f"{downloads.data_url}: DATA_CHECKSUM and DATA_ARCHIVE_DIR must be set with DATA_URL")
        checksum = parse_checksum(downloads.data_checksum)
        report = Reporter("data", downloads.data_url, emit)
        report(0, None)
        ensure_archive(downloads.data_url, checksum, Path(downloads.data_archive_dir), progress=report)
        if downloads.data_dir is not None:
            _require_images(downloads.data_url, Path(downloads.data_dir))
    if downloads.hub_model is not None:
        from .hub import fetch_weights, hub_repository  # huggingface_hub and timm only when needed

        report = Reporter("model", hub_repository(downloads.hub_model), emit)
        report(0, None)
        weights = str(fetch_weights(downloads.hub_model, progress=report))
    emit(metric_lines.initialized_event())
    return weights
