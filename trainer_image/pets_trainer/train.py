"""The tutorial's training function, as a library: `training_loop(config)` or `training_loop(**params)`.

It runs unchanged under `accelerate launch` (the `pets-train` entrypoint) and under
`accelerate.notebook_launcher` (see `pets_trainer.notebook`). CUDA is first touched here, inside
the launched processes.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list, set_seed
from torch.optim.lr_scheduler import OneCycleLR

from . import tracking
from .allocator import keep_freed_memory
from .checkpoint import SAME_JOB, Owner, restore_checkpoint, save_checkpoint
from .config import TrainConfig
from .data import build_dataloaders, build_datasets, eval_shard
from .errors import ConfigError
from .export import CONFIG_FILE, LABELS_FILE, MODEL_FILE, save_model
from .image_cache import ImageCache
from .image_index import scan_images
from .metrics import EpochResult, done_event, emit
from .model import FrozenEncoderClassifier, create_model, freeze_encoder, normalization
from .world import device_accelerator_available


@dataclass(frozen=True)
class TrainResult:
    history: list[EpochResult]
    classes: tuple[str, ...]

    @property
    def accuracy(self) -> float:
        return self.history[-1].accuracy

    @property
    def best_accuracy(self) -> float:
        return max(result.accuracy for result in self.history)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes in bf16 itself (AVX512-BF16 or AMX), rather than emulating it in fp32."""
    cpu = getattr(torch, "cpu", None)
    return any(getattr(cpu, check, lambda: False)() for check in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))


def supported_mixed_precision(requested: str, cpu: bool = False, native_bf16: Callable[[], bool] | None = None) -> str:
    """`requested` where the device computes in it natively, else "no".

    On a CPU that is bf16 where it has AVX512-BF16 or AMX: oneDNN's bf16 convolutions run the encoder's
    forward 2-3x faster there than fp32 (docs/performance-trainer.md). Without those instructions there
    is nothing to gain, and fp16 stays off on every CPU.
    """
    if requested == "no":
        return "no"
    if cpu or not torch.cuda.is_available():
        return "bf16" if requested == "bf16" and (native_bf16 or cpu_has_native_bf16)() else "no"
    if requested == "bf16" and not torch.cuda.is_bf16_supported():
        return "no"
    return requested


def sync_buffers_from_main_process(model: torch.nn.Module, accelerator: Accelerator) -> None:
    """Give every process the main process's BatchNorm statistics, as DDP does before a forward pass.

    In training each process updates its copy from its own batches after DDP's sync, so after the
    last step the copies differ a little; eval must use one set of statistics everywhere.
    """
    if accelerator.num_processes > 1:
        for buffer in model.buffers():
            torch.distributed.broadcast(buffer, src=0)


def checkpoint_fingerprint(config: TrainConfig, classes: tuple[str, ...], num_processes: int,
                           num_images: int) -> dict:
    """What a checkpoint's state depends on; resuming with anything else would be a different run.

    - model, classes: the saved weights' shapes and what each output means;
    - seed, train_fraction, the number of images: the train/eval split (another one would evaluate
      on images the model trained on) and the data order;
    - batch_size, num_processes (the world size), the number of images, epochs: the steps per epoch
      and so OneCycleLR's total, which the saved scheduler carries (another one ends the schedule
      early or fails once it is past its last step); the saved RNG states are one per process;
    - max_lr, lr_div_factor: the rest of the schedule; image_size: the input the weights were fitted to.
    Not in it: where the data and checkpoint are (paths differ between a pod and a notebook), pretrained
    weights (the checkpoint holds the whole model), mixed precision, loader and speed settings (they
    change how fast a run goes, not what it computes), and the job's identity (the owner check's).
    """
    keys = ("model", "seed", "batch_size", "epochs", "max_lr", "lr_div_factor", "image_size", "train_fraction")
    return {**{key: getattr(config, key) for key in keys}, "classes": list(classes), "num_processes": num_processes,
            "images": num_images}


