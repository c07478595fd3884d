"""The tutorial's split, transforms and data set items; decoding JPEGs at the needed size."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import Compose, Resize, ToTensor

from pets_trainer.config import TrainConfig
from pets_trainer.data import (
    LOADER_WORKER_NICENESS,
    DecodeSteps,
    PetsDataset,
    build_dataloaders,
    build_datasets,
    eval_shard,
    split_indices,
    train_decode_steps,
    train_draft_size,
)
from pets_trainer.errors import DataError
from pets_trainer.image_index import scan_images
from pets_trainer.synthetic import generate_synthetic_pets


def test_split_is_eighty_twenty_and_a_partition():
    split = split_indices(100, seed=42)
    assert len(split.train) == 80 and len(split.eval) == 20
    assert sorted(split.train + split.eval) == list(range(100))


def test_split_depends_only_on_the_seed():
    torch.manual_seed(0)
    first = split_indices(50, seed=3)
    torch.manual_seed(1)
    np.random.seed(123)  # the global RNG (which the tutorial used) must not matter
    assert split_indices(50, seed=3) == first
    assert split_indices(50, seed=4) != first


def test_split_matches_the_tutorial_permutation():
    np.random.seed(42)  # the tutorial: set_seed(42), then np.random.permutation
    permutation = np.random.permutation(30)
    split = split_indices(30, seed=42)
    assert list(split.train) == list(permutation[:24]) and list(split.eval) == list(permutation[24:])


def test_too_few_images_to_split_is_an_error():
    with pytest.raises(DataError, match="cannot be split"):
        split_indices(2, seed=0, train_fraction=0.3)


@pytest.fixture(scope="module")
def large_jpegs(tmp_path_factory):
    root = tmp_path_factory.mktemp("large")
    generate_synthetic_pets(root, classes=2, images_per_class=5, image_size=256, seed=1)
    return root


def test_items_are_tutorial_dicts_with_model_sized_images(large_jpegs):
    config = TrainConfig(data_dir=str(large_jpegs), image_size=64)
    train_set, eval_set = build_datasets(scan_images(large_jpegs), config)
    assert (len(train_set), len(eval_set)) == (8, 2)
    item = train_set[0]
    assert set(item) == {"image", "label"}
    assert item["image"].shape == (3, 64, 64) and item["image"].dtype == torch.float32
    assert 0.0 <= item["image"].min() and item["image"].max() <= 1.0
    assert eval_set[0]["image"].shape == (3, 64, 64)


def test_draft_decoding_reads_a_smaller_image_that_still_covers_the_crop(large_jpegs):
    path = sorted(large_jpegs.iterdir())[0]
    config = TrainConfig(image_size=64)
    with Image.open(path) as image:
        image.draft("RGB", (train_draft_size(config),) * 2)
        drafted = image.convert("RGB").size
    # 256 px decoded at 1/2 scale covers ceil(64 / sqrt(0.5)) = 91 px; at 1/4 it would not.
    assert train_draft_size(config) == 91
    assert drafted == (128, 128)
    assert train_decode_steps(config) == DecodeSteps(draft_size=91)
    seen = []
    dataset = PetsDataset([path], [0], transform=lambda image: seen.append(image.size) or 0, decode=DecodeSteps(draft_size=91))
    dataset[0]
    assert seen == [(128, 128)]
    PetsDataset([path], [0], transform=lambda image: seen.append(image.size) or 0)[0]
    assert seen[-1] == (256, 256)


def test_eval_decoding_drafts_no_smaller_than_the_model_input_then_resizes(large_jpegs):
    config = TrainConfig(data_dir=str(large_jpegs), image_size=64)
    _, eval_set = build_datasets(scan_images(large_jpegs), config)
    assert eval_set.decode == DecodeSteps(draft_size=64, resize=64)
    off = TrainConfig(data_dir=str(large_jpegs), image_size=64, draft_decode=False)
    assert [dataset.decode for dataset in build_datasets(scan_images(large_jpegs), off)] == [
        DecodeSteps(), DecodeSteps(resize=64)]


def test_eval_images_are_the_tutorials_resize_then_to_tensor(large_jpegs):
    config = TrainConfig(data_dir=str(large_jpegs), image_size=48, draft_decode=False)
    _, eval_set = build_datasets(scan_images(large_jpegs), config)
    with Image.open(eval_set.files[0]) as raw:
        expected = Compose([Resize((48, 48)), ToTensor()])(raw.convert("RGB"))
    assert torch.equal(eval_set[0]["image"], expected)


def test_loaders_follow_the_tutorial_batch_sizes_and_switches(large_jpegs):
    config = TrainConfig(data_dir=str(large_jpegs), image_size=32, batch_size=3, num_workers=0)
    train_set, eval_set = build_datasets(scan_images(large_jpegs), config)
    train_loader, eval_loader = build_dataloaders(train_set, eval_set, config, pin_memory=False)
    assert (train_loader.batch_size, eval_loader.batch_size) == (3, 6)
    assert not train_loader.persistent_workers
    batch = next(iter(train_loader))
    assert batch["image"].shape == (3, 3, 32, 32) and batch["label"].shape == (3,)
    with_workers = config.replace(num_workers=2, prefetch_factor=3)
    train_loader, _ = build_dataloaders(train_set, eval_set, with_workers, pin_memory=False)
    assert train_loader.persistent_workers and train_loader.prefetch_factor == 3
    train_loader, _ = build_dataloaders(train_set, eval_set, with_workers.replace(persistent_workers=False), pin_memory=False)
    assert not train_loader.persistent_workers


class _Niceness(torch.utils.data.Dataset):
    """Each item is the niceness of the process that loads it."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> int:
        return os.nice(0)


@pytest.mark.parametrize(("low_priority", "expected"), [(True, LOADER_WORKER_NICENESS), (False, None)])
def test_loader_workers_run_at_the_lowest_priority_unless_switched_off(low_priority, expected):
    config = TrainConfig(data_dir="/d", batch_size=1, num_workers=1, low_priority_workers=low_priority)
    train_loader, eval_loader = build_dataloaders(_Niceness(), _Niceness(), config, pin_memory=False)
    own = os.nice(0)
    for loader in (train_loader, eval_loader):
        assert {value for batch in loader for value in batch.tolist()} == {own if expected is None else expected}
    assert os.nice(0) == own  # the training process itself keeps its priority


@pytest.mark.parametrize("processes", [1, 2, 3, 16])
def test_eval_shards_partition_the_eval_set_without_repeats(processes):
    eval_set = PetsDataset([f"{i}.jpg" for i in range(21)], list(range(21)), transform=None)
    shards = [eval_shard(eval_set, index, processes) for index in range(processes)]
    covered = [i for shard in shards for i in shard.indices]
    assert sorted(covered) == list(range(21))  # every image once, none repeated to even out batches
    assert max(len(s) for s in shards) - min(len(s) for s in shards) <= 1
