"""A small archive with the real Oxford-IIIT Pets `images.tar.gz` layout and quirks: everything
under `images/`, capitalised cat breeds, multi-underscore dog breeds, a few `.mat` files, and
images that are not plain RGB JPEGs (grayscale, RGBA, CMYK), built from synthetic pets."""
from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

from PIL import Image

from pets_trainer.synthetic import generate_synthetic_pets

QUIRKS = {"Bengal_1.jpg": "L", "american_pit_bull_terrier_2.jpg": "RGBA", "Abyssinian_3.jpg": "CMYK"}
MAT_FILES = ("Abyssinian_100.mat", "Abyssinian_101.mat", "Abyssinian_102.mat")


def pets_images(directory: Path, classes: int = 4, images_per_class: int = 8, image_size: int = 48) -> Path:
    """`directory/images/` with the quirks above; returns the images directory."""
    images = directory / "images"
    generate_synthetic_pets(images, classes=classes, images_per_class=images_per_class, image_size=image_size, seed=7)
    breeds = sorted({path.name.rsplit("_", 1)[0] for path in images.glob("*.jpg")})
    for name, mode in QUIRKS.items():
        breed = name.rsplit("_", 1)[0]
        if breed in breeds:
            with Image.open(images / name) as image:
                converted = image.convert(mode)
            if mode == "RGBA":  # the real archive has PNG data under a .jpg name for some of these
                converted.save(images / name, format="PNG")
            else:
                converted.save(images / name, format="JPEG")
    for name in MAT_FILES:
        (images / name).write_bytes(b"MATLAB 5.0 MAT-file stand-in")
    return images


def tar_gz_bytes(root: Path, extra: dict[str, bytes] | None = None, links: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(root.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(root)), recursive=False)
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return buffer.getvalue()


def zip_bytes(root: Path, extra: dict[str, bytes] | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                bundle.write(path, str(path.relative_to(root)))
        for name, data in (extra or {}).items():
            bundle.writestr(name, data)
    return buffer.getvalue()
