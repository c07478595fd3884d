"""Write a file so that readers see either nothing or the whole of it, even with several writers.

The trainer's one way to do so: synthetic images, image cache entries, checkpoint markers and the
exported model. The file is the temporary file's mode (0600) unless a `mode` is given.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomically(target: Path, write: Callable[[BinaryIO], None], mode: int | None = None) -> None:
    """`write(stream)` into a temporary file beside `target`, then rename it into place with `mode`
    (exactly: the umask does not apply), so the file is never seen with another mode."""
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
            if mode is not None:
                os.fchmod(stream.fileno(), mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
