"""One watch stream (`GET <collection>?watch=true`), as the Kubernetes API server sends it.

In order:
1. the start, one of
   - the initial list: the objects there now as ADDED events, for a list-then-watch from
     resourceVersion "" or "0" or for `sendInitialEvents=true`; with `sendInitialEvents` and
     `allowWatchBookmarks`, a BOOKMARK annotated `k8s.io/initial-events-end` closes it;
   - the replay: the changes after the client's resourceVersion, from the store's history
     (an ERROR event with 410 Gone, and the end of the stream, once the history no longer
     reaches back that far);
2. live events: each change as it happens, whatever is queued written at once;
3. bookmarks: with `allowWatchBookmarks`, one after every BOOKMARK_INTERVAL without a change.
The stream ends at `timeoutSeconds`, when the server shuts down, or when the client goes away.
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from . import errors
from .resources import ResourceType
from .store import Change, Obj, Store, Watcher
from .tables import to_table, wants_table

logger = logging.getLogger(__name__)

DEFAULT_WATCH_TIMEOUT = 1800.0
BOOKMARK_INTERVAL = 30.0
REPLAY_WRITE_EVENTS = 500  # a resumed watch's history goes out in writes of at most this many events
OBJECT_EVENTS = ("ADDED", "MODIFIED", "DELETED")  # the events that carry an object (a Table row when asked for)


def query_flag(query: Mapping[str, str], name: str) -> bool:
    return str(query.get(name, "")).lower() in ("true", "1")


def event_line(event_type: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": event_type, "object": obj}).encode() + b"\n"


def event_type_for(change: Change, matches: Callable[[Obj], bool]) -> str | None:
    """What a filtered watch sees: objects moving into the selection are ADDED, out of it DELETED."""
    was = change.old is not None and matches(change.old)
    now_matches = matches(change.obj)
    if change.type == "DELETED":
        return "DELETED" if was or now_matches else None
    if change.type == "ADDED" or (now_matches and not was):
        return "ADDED" if now_matches else None
    if was and now_matches:
        return "MODIFIED"
    if was:
        return "DELETED"
    return None


@dataclass(frozen=True)
class WatchOptions:
    """The query parameters of a watch request that shape its stream."""
    since: str  # resourceVersion: "" or "0" for a list-then-watch, else where the replay starts
    send_initial: bool  # sendInitialEvents
    bookmarks: bool  # allowWatchBookmarks
    timeout: float  # timeoutSeconds
    table: bool  # objects as Table rows (kubectl get -w)
    include_object: str | None = None  # includeObject of the Table rows

    @classmethod
    def parse(cls, query: Mapping[str, str], accept: str) -> WatchOptions:
        timeout = float(query.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT)
        since = query.get("resourceVersion", "")
        if since and not since.isdigit():
            raise errors.bad_request(f'invalid resource version "{since}"')
        return cls(since=since, send_initial=query_flag(query, "sendInitialEvents"),
                   bookmarks=query_flag(query, "allowWatchBookmarks"), timeout=timeout, table=wants_table(accept),
                   include_object=query.get("includeObject"))

    @property
    def starts_with_list(self) -> bool:
        return self.since in ("", "0") or self.send_initial


class WatchStream:
    """The events of one resource type (optionally one namespace, one selection) for one client."""

    def __init__(self, store: Store, resource: ResourceType, version: str, namespace: str | None,
                 matches: Callable[[Obj], bool], options: WatchOptions, closing: asyncio.Event):
        self.store = store
        self.resource = resource
        self.version = version
        self.api_version = resource.api_version(version)
        self.namespace = namespace
        self.matches = matches
        self.options = options
        self.closing = closing  # set when the server shuts down
        self.response = web.StreamResponse(headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})

    async def serve(self, request: web.Request) -> web.StreamResponse:
        # Subscribed before the start is sent: no change between the two is lost.
        watcher = self.store.subscribe(self.resource.key, self.namespace)
        try:
            await self.response.prepare(request)
            if self.options.starts_with_list:
                await self._send_initial_list()
            elif not await self._replay():
                return self.response
            await self._send_live(watcher)
            return self.response
        except ConnectionError as error:  # the client went away (aiohttp's ClientConnectionResetError is one)
            logger.debug("watch of %s: the client went away (%s)", self.resource.plural, error)
            return self.response
        finally:
            self.store.unsubscribe(watcher)

    # --- the steps -------------------------------------------------------------------------

    async def _send_initial_list(self) -> None:
        objects = (obj for obj in self.store.items(self.resource.key, self.namespace) if self.matches(obj))
        # items() are copies already: a shallow copy sets the apiVersion; one write for the whole list.
        await self._write(b"".join(self._encode("ADDED", {**obj, "apiVersion": self.api_version}) for obj in objects))
        if self.options.send_initial and self.options.bookmarks:
            await self._send("BOOKMARK", self._bookmark(initial_end=True))

    async def _replay(self) -> bool:
        """The changes after the client's resourceVersion; False once the history is too short (410 sent)."""
        since = self.options.since
        replay = self.store.changes_since(self.resource.key, int(since))
        if replay is None:
            gone = errors.gone(f"too old resource version: {since} ({self.store.resource_version})")
            await self._send("ERROR", gone.status())
            return False
        replay = [change for change in replay
                  if self.namespace is None or change.obj["metadata"].get("namespace") == self.namespace]
        for first in range(0, len(replay), REPLAY_WRITE_EVENTS):
            await self._write(self._encode_changes(replay[first:first + REPLAY_WRITE_EVENTS]))
        return True

    async def _send_live(self, watcher: Watcher) -> None:
        """Changes as they come until the timeout, the server's shutdown or the store closing the watcher;
        a bookmark whenever BOOKMARK_INTERVAL passes without one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.timeout
        while not self.closing.is_set():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            try:
                batch, closed = await self._next_batch(watcher, min(remaining, BOOKMARK_INTERVAL))
            except asyncio.TimeoutError:
                if self.options.bookmarks and loop.time() < deadline:
                    await self._send("BOOKMARK", self._bookmark())
                continue
            await self._write(self._encode_changes(batch))
            if closed:
                return

    @staticmethod
    async def _next_batch(watcher: Watcher, wait: float) -> tuple[list[Change], bool]:
        """Everything queued, after waiting at most `wait` for the first change (TimeoutError when none
        comes), and whether the watcher was closed. All of it goes out in one write: under load, a
        burst of changes would otherwise wait one event-loop round per event and fall seconds behind."""
        if watcher.queue.empty():
            change = await asyncio.wait_for(watcher.queue.get(), wait)
        else:
            change = watcher.queue.get_nowait()
        batch: list[Change] = []
        while change is not None:  # None: the store closed the watcher
            batch.append(change)
            if watcher.queue.empty():
                return batch, False
            change = watcher.queue.get_nowait()
        return batch, True

    # --- encoding and writing --------------------------------------------------------------

    def _encode(self, event_type: str, obj: dict[str, Any]) -> bytes:
        if self.options.table and event_type in OBJECT_EVENTS:
            obj = to_table(self.resource, self.version, [obj], include_object=self.options.include_object)
        return event_line(event_type, obj)

    def _encode_changes(self, changes: list[Change]) -> bytes:
        lines = []
        for change in changes:
            event_type = event_type_for(change, self.matches)
            if event_type is None:
                continue
            if self.options.table:
                lines.append(self._encode(event_type, {**change.obj, "apiVersion": self.api_version}))
                continue
            line = change.encoded.get((event_type, self.api_version))
            if line is None:  # the first watch stream to send this change encodes it for all
                line = change.encoded[(event_type, self.api_version)] = event_line(
                    event_type, {**change.obj, "apiVersion": self.api_version})
            lines.append(line)
        return b"".join(lines)

    def _bookmark(self, initial_end: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(self.store.resource_version)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"kind": self.resource.kind, "apiVersion": self.api_version, "metadata": meta}

    async def _send(self, event_type: str, obj: dict[str, Any]) -> None:
        await self.response.write(self._encode(event_type, obj))

    async def _write(self, data: bytes) -> None:
        if data:
            await self.response.write(data)