def training_loop(config: TrainConfig | None = None, **overrides) -> TrainResult | None:
    """Train and evaluate; returns the result on the main process, None on the others."""
    config = (config or TrainConfig()).replace(**overrides)
    if not config.data_dir:
        raise ConfigError("data_dir is not set: the directory of <breed>_<n>.jpg images")
    if config.keep_freed_memory:
        keep_freed_memory()
    set_seed(config.seed)
    # Accelerate sets up a multi-process CPU group (gloo) only when told it runs on the CPU.
    use_cpu = config.cpu or not device_accelerator_available()
    mixed_precision = supported_mixed_precision(config.mixed_precision, use_cpu)
    # The job's trackers (spec.tracking: MLflow from its MLFLOW_* variables, TensorBoard into tensorboard_dir).
    settings = tracking.TrackingSettings.from_env(os.environ).replace(tensorboard_dir=config.tensorboard_dir)
    accelerator = Accelerator(mixed_precision=mixed_precision, cpu=use_cpu,
                              log_with=tracking.job_trackers(settings) or None)
    if mixed_precision != config.mixed_precision:
        accelerator.print(f"mixed precision {config.mixed_precision!r} is not available on {accelerator.device}; using 'no'", file=sys.stderr)

    with image_cache_for_run(accelerator, config) as cache:
        try:
            return _train(accelerator, config, cache, settings)
        except BaseException:
            tracking.end_failed(accelerator)  # the MLflow run ends FAILED rather than RUNNING for ever
            raise


@contextmanager
def image_cache_for_run(accelerator: Accelerator, config: TrainConfig) -> Iterator[ImageCache | None]:
    """`config.image_cache_dir`, or a temporary directory that a node's processes share and that goes with the run."""
    if not config.image_cache:
        yield None
        return
    if config.image_cache_dir:
        Path(config.image_cache_dir).mkdir(parents=True, exist_ok=True)
        yield ImageCache(config.image_cache_dir)
        return
    # Every process must use the same name; node-local directories of that name are fine.
    name = broadcast_object_list([f"pets-image-cache-{uuid.uuid4().hex}" if accelerator.is_main_process else None])[0]
    directory = Path(tempfile.gettempdir()) / name
    directory.mkdir(mode=0o700, exist_ok=True)
    try:
        yield ImageCache(directory)
    finally:
        # After a run every process has passed its last collective, so none reads the cache any more;
        # after a failure a process still reading just misses.
        if accelerator.is_local_main_process:
            shutil.rmtree(directory, ignore_errors=True)


@dataclass(frozen=True)
class TrainingParts:
    """What a run trains and evaluates with, once Accelerate has prepared it."""
    classes: tuple[str, ...]
    num_images: int  # train and eval, after unreadable ones were skipped
    model: torch.nn.Module  # prepared (DDP with several processes): for training
    eval_model: torch.nn.Module  # the same model unwrapped: eval runs outside DDP, shards differ in length
    optimizer: torch.optim.Optimizer
    lr_scheduler: OneCycleLR
    train_dataloader: Iterable
    eval_dataloader: Iterable  # this process's eval shard, not prepared (see `build_training_parts`)
    prepare_inputs: Callable[[torch.Tensor], torch.Tensor]  # normalization and memory format
    pin_memory: bool


