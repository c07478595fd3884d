"""Events about pods, posted the way a kubelet's and a scheduler's event recorders post them.

A core/v1 Event per (object, type, reason, message, source): the first occurrence creates it
(`<pod>.<hex nanoseconds>`, count 1, firstTimestamp = lastTimestamp), a repeat raises its `count`
and `lastTimestamp`, as client-go's event correlator aggregates, so `kubectl describe pod` shows
`(x3 over 10s)` and `kubectl get events` one line per kind of event. Posting is best effort: an
event that cannot be written is logged at debug level and never stops the caller.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from .client import ApiStatusError, Client
from .storage import now

logger = logging.getLogger(__name__)

NORMAL, WARNING = "Normal", "Warning"


def container_field_path(name: str, init: bool = False) -> str:
    """How a kubelet's events point into a pod: `spec.containers{main}`."""
    return f"spec.{'initContainers' if init else 'containers'}{{{name}}}"


class EventRecorder:
    def __init__(self, client: Client, component: str, host: str = ""):
        self.client = client
        self.component = component
        self.host = host
        # (uid, fieldPath, type, reason, message) -> (namespace, event name, count)
        self._seen: dict[tuple[str, str, str, str, str], tuple[str, str, int]] = {}

    async def record(self, obj: dict[str, Any], event_type: str, reason: str, message: str, field_path: str = "") -> None:
        meta = obj["metadata"]
        namespace = meta.get("namespace") or "default"
        key = (meta["uid"], field_path, event_type, reason, message)
        stamp = now()
        seen = self._seen.get(key)
        try:
            if seen is not None:
                seen_namespace, name, count = seen
                try:
                    await self.client.merge_patch(f"/api/v1/namespaces/{seen_namespace}/events/{name}",
                                                  {"count": count + 1, "lastTimestamp": stamp})
                    self._seen[key] = (seen_namespace, name, count + 1)
                    return
                except ApiStatusError as error:
                    if error.code != 404:
                        raise
            involved = {"kind": obj.get("kind", "Pod"), "namespace": namespace, "name": meta["name"], "uid": meta["uid"],
                        "apiVersion": obj.get("apiVersion", "v1"), "resourceVersion": meta.get("resourceVersion", "")}
            if field_path:
                involved["fieldPath"] = field_path
            name = f"{meta['name']}.{time.time_ns():x}"
            await self.client.create(f"/api/v1/namespaces/{namespace}/events", {
                "apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": namespace},
                "involvedObject": involved, "reason": reason, "message": message, "type": event_type,
                "source": {"component": self.component, **({"host": self.host} if self.host else {})},
                "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1, "eventTime": None,
                "reportingComponent": self.component, "reportingInstance": self.host,
            })
            self._seen[key] = (namespace, name, 1)
        except ApiStatusError as error:  # e.g. the namespace is being deleted
            logger.debug("event %s %s for %s/%s not posted: %s", event_type, reason, namespace, meta["name"], error)
        except Exception as error:  # best effort: never stop the kubelet or scheduler over an event
            logger.debug("event %s %s for %s/%s not posted: %r", event_type, reason, namespace, meta["name"], error)

    def forget(self, uid: str) -> None:
        """Drop what is remembered about an object that is gone."""
        for key in [k for k in self._seen if k[0] == uid]:
            del self._seen[key]
