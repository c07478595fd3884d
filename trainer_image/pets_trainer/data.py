"""The tutorial's data pipeline: a seeded 80/20 split, its transforms, its data loaders."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Subset
from torchvision.transforms import Compose, RandomResizedCrop, Resize, ToTensor

from .config import TrainConfig
from .errors import DataError
from .image_cache import ImageCache
from .image_index import ImageIndex


@dataclass(frozen=True)
class DecodeSteps:
    """The part of loading an image that is the same every epoch: decode, and for eval also resize.

    With `draft_size`, a JPEG is decoded by libjpeg directly at the smallest 1/2, 1/4 or 1/8 scale
    that is still at least `draft_size` on both sides, instead of at full size. `resize` is the
    tutorial's eval `Resize((resize, resize))`.
    """

    draft_size: int | None = None
    resize: int | None = None

    def __call__(self, path: Path) -> Image.Image:
        with Image.open(path) as raw:
            if self.draft_size:
                raw.draft("RGB", (self.draft_size, self.draft_size))
            image = raw.convert("RGB")
        if self.resize:
            image = Resize((self.resize, self.resize))(image)
        return image

    def describe(self) -> str:
        """Names the result in the image cache: other steps must never hit the same entry."""
        return f"decode draft={self.draft_size} resize={self.resize}"


class PetsDataset(Dataset):
    """Items are `{"image": tensor, "label": int}` as in the tutorial.

    An image is `transform(decode(file))`; with a `cache`, `decode`'s result is kept on disk after
    the first epoch, so only the random `transform` runs again.
    """

    def __init__(self, files, labels, transform, decode: DecodeSteps = DecodeSteps(), cache: ImageCache | None = None):
        self.files = list(files)
        self.labels = list(labels)
        self.transform = transform
        self.decode = decode
        self.cache = cache

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> dict:
        path = self.files[index]
        image = self.cache.load(path, self.decode.describe(), self.decode) if self.cache else self.decode(path)
        return {"image": self.transform(image), "label": self.labels[index]}


@dataclass(frozen=True)
class Split:
    train: tuple[int, ...]
    eval: tuple[int, ...]


def split_indices(count: int, seed: int, train_fraction: float = 0.8) -> Split:
    """The tutorial's split: a permutation from `seed`, the first 80% for training.

    Its own RandomState (not the global one) keeps the split independent of what else ran,
    so every rank on every node computes the same split.
    """
    permutation = np.random.RandomState(seed).permutation(count)
    cut = int(train_fraction * count)
    if cut < 1 or cut >= count:
        raise DataError(
            f"{count} image(s) cannot be split {train_fraction:.0%}/{1 - train_fraction:.0%} into"
            " non-empty train and eval sets"
        )
    return Split(train=tuple(int(i) for i in permutation[:cut]), eval=tuple(int(i) for i in permutation[cut:]))


def train_transform(config: TrainConfig) -> Compose:
    size = (config.image_size, config.image_size)
    return Compose([RandomResizedCrop(size, scale=config.crop_scale), ToTensor()])


def eval_transform(config: TrainConfig) -> Compose:
    """What follows `eval_decode_steps`, which already did the tutorial's Resize."""
    return Compose([ToTensor()])


def train_draft_size(config: TrainConfig) -> int:
    # The smallest crop RandomResizedCrop takes covers crop_scale[0] of the area; decoding so that
    # even it still has image_size pixels per side avoids upscaling more than full decode would.
    return math.ceil(config.image_size / math.sqrt(config.crop_scale[0]))


def train_decode_steps(config: TrainConfig) -> DecodeSteps:
    return DecodeSteps(draft_size=train_draft_size(config) if config.draft_decode else None)


def eval_decode_steps(config: TrainConfig) -> DecodeSteps:
    return DecodeSteps(draft_size=config.image_size if config.draft_decode else None, resize=config.image_size)


def build_datasets(
    index: ImageIndex, config: TrainConfig, cache: ImageCache | None = None
) -> tuple[PetsDataset, PetsDataset]:
    split = split_indices(len(index.files), config.seed, config.train_fraction)

    def subset(indices, transform, decode):
        files = [Path(index.files[i]) for i in indices]
        labels = [index.labels[i] for i in indices]
        return PetsDataset(files, labels, transform, decode, cache)

    return (
        subset(split.train, train_transform(config), train_decode_steps(config)),
        subset(split.eval, eval_transform(config), eval_decode_steps(config)),
    )


def eval_shard(eval_set: PetsDataset, process_index: int, num_processes: int) -> Subset:
    """This process's share of the eval images: every `num_processes`-th, starting at its index.

    The shards partition the set, so counts summed over the processes cover each image once.
    """
    return Subset(eval_set, range(process_index, len(eval_set), num_processes))


# The lowest priority Linux has; a process may always lower its own without privileges.
LOADER_WORKER_NICENESS = 19


def lower_worker_priority(_worker_id: int) -> None:
    """A loader worker's `worker_init_fn`: it runs at the lowest CPU priority.

    When the CPUs are all busy (training on the CPU: the torch threads use every core), a worker
    that preempts one of the torch threads stalls the whole op it takes part in, because each op
    waits for its slowest thread. At nice 19 the workers take the CPU the torch threads leave idle
    (the Python between ops, the optimizer step) and get it all whenever the training loop waits for
    a batch, so they still keep up; on a GPU node, where the CPUs are mostly idle, it changes nothing.
    """
    os.nice(LOADER_WORKER_NICENESS - os.nice(0))


def build_dataloaders(
    train_set: Dataset, eval_set: Dataset, config: TrainConfig, pin_memory: bool
) -> tuple[DataLoader, DataLoader]:
    workers = config.num_workers
    loader_options = dict(
        num_workers=workers,
        pin_memory=pin_memory,
        persistent_workers=config.persistent_workers and workers > 0,
        prefetch_factor=config.prefetch_factor if workers > 0 else None,
        worker_init_fn=lower_worker_priority if config.low_priority_workers and workers > 0 else None,
    )
    train_loader = DataLoader(train_set, shuffle=True, batch_size=config.batch_size, **loader_options)
    eval_loader = DataLoader(eval_set, shuffle=False, batch_size=config.effective_eval_batch_size, **loader_options)
    return train_loader, eval_loader