def build_training_parts(accelerator: Accelerator, config: TrainConfig, cache: ImageCache | None) -> TrainingParts:
    """Data, model, optimizer and schedule, in the tutorial's order (the seeded random draws follow it)."""
    index = scan_images(config.data_dir, verify=config.verify_images)
    for line in index.skip_summary():
        accelerator.print(line, file=sys.stderr)
    train_set, eval_set = build_datasets(index, config, cache)
    eval_set = eval_shard(eval_set, accelerator.process_index, accelerator.num_processes)
    pin_memory = config.pin_memory == "true" or (config.pin_memory == "auto" and accelerator.device.type == "cuda")
    train_dataloader, eval_dataloader = build_dataloaders(train_set, eval_set, config, pin_memory)
    accelerator.print(
        f"{len(index.files)} images, {len(index.classes)} classes, {len(train_set)} train / {len(eval_set.dataset)} eval,"
        f" {accelerator.num_processes} process(es) on {accelerator.device}"
    )

    model = create_model(config.model, len(index.classes), config.pretrained, config.pretrained_weights)
    freeze_encoder(model)
    memory_format = torch.channels_last if config.channels_last else torch.contiguous_format
    model = model.to(accelerator.device, memory_format=memory_format)
    mean, std = normalization(model, accelerator.device)
    model = FrozenEncoderClassifier(model, encoder_no_grad=config.frozen_encoder_no_grad)

    optimizer = torch.optim.Adam(params=model.parameters(), lr=config.max_lr / config.lr_div_factor)
    lr_scheduler = OneCycleLR(
        optimizer=optimizer,
        max_lr=config.max_lr,
        epochs=config.epochs,
        steps_per_epoch=len(train_dataloader),
        div_factor=config.lr_div_factor,
    )
    # The eval loader is not prepared: Accelerate would pad every process's last batch to full size
    # with repeated images, and with few eval images per process most of the work would be repeats.
    model, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, lr_scheduler
    )

    def prepare_inputs(images: torch.Tensor) -> torch.Tensor:
        return ((images - mean) / std).contiguous(memory_format=memory_format)

    return TrainingParts(
        classes=index.classes, num_images=len(index.files), model=model, eval_model=accelerator.unwrap_model(model),
        optimizer=optimizer, lr_scheduler=lr_scheduler, train_dataloader=train_dataloader,
        eval_dataloader=eval_dataloader, prepare_inputs=prepare_inputs, pin_memory=pin_memory,
    )


