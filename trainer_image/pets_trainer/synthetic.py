"""A synthetic pets-style data set: real JPEG files named `<breed>_<n>.jpg`, learnable by a CNN.

Each class has its own colour palette (background hue and the hue of a blob drawn on it); position,
size, brightness and noise vary per image, so a classifier has something to learn but nothing
to memorise by pixel. The bytes depend only on the parameters, and each file is written to a
temporary name and renamed into place, so several processes (pods sharing a directory, the two
ranks of a test) can generate into the same directory at once.
"""
from __future__ import annotations

import colorsys
from pathlib import Path

import numpy as np
from PIL import Image

from .atomic import write_atomically

# The 37 Oxford-IIIT Pets breeds, in the data set's spelling (cats capitalised, dogs lower case).
BREEDS = (
    "Abyssinian", "american_bulldog", "Bengal", "american_pit_bull_terrier", "Birman", "basset_hound",
    "Bombay", "beagle", "British_Shorthair", "boxer", "Egyptian_Mau", "chihuahua", "Maine_Coon",
    "english_cocker_spaniel", "Persian", "english_setter", "Ragdoll", "german_shorthaired",
    "Russian_Blue", "great_pyrenees", "Siamese", "havanese", "Sphynx", "japanese_chin", "keeshond",
    "leonberger", "miniature_pinscher", "newfoundland", "pomeranian", "pug", "saint_bernard",
    "samoyed", "scottish_terrier", "shiba_inu", "staffordshire_bull_terrier", "wheaten_terrier",
    "yorkshire_terrier",
)
JPEG_QUALITY = 90


def synthetic_file_name(breed: str, number: int) -> str:
    return f"{breed}_{number}.jpg"


def image_dimensions(image_size: int | tuple[int, int]) -> tuple[int, int]:
    """(width, height): a side for square images, or the pair itself."""
    return (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)


def render_image(class_index: int, classes: int, image_index: int, image_size: int | tuple[int, int], seed: int) -> Image.Image:
    rng = np.random.default_rng([seed, class_index, image_index])
    width, height = image_dimensions(image_size)
    hue = class_index / classes
    background = colorsys.hsv_to_rgb(hue, rng.uniform(0.55, 0.9), rng.uniform(0.55, 0.95))
    blob = colorsys.hsv_to_rgb((hue + 0.5) % 1.0, rng.uniform(0.6, 1.0), rng.uniform(0.6, 1.0))
    pixels = np.empty((height, width, 3), dtype=np.float32)
    pixels[:] = np.array(background, dtype=np.float32)
    rows, cols = np.mgrid[0:height, 0:width]
    center = rng.uniform(0.3, 0.7, size=2) * np.array([height, width])
    radius = rng.uniform(0.15, 0.3) * min(width, height)
    inside = (rows - center[0]) ** 2 + (cols - center[1]) ** 2 <= radius**2
    pixels[inside] = np.array(blob, dtype=np.float32)
    pixels += rng.normal(0.0, 0.06, size=pixels.shape).astype(np.float32)
    return Image.fromarray((np.clip(pixels, 0.0, 1.0) * 255).astype(np.uint8))


def generate_synthetic_pets(
    out_dir: str | Path, classes: int = 4, images_per_class: int = 20, image_size: int | tuple[int, int] = 64,
    seed: int = 0,
) -> list[Path]:
    """Write `classes * images_per_class` JPEGs into `out_dir` (created if needed); return their paths.

    `image_size` is the side of square images or their (width, height) (Oxford-IIIT Pets photos are
    mostly about 500 x 375).

    Files already present are kept: their content would be byte-identical.
    """
    if not 2 <= classes <= len(BREEDS):
        raise ValueError(f"classes must be between 2 and {len(BREEDS)}, got {classes}")
    if images_per_class < 1:
        raise ValueError(f"images_per_class must be >= 1, got {images_per_class}")
    if min(image_dimensions(image_size)) < 8:
        raise ValueError(f"image_size must be >= 8, got {image_size}")
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    written = []
    for class_index, breed in enumerate(BREEDS[:classes]):
        for image_index in range(images_per_class):
            target = root / synthetic_file_name(breed, image_index + 1)
            if not target.exists():
                image = render_image(class_index, classes, image_index, image_size, seed)
                write_atomically(target, lambda stream: image.save(stream, format="JPEG", quality=JPEG_QUALITY))
            written.append(target)
    return written
