"""A disk cache of decoded images, so each JPEG is decoded once per run instead of once per epoch.

An entry is the uint8 pixel array (`.npy`) that the deterministic loading steps produced (decode at
draft size; for eval also the resize). Its name hashes the source file's path, size and
modification time and the steps, so a changed file or other steps never hit a stale entry. Loader
workers and processes may share one directory: entries are written under a temporary name and
renamed into place. The cache is best effort: a damaged entry is decoded again and replaced, and a
worker that cannot write (a full disk) warns once and goes on decoding.
"""
from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

from .atomic import write_atomically


class ImageCache:
    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.writable = True

    def entry_path(self, source: Path, steps: str) -> Path:
        stat = os.stat(source)
        identity = f"{os.path.abspath(source)}\0{stat.st_size}\0{stat.st_mtime_ns}\0{steps}"
        return self.directory / f"{hashlib.sha1(identity.encode()).hexdigest()}.npy"

    def load(self, source: Path, steps: str, produce: Callable[[Path], Image.Image]) -> Image.Image:
        """The cached result of `produce(source)`, which `steps` describes; produced and stored on a miss."""
        entry = self.entry_path(source, steps)
        try:
            return Image.fromarray(np.load(entry, allow_pickle=False))
        except (OSError, ValueError):
            pass  # not there yet, or damaged (a disk error, a foreign file): produce it and store it
        image = produce(source)
        self._store(entry, image)
        return image

    def _store(self, entry: Path, image: Image.Image) -> None:
        if not self.writable:
            return
        pixels = np.asarray(image)
        try:
            write_atomically(entry, lambda stream: np.save(stream, pixels, allow_pickle=False))
        except OSError as error:
            self.writable = False
            warnings.warn(f"image cache {self.directory} cannot be written ({error}); decoding images every epoch",
                          RuntimeWarning, stacklevel=2)
