"""The kubelet API, the part kube-apiserver proxies to: `GET /containerLogs/{namespace}/{pod}/{container}`.

`kubectl logs [-f]` and every client of `GET /api/v1/namespaces/NS/pods/POD/log` reach a pod's log
through kube-apiserver, which asks the pod's node at its InternalIP and
`status.daemonEndpoints.kubeletEndpoint.Port`. This serves that request from the log files the
local kubelet writes, with the rules of `logs.py` (the emulated API server's `/log` uses the same):
`follow`, `timestamps`, `sinceTime`/`sinceSeconds`, `tailLines`, `limitBytes`. `previous` is refused
with a clear message: the local kubelet keeps one log per container across its restarts.

Security as a kubelet's: TLS only, with a serving certificate the cluster CA signed for 127.0.0.1
(kube-apiserver verifies it with `--kubelet-certificate-authority`); a client must present a
certificate that CA signed (kube-apiserver's `--kubelet-client-certificate`, else the handshake
fails), and only the users and groups of `Access` are served (the certificate's CN is the user, its
O entries the groups, as kube-apiserver reads them); anyone else gets 403, as a kubelet's
authorizer answers a user without `nodes/proxy`.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from . import logs

logger = logging.getLogger(__name__)

APISERVER_KUBELET_CLIENT = "kube-apiserver-kubelet-client"  # the CN control_plane.py gives that certificate
MASTERS_GROUP = "system:masters"


class PodSource(Protocol):
    """What the API reads of the kubelet: its pods as last seen, and where their logs are."""

    log_root: Path

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class Subject:
    user: str
    groups: tuple[str, ...] = ()


def subject_of(peercert: Mapping[str, Any] | None) -> Subject | None:
    """The user (CN) and groups (O) of a verified client certificate, as `ssl` decodes it."""
    if not peercert:
        return None
    user, groups = "", []
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                user = value
            elif key == "organizationName":
                groups.append(value)
    return Subject(user, tuple(groups))


@dataclass(frozen=True)
class Access:
    """Who may read logs: these users, or members of these groups."""
    users: frozenset[str] = field(default_factory=lambda: frozenset({APISERVER_KUBELET_CLIENT}))
    groups: frozenset[str] = field(default_factory=lambda: frozenset({MASTERS_GROUP}))

    def allows(self, subject: Subject | None) -> bool:
        return subject is not None and (subject.user in self.users or bool(self.groups.intersection(subject.groups)))


def serving_context(cert: Path, key: Path, client_ca: Path) -> ssl.SSLContext:
    """TLS for the kubelet API: this certificate, and a client certificate signed by `client_ca` required."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(client_ca))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(str(cert), str(key))
    return context


def _text(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message, content_type="text/plain")


class KubeletApi:
    """The kubelet API's routes on `pods`; `start(listener, tls)` serves them until `stop()`."""

    def __init__(self, pods: PodSource, access: Access | None = None):
        self.pods = pods
        self.access = access or Access()
        self.closing = asyncio.Event()
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._authorize])
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._container_logs)
        app.router.add_get("/healthz", self._healthz)
        return app

    async def start(self, listener: socket.socket, tls: ssl.SSLContext) -> None:
        self._runner = web.AppRunner(self.app(), handler_cancellation=True, shutdown_timeout=2)
        await self._runner.setup()
        await web.SockSite(self._runner, listener, ssl_context=tls).start()

    async def stop(self) -> None:
        self.closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _authorize(self, request: web.Request, handler) -> web.StreamResponse:
        transport = request.transport
        subject = subject_of(transport.get_extra_info("peercert") if transport is not None else None)
        if subject is None:  # no verified certificate (a plain connection in a test's app)
            return _text(401, "Unauthorized")
        if not self.access.allows(subject):
            return _text(403, f"Forbidden (user={subject.user}, verb=get, resource=nodes, subresource(s)=[proxy])")
        return await handler(request)

    async def _healthz(self, request: web.Request) -> web.Response:
        return _text(200, "ok")

    async def _container_logs(self, request: web.Request) -> web.StreamResponse:
        namespace, name, container = (request.match_info[key] for key in ("namespace", "pod", "container"))
        try:
            options = logs.LogOptions.from_query(request.query)
        except ValueError as error:
            return _text(400, str(error))
        if request.query.get("stream", "All") != "All":
            return _text(400, f"unable to return the given log stream: {request.query['stream']!r}; "
                              f"the local kubelet keeps stdout and stderr in one log")
        pod = self.pods.pod(namespace, name)
        if pod is None:
            return _text(404, f'pod "{name}" does not exist')
        spec = pod.get("spec") or {}
        if container not in [c["name"] for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])]:
            return _text(404, f'container "{container}" not found in pod "{name}"')
        if options.previous:
            return _text(400, f'previous terminated container "{container}" in pod "{name}" not found: the local '
                              f'kubelet keeps one log per container, with every restart in it')
        path = logs.container_log_path(self.pods.log_root, pod, container)
        if not path.exists():
            return _text(400, f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
        uid = pod["metadata"]["uid"]

        def finished() -> bool:
            return logs.container_finished(self.pods.pod(namespace, name), uid, container)

        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        try:
            await logs.stream(path, options, response.write, finished, self.closing)
        except ConnectionError:  # the reader went away (kubectl logs -f ended)
            logger.debug("log of %s/%s/%s: the client went away", namespace, name, container)
        return response
