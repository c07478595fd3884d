"""The decoded-image cache: each image decoded once, the same pixels, never a stale or foreign entry."""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch

from pets_trainer.config import TrainConfig
from pets_trainer.data import DecodeSteps, build_datasets
from pets_trainer.image_cache import ImageCache
from pets_trainer.image_index import scan_images
from pets_trainer.synthetic import generate_synthetic_pets


class CountingDecode:
    def __init__(self, steps: DecodeSteps):
        self.steps = steps
        self.calls = 0

    def __call__(self, path):
        self.calls += 1
        return self.steps(path)


@pytest.fixture
def images(tmp_path):
    return generate_synthetic_pets(tmp_path / "images", classes=2, images_per_class=5, image_size=96, seed=3)


@pytest.fixture
def cache(tmp_path):
    (tmp_path / "cache").mkdir()
    return ImageCache(tmp_path / "cache")


def entries(cache: ImageCache) -> list:
    return sorted(cache.directory.glob("*.npy"))


def test_a_second_load_reads_the_entry_with_the_same_pixels(images, cache):
    decode = CountingDecode(DecodeSteps(draft_size=48))
    first = cache.load(images[0], decode.steps.describe(), decode)
    second = cache.load(images[0], decode.steps.describe(), decode)
    assert decode.calls == 1
    assert second.mode == "RGB" and second.size == first.size == (48, 48)
    assert np.array_equal(np.asarray(first), np.asarray(second))
    assert len(entries(cache)) == 1
    assert not list(cache.directory.glob(".*"))  # no temporary file left behind


def test_other_steps_and_a_changed_file_do_not_hit_the_entry(images, cache):
    decode = CountingDecode(DecodeSteps())
    cache.load(images[0], "decode draft=None resize=None", decode)
    cache.load(images[0], "decode draft=None resize=32", decode)
    assert decode.calls == 2
    stat = os.stat(images[0])
    os.utime(images[0], ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    cache.load(images[0], "decode draft=None resize=None", decode)
    assert decode.calls == 3 and len(entries(cache)) == 3


def test_a_damaged_entry_is_decoded_again_and_replaced(images, cache):
    decode = CountingDecode(DecodeSteps())
    cache.load(images[0], "steps", decode)
    [entry] = entries(cache)
    entry.write_bytes(b"not an array")
    image = cache.load(images[0], "steps", decode)
    assert decode.calls == 2 and image.size == (96, 96)
    cache.load(images[0], "steps", decode)
    assert decode.calls == 2


def test_a_cache_that_cannot_be_written_warns_once_and_keeps_decoding(images, tmp_path):
    cache = ImageCache(tmp_path / "missing")
    decode = CountingDecode(DecodeSteps())
    with pytest.warns(RuntimeWarning, match="cannot be written"):
        first = cache.load(images[0], "steps", decode)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = cache.load(images[0], "steps", decode)
    assert decode.calls == 2 and not cache.writable
    assert np.array_equal(np.asarray(first), np.asarray(second))


def test_cached_items_equal_uncached_items_in_every_epoch(images, cache):
    index = scan_images(images[0].parent)
    config = TrainConfig(data_dir=str(images[0].parent), image_size=40)
    plain_train, plain_eval = build_datasets(index, config)
    cached_train, cached_eval = build_datasets(index, config, cache)
    for _ in range(2):  # the first epoch fills the cache, the second reads it
        for plain, cached in ((plain_train, cached_train), (plain_eval, cached_eval)):
            for item in range(len(plain)):
                torch.manual_seed(item)  # the same random crop on both sides
                expected = plain[item]
                torch.manual_seed(item)
                assert torch.equal(cached[item]["image"], expected["image"])
    assert len(entries(cache)) == len(index.files)  # one entry per image: train and eval steps differ, files do not repeat
