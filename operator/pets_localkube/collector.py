"""The garbage collector and the namespace/CRD cleanup, as one level-triggered sweep.

Woken after every change that can give it work (see `needs_sweep`): dependents whose owners
are all gone are deleted (background propagation), `foregroundDeletion` and `orphan` finalizers
are worked off, and deleted namespaces and CRDs are emptied before they go.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from . import errors
from .storage import CRD_KEY, NAMESPACE_KEY, Storage
from .store import Change, Key, Obj

logger = logging.getLogger(__name__)

_OWNERSHIP_FIELDS = ("ownerReferences", "finalizers", "deletionTimestamp")


def needs_sweep(change: Change, owner: Callable[[str], Obj | None] | None = None) -> bool:
    """Whether a change can make garbage to collect or a finalizer to work off.

    A removal (an owner gone, a namespace or CRD emptied), an object being deleted, a new object
    with owners, or changed owners/finalizers can; an update leaving those alone (a status patch,
    the bulk of the traffic) cannot.

    With `owner` (uid -> the stored owner, None when gone) it looks closer: owners and finalizers of
    an object that is not being deleted give work only when an owner it names (now or before) is gone
    or being deleted itself. So creating a pod of a live job, or adding a finalizer, no longer sweeps
    every stored object (at 1,000 jobs that was a third of the API server's time).
    """
    meta = change.obj["metadata"]
    if change.type == "DELETED" or meta.get("deletionTimestamp"):
        return True
    old_meta = {} if change.old is None else change.old["metadata"]
    if change.old is None:
        touched = bool(meta.get("ownerReferences") or meta.get("finalizers"))
    else:
        touched = any(meta.get(name) != old_meta.get(name) for name in _OWNERSHIP_FIELDS)
    if not touched or owner is None:
        return touched
    for ref in (meta.get("ownerReferences") or []) + (old_meta.get("ownerReferences") or []):
        found = owner(ref.get("uid", ""))
        if found is None or found["metadata"].get("deletionTimestamp"):
            return True
    return False


class Collector:
    def __init__(self, storage: Storage):
        self.storage = storage
        self._wake = asyncio.Event()
        storage.store.on_change(self._changed)

    def _changed(self, change: Change) -> None:
        if needs_sweep(change, self.storage.store.peek_uid):
            self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(0.02)  # let a burst of changes settle into one sweep
            self._wake.clear()
            try:
                self.sweep()
            except Exception:  # the collector must outlive one bad object
                logger.exception("garbage collection sweep failed")

    def _resource(self, key: Key):
        for resource in self.storage.registry:
            if resource.key == key:
                return resource
        return None

    def _delete(self, key: Key, obj: Obj, policy: str = "Background") -> None:
        resource = self._resource(key)
        if resource is None:
            return
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return
        try:
            self.storage.delete(resource, meta.get("namespace"), meta["name"], {"propagationPolicy": policy})
        except errors.ApiError as error:
            if error.code != 404:
                raise

    def _patch_metadata(self, key: Key, obj: Obj, metadata: dict) -> None:
        resource = self._resource(key)
        if resource is None:
            return
        try:
            self.storage.patch(resource, obj["metadata"].get("namespace"), obj["metadata"]["name"],
                               "application/merge-patch+json", {"metadata": metadata})
        except errors.ApiError as error:
            if error.code != 404:
                raise

    def sweep(self) -> None:
        # The stored objects themselves (no copies): the sweep reads them; deleting or patching
        # goes through `storage`, which stores new objects and leaves these as they were.
        store = self.storage.store
        objects = store.peek_all()
        dependents: dict[str, list[tuple[Key, Obj]]] = {}
        for key, obj in objects:
            for ref in obj["metadata"].get("ownerReferences") or []:
                dependents.setdefault(ref.get("uid", ""), []).append((key, obj))

        for key, obj in objects:
            meta = obj["metadata"]
            if meta.get("deletionTimestamp"):
                self._finalize(key, obj, dependents.get(meta["uid"], []))
            # Re-read: finalizing an owner earlier in this sweep may have changed this object.
            current = store.peek(key, meta.get("namespace", ""), meta["name"])
            refs = (current or {}).get("metadata", {}).get("ownerReferences") or []
            if refs:
                alive = [r for r in refs if store.exists_uid(r.get("uid", ""))]
                if not alive:
                    self._delete(key, obj)
                elif len(alive) < len(refs):
                    self._patch_metadata(key, obj, {"ownerReferences": alive})

    def _finalize(self, key: Key, obj: Obj, owned: list[tuple[Key, Obj]]) -> None:
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if "orphan" in finalizers:
            for dep_key, dependent in owned:
                kept = [r for r in dependent["metadata"]["ownerReferences"] if r.get("uid") != meta["uid"]]
                self._patch_metadata(dep_key, dependent, {"ownerReferences": kept or None})
            self._patch_metadata(key, obj, {"finalizers": [f for f in finalizers if f != "orphan"] or None})
        elif "foregroundDeletion" in finalizers:
            if owned:
                for dep_key, dependent in owned:
                    self._delete(dep_key, dependent, "Foreground")
            else:
                self._patch_metadata(key, obj, {"finalizers": [f for f in finalizers if f != "foregroundDeletion"] or None})
        elif key == NAMESPACE_KEY:
            self._empty_namespace(obj)
        elif key == CRD_KEY:
            self._empty_crd(obj)

    def _empty_namespace(self, namespace: Obj) -> None:
        name = namespace["metadata"]["name"]
        remaining = [(k, o) for k, o in self.storage.store.peek_all() if o["metadata"].get("namespace") == name]
        for key, obj in remaining:
            self._delete(key, obj)
        if not remaining and not namespace["metadata"].get("finalizers"):
            self.storage.finish_deletion(self._resource(NAMESPACE_KEY), namespace)

    def _empty_crd(self, crd: Obj) -> None:
        key = (crd["spec"]["group"], crd["spec"]["names"]["plural"])
        remaining = self.storage.store.items(key)
        for obj in remaining:
            self._delete(key, obj)
        if not remaining and not crd["metadata"].get("finalizers"):
            self.storage.finish_deletion(self._resource(CRD_KEY), crd)
