"""Write a file so that readers see either nothing or the whole of it, even with several writers.

The trainer's one way to do so: synthetic images, image cache entries and checkpoint markers.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable


def write_atomically(target: Path, write: Callable[[BinaryIO], None]) -> None:
    """`write(stream)` into a temporary file beside `target`, then rename it into place."""
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