def train_one_epoch(accelerator: Accelerator, parts: TrainingParts,
                    on_step: Callable[[int, torch.Tensor], None] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One pass over this process's training batches: (sum of the batch losses, number of batches), on the device.

    `on_step(batch_index, loss)` after each optimizer step (`tracking.step_logger`)."""
    parts.model.train()
    loss_sum = torch.zeros((), device=accelerator.device)
    batches = torch.zeros((), device=accelerator.device)
    for index, batch in enumerate(parts.train_dataloader):
        outputs = parts.model(parts.prepare_inputs(batch["image"]))
        loss = F.cross_entropy(outputs, batch["label"])
        accelerator.backward(loss)
        parts.optimizer.step()
        parts.lr_scheduler.step()
        parts.optimizer.zero_grad()
        loss_sum += loss.detach().float()
        batches += 1
        if on_step is not None:
            on_step(index, loss)
    return loss_sum, batches


def evaluate(accelerator: Accelerator, parts: TrainingParts) -> float:
    """The accuracy on the whole eval set: each process counts its shard, the counts are summed."""
    parts.model.eval()
    sync_buffers_from_main_process(parts.eval_model, accelerator)
    accurate = torch.zeros((), dtype=torch.long, device=accelerator.device)
    num_elems = torch.zeros((), dtype=torch.long, device=accelerator.device)
    for batch in parts.eval_dataloader:
        images = batch["image"].to(accelerator.device, non_blocking=parts.pin_memory)
        labels = batch["label"].to(accelerator.device, non_blocking=parts.pin_memory)
        with torch.no_grad():
            outputs = parts.eval_model(parts.prepare_inputs(images))
        predictions = outputs.argmax(dim=-1)
        accurate += (predictions == labels).sum()
        num_elems += labels.shape[0]
    # Every eval image sits in exactly one process's shard: the gathered counts are the whole set's.
    accurate, num_elems = accelerator.gather(torch.stack([accurate, num_elems])).view(-1, 2).sum(dim=0).tolist()
    return accurate / num_elems


def mean_over_processes(accelerator: Accelerator, total: torch.Tensor, count: torch.Tensor) -> float:
    """sum(total) / sum(count) over all processes (the train loss: per-batch losses over all batches)."""
    return (accelerator.reduce(total, "sum") / accelerator.reduce(count, "sum")).item()


def resume(accelerator: Accelerator, checkpoint_dir: Path | None, fingerprint: dict, owner: Owner = Owner(),
           resume_from: str = SAME_JOB) -> list[EpochResult]:
    """The finished epochs of the checkpoint to go on from (re-reported on the metric lines); [] for a fresh run.

    Another job's checkpoint is refused unless `resume_from` is "AnyJob" (see `pets_trainer.checkpoint`).
    """
    if not checkpoint_dir:
        return []
    history = restore_checkpoint(accelerator, checkpoint_dir, fingerprint, owner, resume_from)
    if history:
        accelerator.print(f"resumed from the checkpoint of epoch {history[-1].epoch} in {checkpoint_dir}")
        if accelerator.is_main_process:
            for result in history:
                emit(result.as_event(resumed=True))
    return history


def images_per_second(images: int, result: EpochResult) -> float:
    """Training throughput of an epoch: its train images (all processes) over its training time."""
    return round(images / result.train_seconds, 3) if result.train_seconds > 0 else 0.0


def _train(accelerator: Accelerator, config: TrainConfig, cache: ImageCache | None,
           settings: tracking.TrackingSettings) -> TrainResult | None:
    parts = build_training_parts(accelerator, config, cache)
    checkpoint_dir = Path(config.checkpoint_dir) if config.checkpoint_dir else None
    fingerprint = checkpoint_fingerprint(config, parts.classes, accelerator.num_processes, parts.num_images)
    owner = Owner(config.job_uid, config.job_name, config.job_namespace)
    tracking.start(accelerator, settings, config)
    history = resume(accelerator, checkpoint_dir, fingerprint, owner, config.resume_from)
    steps_per_epoch = len(parts.train_dataloader)
    train_images = len(parts.train_dataloader.dataset)
    for result in history:  # resumed from a checkpoint: this attempt's run has the epochs before it too
        tracking.log_epoch(accelerator, result, images_per_second(train_images, result), (result.epoch + 1) * steps_per_epoch)

    for epoch in range(len(history), config.epochs):
        started = time.perf_counter()
        on_step = tracking.step_logger(accelerator, config.log_every_steps, epoch * steps_per_epoch,
                                       lambda: parts.lr_scheduler.get_last_lr()[0])
        loss_sum, batches = train_one_epoch(accelerator, parts, on_step)
        train_seconds = time.perf_counter() - started
        accuracy = evaluate(accelerator, parts)
        train_loss = mean_over_processes(accelerator, loss_sum, batches)
        accelerator.print(f"epoch {epoch}: {100 * accuracy:.2f}")

        result = EpochResult(
            epoch=epoch,
            accuracy=round(accuracy, 6),
            train_loss=round(train_loss, 6),
            seconds=round(time.perf_counter() - started, 3),
            train_seconds=round(train_seconds, 3),
            eval_seconds=round(time.perf_counter() - started - train_seconds, 3),
        )
        history.append(result)
        if checkpoint_dir:
            save_checkpoint(accelerator, checkpoint_dir, epoch, history, fingerprint, owner)
        if config.output_dir and accelerator.is_main_process and result.accuracy >= max(r.accuracy for r in history):
            save_model(config.output_dir, parts.eval_model.model, config.model, config.image_size, parts.classes,
                       epoch=epoch, accuracy=result.accuracy)  # the best epoch so far
        if accelerator.is_main_process:
            emit(result.as_event())
        tracking.log_epoch(accelerator, result, images_per_second(train_images, result), (epoch + 1) * steps_per_epoch)

    if accelerator.is_main_process:
        emit(done_event(history))
    if config.output_dir:
        tracking.log_model(accelerator, config.output_dir, (CONFIG_FILE, LABELS_FILE, MODEL_FILE))
    is_main = accelerator.is_main_process
    # Without it each process aborts (SIGABRT) at exit when a process group was created.
    accelerator.end_training()
    return TrainResult(history=history, classes=parts.classes) if is_main else None
