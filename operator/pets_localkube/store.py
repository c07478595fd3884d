"""The in-memory object store: objects by resource, one monotonic resourceVersion, watch fan-out.

Everything runs on one event loop, so each operation is atomic without locks. A stored object is
never changed in place (`put` stores a fresh copy in a new slot), so the copy kept in the store,
the one in its `Change` and the `peek` views can be one object: readers copy only what they edit.
"""
from __future__ import annotations

import asyncio
import collections
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, str]  # (group, plural)
Obj = dict[str, Any]

HISTORY_SIZE = 20000  # events kept for watches that resume from a resourceVersion


@dataclass(frozen=True)
class Change:
    type: str  # ADDED | MODIFIED | DELETED
    key: Key
    rv: int
    obj: Obj  # shared with the store: read only
    old: Obj | None
    # What each watch stream writes for this change, encoded once for all of them:
    # (event type, apiVersion) -> one JSON line.
    encoded: dict[tuple[str, str], bytes] = field(default_factory=dict, compare=False, repr=False)


class Watcher:
    """One watch stream's subscription: every change of one resource type, optionally one namespace."""

    def __init__(self, key: Key, namespace: str | None):
        self.key = key
        self.namespace = namespace
        self.queue: asyncio.Queue[Change | None] = asyncio.Queue()

    def offer(self, change: Change) -> None:
        if change.key != self.key:
            return
        if self.namespace is not None and change.obj["metadata"].get("namespace") != self.namespace:
            return
        self.queue.put_nowait(change)

    def close(self) -> None:
        self.queue.put_nowait(None)


class Store:
    def __init__(self) -> None:
        self.resource_version = 1
        self._objects: dict[Key, dict[tuple[str, str], Obj]] = collections.defaultdict(dict)
        self._uids: dict[str, tuple[Key, str, str]] = {}
        self._history: collections.deque[Change] = collections.deque(maxlen=HISTORY_SIZE)
        self._watchers: set[Watcher] = set()
        self._listeners: list[Callable[[Change], None]] = []

    def next_resource_version(self) -> int:
        self.resource_version += 1
        return self.resource_version

    def get(self, key: Key, namespace: str, name: str) -> Obj | None:
        found = self._objects[key].get((namespace, name))
        return copy.deepcopy(found) if found else None

    def items(self, key: Key, namespace: str | None = None) -> list[Obj]:
        objects = self._objects[key]
        chosen = [o for (ns, _), o in objects.items() if namespace is None or ns == namespace]
        return [copy.deepcopy(o) for o in sorted(chosen, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))]

    def peek(self, key: Key, namespace: str, name: str) -> Obj | None:
        """The stored object itself, without a copy: read it, never change it."""
        return self._objects[key].get((namespace, name))

    def peek_all(self) -> list[tuple[Key, Obj]]:
        """Every stored object itself, without copies (a snapshot of the list): read only."""
        return [(key, obj) for key, objects in list(self._objects.items()) for obj in list(objects.values())]

    def exists_uid(self, uid: str) -> bool:
        return uid in self._uids

    def peek_uid(self, uid: str) -> Obj | None:
        """The stored object of that uid itself (read only), None when there is none."""
        found = self._uids.get(uid)
        return None if found is None else self._objects[found[0]].get(found[1:])

    def put(self, key: Key, obj: Obj) -> Obj:
        """Store a created or changed object whose metadata.resourceVersion is already stamped."""
        meta = obj["metadata"]
        slot = (meta.get("namespace", ""), meta["name"])
        old = self._objects[key].get(slot)
        stored = self._objects[key][slot] = copy.deepcopy(obj)
        self._uids[meta["uid"]] = (key, *slot)
        self._emit(Change("MODIFIED" if old else "ADDED", key, int(meta["resourceVersion"]), stored, old))
        return obj

    def remove(self, key: Key, obj: Obj) -> Obj:
        meta = obj["metadata"]
        old = self._objects[key].pop((meta.get("namespace", ""), meta["name"]), None)
        self._uids.pop(meta["uid"], None)
        final = copy.deepcopy(obj)
        final["metadata"]["resourceVersion"] = str(self.next_resource_version())
        self._emit(Change("DELETED", key, int(final["metadata"]["resourceVersion"]), final, old))
        return final

    def _emit(self, change: Change) -> None:
        self._history.append(change)
        for watcher in list(self._watchers):
            watcher.offer(change)
        for listener in self._listeners:
            listener(change)

    def on_change(self, listener: Callable[[Change], None]) -> None:
        self._listeners.append(listener)

    def changes_since(self, key: Key, resource_version: int) -> list[Change] | None:
        """Changes after `resource_version`, or None when the history no longer reaches back that far."""
        if self._history and self._history[0].rv > resource_version + 1 and resource_version < self.resource_version:
            return None
        return [c for c in self._history if c.rv > resource_version and c.key == key]

    def subscribe(self, key: Key, namespace: str | None) -> Watcher:
        watcher = Watcher(key, namespace)
        self._watchers.add(watcher)
        return watcher

    def unsubscribe(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    def close_watchers(self) -> None:
        for watcher in list(self._watchers):
            watcher.close()
