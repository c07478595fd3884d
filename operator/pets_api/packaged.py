"""Files shipped inside the package: the CRD (the one source of the spec's defaults) and the
sample job. `operator/pets_api/manifests/` holds links to `manifests/`, so an installed
wheel carries the same bytes as the repository."""
from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import yaml


def manifest_text(name: str) -> str:
    return resources.files("pets_api").joinpath("manifests", name).read_text(encoding="utf-8")


@functools.cache
def _crd() -> dict[str, Any]:
    return yaml.safe_load(manifest_text("crd.yaml"))


def crd() -> dict[str, Any]:
    """The PetsTrainingJob CRD (a fresh copy: callers may change it)."""
    import copy

    return copy.deepcopy(_crd())


def crd_text() -> str:
    return manifest_text("crd.yaml")


def sample_job_text() -> str:
    return manifest_text("job.yaml")
