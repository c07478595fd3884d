"""A PetsTrainingJob's spec with the CRD's defaults applied.

The API server applies the CRD's structural-schema defaults on every read, so a spec the
operator gets from the cluster has them already; this applies the same defaults from the
packaged CRD (the one source) for specs built elsewhere (tests, the notebook client), and
fills in the operator's configured trainer image, the one default the CRD cannot know.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pets_api.contract import apply_schema_defaults, schema_default, spec_schema

# Where the data volume is mounted in every trainer container unless data.mountPath says otherwise (the
# CRD's default of data.mountPath); DATA_DIR is the mount plus data.path.
DATA_MOUNT_PATH = schema_default("data.mountPath")

# Where the cache volume (downloads: data.download, data.oxfordPets, Hub weights) is mounted unless
# cache.path says otherwise (the CRD's default).
CACHE_MOUNT_PATH = schema_default("cache.path")

# Where a shipped function's ConfigMap (spec.function) is mounted; FUNCTION_FILE is this plus function.key.
FUNCTION_MOUNT_PATH = "/var/run/pets-function"

# The trainer container's root filesystem is read-only: what it writes goes to emptyDirs mounted here
# (builders), which data.mountPath and checkpoint.path may hold (nested) but not replace (validation).
TMP_MOUNT_PATH = "/tmp"
HOME_MOUNT_PATH = "/home/trainer"  # the trainer image's HOME and WORKDIR (trainer_image/Dockerfile)
SCRATCH_MOUNT_PATHS = (TMP_MOUNT_PATH, HOME_MOUNT_PATH)


# Read once: apply_schema_defaults only reads it (it copies the defaults it takes). `spec_schema()` copies the
# whole CRD, and the operator applies the defaults at every step of every job (benchmarks/operator_scale.py).
_SPEC_SCHEMA = spec_schema()


def with_defaults(spec: Mapping[str, Any] | None, default_image: str) -> dict[str, Any]:
    result = copy.deepcopy(dict(spec or {}))
    apply_schema_defaults(result, _SPEC_SCHEMA)
    if not result.get("image"):
        result["image"] = default_image
    result.setdefault("data", {})
    return result


def _immutable(field: Mapping[str, Any]) -> bool:
    return any("oldSelf" in str(rule.get("rule", "")) for rule in field.get("x-kubernetes-validations") or [])


# The spec fields a created job may change (the API server refuses a change to any other): those the CRD
# gives no `self == oldSelf` rule. The operator applies their changes to a running job as they come.
MUTABLE_FIELDS = tuple(sorted(name for name, field in spec_schema()["properties"].items() if not _immutable(field)))


def with_changes(running: Mapping[str, Any], changed: Mapping[str, Any] | None, default_image: str) -> dict[str, Any]:
    """The spec a job runs with (`running`, defaults applied), with the mutable fields as `changed` has them.

    The other fields stay as they were when the job was first read: the API server keeps them unchanged,
    and where it could not (a cluster without the CRD's rules) a running group still never half-applies
    a new spec.
    """
    fresh = with_defaults(changed, default_image)
    result = copy.deepcopy(dict(running))
    for name in MUTABLE_FIELDS:
        if name in fresh:
            result[name] = fresh[name]
        else:
            result.pop(name, None)
    return result


def data_mount_path(spec: Mapping[str, Any]) -> str:
    """Where the data volume appears in the pods: data.mountPath (a shipped function's paths), else /data."""
    return (spec.get("data") or {}).get("mountPath") or DATA_MOUNT_PATH


def epoch_limit(spec: Mapping[str, Any]) -> int | None:
    """spec.epochs bounds the epochs the built-in recipe reports; a shipped function (spec.function) runs
    as many as it likes, so it has no bound."""
    return None if spec.get("function") else int(spec["epochs"])
