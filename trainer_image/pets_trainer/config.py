"""The training parameters: the tutorial's values, plus the speed switches.

The defaults of the parameters a PetsTrainingJob's spec sets (model, seed, batch size, ...) are
the CRD's, read through the pod contract (`pets_api.contract`); the others are set here.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from pets_api.contract import MIXED_PRECISION_CHOICES, PIN_MEMORY_CHOICES, RESUME_FROM_CHOICES, option_defaults

from .errors import ConfigError

_CRD = option_defaults()


@dataclass(frozen=True)
class TrainConfig:
    """Everything `training_loop` needs. Defaults are the tutorial's values unless noted."""

    data_dir: str | None = None
    model: str = _CRD["model"]
    # The workers load weights only from a local file (pretrained_weights); pets-train fetches the Hub's first.
    pretrained: bool = _CRD["pretrained"]
    pretrained_weights: str | None = None
    # The tutorial passes "fp16"; the CRD's "no" is the only choice a CPU has.
    mixed_precision: str = _CRD["mixed_precision"]
    seed: int = _CRD["seed"]
    batch_size: int = _CRD["batch_size"]
    eval_batch_size: int | None = None  # None: twice batch_size, as in the tutorial
    epochs: int = _CRD["epochs"]
    max_lr: float = _CRD["max_lr"]
    lr_div_factor: float = 25.0  # Adam starts at max_lr / 25
    num_workers: int = _CRD["num_workers"]
    image_size: int = _CRD["image_size"]
    crop_scale: tuple[float, float] = (0.5, 1.0)
    train_fraction: float = 0.8
    checkpoint_dir: str | None = None
    output_dir: str | None = None  # the trained model goes here (pets_trainer.export)
    # Experiment tracking (pets_trainer.tracking; MLflow is configured by its own MLFLOW_* variables).
    tensorboard_dir: str | None = None  # TensorBoard event files go below it; None: no TensorBoard
    log_every_steps: int = _CRD["log_every_steps"]  # the batch loss and learning rate reach the trackers this often
    # The job the run belongs to (JOB_UID, JOB_NAME, JOB_NAMESPACE; all None when run by hand): its
    # checkpoints record it, and a run of another job resumes from them only with resume_from "AnyJob".
    job_uid: str | None = None
    job_name: str | None = None
    job_namespace: str | None = None
    resume_from: str = _CRD["resume_from"]
    verify_images: bool = True
    cpu: bool = False
    # Speed switches (not in the tutorial; each can be turned off to measure its share).
    draft_decode: bool = True
    image_cache: bool = True
    image_cache_dir: str | None = None  # None: a temporary directory per node, removed after the run
    persistent_workers: bool = True
    low_priority_workers: bool = True  # loader workers at nice 19 (see pets_trainer.data.lower_worker_priority)
    prefetch_factor: int = 2
    channels_last: bool = True
    keep_freed_memory: bool = True  # glibc malloc: no mmap, no trimming (see pets_trainer.allocator)
    frozen_encoder_no_grad: bool = True
    pin_memory: str = "auto"  # "auto": only when the accelerator is a GPU

    def __post_init__(self) -> None:
        object.__setattr__(self, "crop_scale", tuple(float(v) for v in self.crop_scale))
        problems = list(_problems(self))
        if problems:
            raise ConfigError("; ".join(problems))

    @property
    def effective_eval_batch_size(self) -> int:
        return self.eval_batch_size or 2 * self.batch_size

    def replace(self, **changes) -> TrainConfig:
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ConfigError(f"unknown training parameter(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        try:
            values = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"training configuration is not valid JSON: {error}") from None
        if not isinstance(values, dict):
            raise ConfigError("training configuration must be a JSON object")
        return cls().replace(**values)


def _problems(config: TrainConfig):
    positive_ints = ("batch_size", "epochs", "image_size", "prefetch_factor", "log_every_steps")
    for name in positive_ints:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            yield f"{name} must be an integer >= 1, got {value!r}"
    if config.eval_batch_size is not None and (not isinstance(config.eval_batch_size, int) or config.eval_batch_size < 1):
        yield f"eval_batch_size must be an integer >= 1, got {config.eval_batch_size!r}"
    if not isinstance(config.num_workers, int) or config.num_workers < 0:
        yield f"num_workers must be an integer >= 0, got {config.num_workers!r}"
    if not isinstance(config.seed, int) or config.seed < 0:
        yield f"seed must be an integer >= 0, got {config.seed!r}"
    if not config.max_lr > 0:
        yield f"max_lr must be > 0, got {config.max_lr!r}"
    if not config.lr_div_factor > 0:
        yield f"lr_div_factor must be > 0, got {config.lr_div_factor!r}"
    if not 0 < config.train_fraction < 1:
        yield f"train_fraction must be between 0 and 1, got {config.train_fraction!r}"
    low, high = config.crop_scale
    if not 0 < low <= high <= 1:
        yield f"crop_scale must be (min, max) with 0 < min <= max <= 1, got {config.crop_scale!r}"
    if config.mixed_precision not in MIXED_PRECISION_CHOICES:
        yield f"mixed_precision must be one of {', '.join(MIXED_PRECISION_CHOICES)}, got {config.mixed_precision!r}"
    if config.resume_from not in RESUME_FROM_CHOICES:
        yield f"resume_from must be one of {', '.join(RESUME_FROM_CHOICES)}, got {config.resume_from!r}"
    if config.pin_memory not in PIN_MEMORY_CHOICES:
        yield f"pin_memory must be one of {', '.join(PIN_MEMORY_CHOICES)}, got {config.pin_memory!r}"
    if not config.model:
        yield "model must be a timm model name"
