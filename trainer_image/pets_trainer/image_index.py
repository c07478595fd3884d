"""Find the labelled images in a directory (Oxford-IIIT Pets layout: `<breed>_<n>.jpg`).

Imports only PIL, so the `pets-train` launcher can check the data before starting the
(slow to import) training processes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from .errors import DataError

# The tutorial's rule: the label is everything before the last `_<digits>.jpg`.
LABEL_PATTERN = re.compile(r"^(.*)_\d+\.jpg$")
EXPECTED_NAMES = "<breed>_<n>.jpg"
# Decoding at 1/8 scale reads the whole entropy-coded stream (so truncation is caught) cheaply.
VERIFY_DRAFT_SIZE = (8, 8)


def label_of(file_name: str) -> str | None:
    match = LABEL_PATTERN.match(file_name)
    return match.group(1) if match else None


@dataclass(frozen=True)
class ImageIndex:
    """The usable images, sorted by file name, with integer labels into `classes` (sorted)."""

    files: tuple[Path, ...]
    labels: tuple[int, ...]
    classes: tuple[str, ...]
    skipped_names: tuple[str, ...] = ()
    skipped_unreadable: tuple[str, ...] = ()

    def skip_summary(self) -> list[str]:
        lines = []
        if self.skipped_names:
            lines.append(
                f"skipped {len(self.skipped_names)} file(s) whose names do not match {EXPECTED_NAMES}"
                f" (e.g. {self.skipped_names[0]!r})"
            )
        if self.skipped_unreadable:
            lines.append(
                f"skipped {len(self.skipped_unreadable)} unreadable or corrupt image(s)"
                f" (e.g. {self.skipped_unreadable[0]!r})"
            )
        return lines


# What opening and decoding a file that is not a (whole) image raises.
UNREADABLE_IMAGE_ERRORS = (OSError, UnidentifiedImageError, ValueError, SyntaxError, Image.DecompressionBombError)


def is_readable_image(path: Path) -> bool:
    try:
        with Image.open(path) as image:
            image.draft("RGB", VERIFY_DRAFT_SIZE)
            image.load()
        return True
    except UNREADABLE_IMAGE_ERRORS:
        return False


def scan_images(data_dir: str | Path, verify: bool = True) -> ImageIndex:
    """Index `data_dir`; raise DataError with a message a user can act on when it cannot be used."""
    root = Path(data_dir)
    if not root.exists():
        raise DataError(f"data directory {root} does not exist")
    if not root.is_dir():
        raise DataError(f"data directory {root} is not a directory")
    # Hidden files (e.g. the synthetic generator's temporaries) are not candidates at all.
    names = sorted(entry.name for entry in root.iterdir() if entry.is_file() and not entry.name.startswith("."))
    if not names:
        raise DataError(f"data directory {root} is empty: expected {EXPECTED_NAMES} images")

    matching = [name for name in names if label_of(name) is not None]
    skipped_names = tuple(name for name in names if label_of(name) is None)
    if not matching:
        raise DataError(
            f"no file in {root} matches {EXPECTED_NAMES} ({len(names)} file(s) with other names,"
            f" e.g. {names[0]!r})"
        )
    if verify:
        readable = [name for name in matching if is_readable_image(root / name)]
        readable_names = set(readable)
        skipped_unreadable = tuple(name for name in matching if name not in readable_names)
        if not readable:
            raise DataError(
                f"none of the {len(matching)} image(s) in {root} could be read"
                f" (corrupt or not images, e.g. {matching[0]!r})"
            )
    else:
        readable, skipped_unreadable = matching, ()

    classes = tuple(sorted({label_of(name) for name in readable}))
    if len(classes) < 2:
        raise DataError(
            f"found only one class ({classes[0]!r}) in {root}: a classifier needs images of at least two breeds"
        )
    class_ids = {name: index for index, name in enumerate(classes)}
    return ImageIndex(
        files=tuple(root / name for name in readable),
        labels=tuple(class_ids[label_of(name)] for name in readable),
        classes=classes,
        skipped_names=skipped_names,
        skipped_unreadable=skipped_unreadable,
    )
