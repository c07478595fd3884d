"""The file a shipped function travels in, written once: `cluster_launcher` writes it, the pods read it.

    PETSFN1\\n
    {"format": 1, "function": "training_loop", "python": "3.11.7", "packages": {...}, ...}\\n
    <cloudpickle bytes of (function, args)>

The header is one JSON line, so a pod can check where the payload comes from before it unpickles
anything: a pickle made by another Python minor version, or another cloudpickle major version,
does not load reliably (code objects and cloudpickle's reconstructors change between them). Such a
pod stops with reason `IncompatibleFunction` and both versions in the message; differing torch,
accelerate or timm versions are only noted (the function may well run).

Standard library only: the trainer image imports it without the operator's dependencies.
"""
from __future__ import annotations

import json
import platform
from collections.abc import Mapping
from importlib import metadata
from typing import Any

MAGIC = b"PETSFN1\n"
FORMAT = 1
# What the payload records; the first two decide whether it loads at all.
PACKAGES = ("cloudpickle", "torch", "accelerate", "timm")
# A ConfigMap's data and binaryData together hold at most 1 MiB (the API server refuses more).
CONFIGMAP_LIMIT = 1024 * 1024
INCOMPATIBLE = "IncompatibleFunction"  # the failure reason of a pod that cannot load the payload


class PayloadError(ValueError):
    """The bytes are not a payload this code can read."""


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def local_versions() -> dict[str, Any]:
    """This interpreter's Python and package versions, as a payload records them."""
    return {"python": platform.python_version(), "packages": {name: package_version(name) for name in PACKAGES}}


def pack(header: Mapping[str, Any], body: bytes) -> bytes:
    line = json.dumps({"format": FORMAT, **header}, sort_keys=True).encode()
    return MAGIC + line + b"\n" + body


def unpack(data: bytes) -> tuple[dict[str, Any], bytes]:
    """(header, pickle bytes)."""
    if not data.startswith(MAGIC):
        raise PayloadError("not a pets function payload (written by pets_client.launcher.cluster_launcher)")
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        raise PayloadError("the payload's header is cut off")
    try:
        header = json.loads(data[len(MAGIC):end])
    except ValueError as error:
        raise PayloadError(f"the payload's header is not JSON: {error}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise PayloadError(f"payload format {header.get('format') if isinstance(header, dict) else header!r} "
                           f"is not {FORMAT}: the notebook's pets-operator and the image's differ")
    return header, data[end + 1:]


def _major_minor(version: str | None) -> str | None:
    return None if not version else ".".join(version.split(".")[:2])


def _major(version: str | None) -> str | None:
    return None if not version else version.split(".")[0]


def compatibility(recorded: Mapping[str, Any], here: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(problems that stop the pod, notes worth a warning) of loading a payload made with `recorded` versions."""
    problems, notes = [], []
    theirs, ours = recorded.get("python"), here.get("python")
    if _major_minor(theirs) != _major_minor(ours):
        problems.append(f"the function was serialized with Python {theirs} in the notebook, but this pod runs "
                        f"Python {ours}: use a trainer image with Python {_major_minor(theirs)}, or a notebook "
                        f"with Python {_major_minor(ours)}")
    their_packages, our_packages = recorded.get("packages") or {}, here.get("packages") or {}
    theirs, ours = their_packages.get("cloudpickle"), our_packages.get("cloudpickle")
    if ours is None:
        problems.append(f"the function was serialized with cloudpickle {theirs}, and this pod has no cloudpickle: "
                        "install pets-operator[trainer] in the trainer image")
    elif _major(theirs) != _major(ours):
        problems.append(f"the function was serialized with cloudpickle {theirs} in the notebook, but this pod has "
                        f"cloudpickle {ours}: the major versions must match")
    for name in PACKAGES[1:]:
        theirs, ours = their_packages.get(name), our_packages.get(name)
        if theirs and theirs != ours:
            notes.append(f"the notebook has {name} {theirs}, this pod {name} {ours or '(not installed)'}")
    return problems, notes
