"""Objects already there under a name the job's group needs: the job's own, or another's (pure).

A create that answers 409 AlreadyExists is the job's own object only when that object's controller
ownerReference carries the job's uid (an earlier step made it): the operator adopts nothing else. A
plain pod named `<job>-1`, or another owner's, is a name conflict; an object of an earlier job of the
same name (another uid) is on its way out with that job (the garbage collector deletes it), unless a
finalizer holds it.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pets_api import KIND


@dataclass(frozen=True)
class Occupant:
    kind: str  # Pod, Service, NetworkPolicy, PodGroup
    name: str
    owner_kind: str | None = None  # its controller ownerReference, when it has one
    owner_name: str | None = None
    owner_uid: str | None = None
    deleting: bool = False
    finalizers: tuple[str, ...] = ()

    def owned_by(self, uid: str) -> bool:
        return bool(uid) and self.owner_uid == uid

    def of_earlier_job(self, job: str) -> bool:
        """Made for an earlier PetsTrainingJob of this name (deleted and created again): it goes with that job."""
        return self.owner_kind == KIND and self.owner_name == job

    def describe(self) -> str:
        """`Pod pets-1 already exists and is not this job's (no owner)`: the name conflict, in words."""
        if self.owner_kind is None:
            owner = "it has no owner"
        else:
            owner = f"its owner is {self.owner_kind} {self.owner_name} (uid {self.owner_uid})"
        text = f"{self.kind} {self.name} already exists and is not this job's: {owner}"
        if self.deleting:
            text += ", being deleted"
        if self.finalizers:
            text += f", held by finalizer {', '.join(self.finalizers)}"
        return text


def occupant(body: Mapping[str, Any]) -> Occupant:
    """The Occupant of an object as the API returned it (a dict)."""
    meta = body.get("metadata") or {}
    controller = next((ref for ref in meta.get("ownerReferences") or [] if ref.get("controller")), None) or {}
    return Occupant(kind=str(body.get("kind") or ""), name=str(meta.get("name") or ""),
                    owner_kind=controller.get("kind"), owner_name=controller.get("name"),
                    owner_uid=controller.get("uid"), deleting=bool(meta.get("deletionTimestamp")),
                    finalizers=tuple(meta.get("finalizers") or ()))
