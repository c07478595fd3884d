"""A stand-in for one WATCH answer of the API server, as `kubernetes.watch.Watch` reads it.

`WatchStream(events)` is what `list_namespaced_custom_object(..., watch=True, _preload_content=False)`
returns: the events as JSON lines, then (`silent=True`) nothing until the request's read timeout
runs out, which urllib3 reports as ReadTimeoutError, as a watch with nothing to say does; or
(`silent=False`) the end of the stream, as when the server's timeoutSeconds passes. Calling it
records the request's arguments (`kwargs`) and returns it.
"""
from __future__ import annotations

import json
import time
from typing import Any

from urllib3.exceptions import ReadTimeoutError


def stored_job(phase: str | None, version: int, **status: Any) -> dict[str, Any]:
    """A PetsTrainingJob named `pets` as the API server has it at resourceVersion `version`."""
    return {"metadata": {"name": "pets", "namespace": "ml", "resourceVersion": str(version)},
            "status": {**({"phase": phase} if phase else {}), **status}}


def modified(resource: dict[str, Any]) -> dict[str, Any]:
    return {"type": "MODIFIED", "object": resource}


def deleted(resource: dict[str, Any]) -> dict[str, Any]:
    return {"type": "DELETED", "object": resource}


def gone() -> dict[str, Any]:
    """The ERROR event of a watch from a resourceVersion the server no longer keeps."""
    return {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
                                        "reason": "Expired", "message": "too old resource version"}}


class WatchStream:
    status = 200

    def __init__(self, events: list[dict[str, Any]], silent: bool = True):
        self.events = events
        self.silent = silent
        self.kwargs: dict[str, Any] = {}
        self.closed = False

    def __call__(self, *args: Any, **kwargs: Any) -> WatchStream:
        self.kwargs = kwargs
        return self

    def stream(self, amt=None, decode_content=False):
        for event in self.events:
            yield (json.dumps(event) + "\n").encode()
        if self.silent:
            time.sleep(self.kwargs["_request_timeout"][1])
            raise ReadTimeoutError(None, "/apis", "Read timed out.")

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        pass
