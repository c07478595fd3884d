"""The garbage collector and the namespace/CRD cleanup, as one level-triggered sweep.

Woken after every change: dependents whose owners are all gone are deleted (background
propagation), `foregroundDeletion` and `orphan` finalizers are worked off, and deleted
namespaces and CRDs are emptied before they go.
"""
from __future__ import annotations

import asyncio
import logging

from . import errors
from .storage import CRD_KEY, NAMESPACE_KEY, Storage
from .store import Change, Key, Obj

logger = logging.getLogger(__name__)


class Collector:
    def __init__(self, storage: Storage):
        self.storage = storage
        self._wake = asyncio.Event()
        storage.store.on_change(self._changed)

    def _changed(self, change: Change) -> None:
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
        objects = list(self.storage.store.all_items())
        dependents: dict[str, list[tuple[Key, Obj]]] = {}
        for key, obj in objects:
            for ref in obj["metadata"].get("ownerReferences") or []:
                dependents.setdefault(ref.get("uid", ""), []).append((key, obj))

        for key, obj in objects:
            meta = obj["metadata"]
            if meta.get("deletionTimestamp"):
                self._finalize(key, obj, dependents.get(meta["uid"], []))
            # Re-read: finalizing an owner earlier in this sweep may have changed this object.
            current = self.storage.store.get(key, meta.get("namespace", ""), meta["name"])
            refs = (current or {}).get("metadata", {}).get("ownerReferences") or []
            if refs:
                alive = [r for r in refs if self.storage.store.exists_uid(r.get("uid", ""))]
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
        remaining = [(k, o) for k, o in self.storage.store.all_items() if o["metadata"].get("namespace") == name]
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
