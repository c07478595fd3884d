"""A PetsTrainingJob's spec with the CRD's defaults applied (the API server applies them too;
this keeps the operator correct against objects written before a default existed)."""
from __future__ import annotations

from typing import Any, Mapping

DEFAULTS: dict[str, Any] = {
    "numNodes": 1,
    "processesPerNode": 1,
    "model": "resnet50d",
    "pretrained": False,
    "mixedPrecision": "no",
    "seed": 42,
    "batchSize": 64,
    "epochs": 5,
    "maxLearningRate": 0.03,
    "numWorkers": 4,
    "imageSize": 224,
    "masterPort": 29500,
    "backoffLimit": 0,
}
SYNTHETIC_DEFAULTS = {"imagesPerClass": 20, "classes": 4, "imageSize": 64}
DEFAULT_CHECKPOINT_PATH = "/checkpoints"
DATA_MOUNT_PATH = "/data"


def with_defaults(spec: Mapping[str, Any] | None, default_image: str) -> dict[str, Any]:
    result = {**DEFAULTS, **dict(spec or {})}
    result.setdefault("image", default_image)
    if not result.get("image"):
        result["image"] = default_image
    data = dict(result.get("data") or {})
    if "synthetic" in data:
        data["synthetic"] = {**SYNTHETIC_DEFAULTS, **dict(data.get("synthetic") or {})}
    result["data"] = data
    if result.get("checkpoint") is not None:
        result["checkpoint"] = {"path": DEFAULT_CHECKPOINT_PATH, **dict(result["checkpoint"])}
    return result
