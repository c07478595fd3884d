"""The API server's own request count, by client: `localkube_api_requests_total` at `/metrics`.

A real API server counts `apiserver_request_total{verb, resource, subresource, code}`; this one
counts each request when it arrives (watches and followed logs are counted once, however long they
stream) and adds the client, the first product of its User-Agent (`kopf`, `OpenAPI-Generator` for
the official Python client, `Python` for plain aiohttp such as the local kubelet and scheduler), so
a load test can tell one client's requests from another's without a proxy in between.
Verbs are the API server's: GET, LIST, WATCH, POST, PUT, PATCH, DELETE, DELETECOLLECTION.
"""
from __future__ import annotations

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

RESOURCE_PREFIXES = ("api", "apis")


def client_of(user_agent: str | None) -> str:
    """`kopf/1.38 (...)` -> `kopf`; none -> `unknown`."""
    product = (user_agent or "").strip().split(" ", 1)[0].split("/", 1)[0]
    return product[:40] or "unknown"


def resource_of(path: str) -> tuple[str, str, bool]:
    """(resource, subresource, names one object) of a REST path; ("", "", False) for discovery and others."""
    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] not in RESOURCE_PREFIXES:
        return "", "", False
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if len(rest) >= 2 and rest[0] == "namespaces" and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
        rest = rest[2:]
    if not rest:
        return "", "", False
    return rest[0], rest[2] if len(rest) > 2 else "", len(rest) > 1


def verb_of(method: str, path: str, query: dict[str, str] | None = None) -> str:
    """The API server's verb of a request."""
    _, _, one = resource_of(path)
    watch = (query or {}).get("watch", "").lower() in ("true", "1")
    if method == "GET":
        return "GET" if one else ("WATCH" if watch else "LIST")
    if method == "DELETE" and not one:
        return "DELETECOLLECTION"
    return method


class RequestCounter:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("localkube_api_requests", "Requests the local API server received, when they arrived",
                                ["client", "verb", "resource", "subresource"], registry=self.registry)

    @web.middleware
    async def middleware(self, request: web.Request, handler):
        resource, subresource, _ = resource_of(request.path)
        self.requests.labels(client_of(request.headers.get("User-Agent")), verb_of(request.method, request.path, request.query),
                             resource, subresource).inc()
        return await handler(request)

    def response(self) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})
