"""A PetsTrainingJob's spec with the CRD's defaults applied.

The API server applies the CRD's structural-schema defaults on every read, so a spec the
operator gets from the cluster has them already; this applies the same defaults from the
packaged CRD (the one source) for specs built elsewhere (tests, the notebook client), and
fills in the operator's configured trainer image, the one default the CRD cannot know.
"""
from __future__ import annotations

import copy
from typing import Any, Mapping

from .contract import apply_schema_defaults, spec_schema

# Where the data volume is mounted in every trainer container; DATA_DIR is this plus data.path.
DATA_MOUNT_PATH = "/data"


def with_defaults(spec: Mapping[str, Any] | None, default_image: str) -> dict[str, Any]:
    result = copy.deepcopy(dict(spec or {}))
    apply_schema_defaults(result, spec_schema())
    if not result.get("image"):
        result["image"] = default_image
    result.setdefault("data", {})
    return result
