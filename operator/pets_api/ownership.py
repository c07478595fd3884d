"""Owner references to a PetsTrainingJob (pure): what the garbage collector follows."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import API_VERSION, KIND


def owner_reference(job: Mapping[str, Any]) -> dict[str, Any]:
    """The controller reference an object the job owns carries (deleted with the job)."""
    meta = job["metadata"]
    return {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}
