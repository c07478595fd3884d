"""A fault-injecting reverse proxy in front of an API server, for the operator's traffic only.

    with FaultProxy(cluster.url, workdir) as proxy:
        proxy.fail("POST", r"/api/v1/namespaces/default/pods$", status=422, reason="Invalid",
                   message='Pod "x" is invalid: ...', times=2)
        proxy.fail("PATCH", r"/status$", status=429, reason="TooManyRequests", retry_after=2)
        proxy.fail("*", r"", status=503, reason="ServiceUnavailable", times=20)       # a burst of 20
        proxy.fail("*", r"", status=500, times=None, for_seconds=3)                  # a 3 s window
        operator_process({"KUBECONFIG": str(proxy.kubeconfig)})

Every request is forwarded unchanged (watches and followed logs stream through chunk by chunk)
unless a fault matches its method and path (a regular expression searched in the path, query
string left out) and, when given, its body (`body=`: a regular expression searched in the request
body, e.g. `'"name": ?"job-1"'` for one pod's creation); a matching fault answers instead of the
server, `times` times (None: any number) and, with `for_seconds`, only within that many seconds of
`fail` (a window), until `clear`. Answers: a Kubernetes `Status` with the given code (`status=`;
`retry_after=` adds a Retry-After header, `headers=` any), a dropped connection (`drop=True`: the
client gets no answer), or a delay before forwarding (`delay=` seconds). A server that refuses the
connection (down, restarting) gets the client's connection closed without an answer, as the client
would see it without the proxy (logged as "unreachable"); one that breaks a response off (a watch, a
followed log) breaks the client's off too.

`requests` logs every request as a `Request`: method, path, the answer's status (or "dropped"),
query string, User-Agent, and when it arrived and was answered (time.monotonic of this process,
so a test compares them with its own clock). The proxy knows nothing of the server behind it: a
kube-apiserver does as well as the local one (`upstream_tls=`: the `ssl.SSLContext` the proxy uses
towards an https server, its CA and the client certificate it presents there, e.g.
`pets_localkube.client.tls_context(ca, admin_cert, admin_key)`; the clients behind the proxy then
speak plain HTTP to it and act as that certificate's user). The kubelet and scheduler keep talking
to the server directly, so only the clients pointed at the proxy see faults.
"""
from __future__ import annotations

import asyncio
import json
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import aiohttp
from aiohttp import web

from pets_localkube.cluster import kubeconfig_text

# Headers of one hop, not of the message (RFC 9110 7.6.1), and those aiohttp sets itself.
HOP_HEADERS = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
               "transfer-encoding", "upgrade", "host", "content-length"}


@dataclass
class Fault:
    method: str
    path: re.Pattern
    times: int | None  # None: until cleared
    status: int | None = None
    reason: str = ""
    message: str = ""
    drop: bool = False
    delay: float = 0.0
    body: re.Pattern | None = None
    headers: dict[str, str] = field(default_factory=dict)  # added to the answer (Retry-After, ...)
    until: float | None = None  # time.monotonic() after which it no longer matches; None: no window
    hits: int = 0
    seen: list[str] = field(default_factory=list)  # the paths it answered

    def matches(self, method: str, path: str, body: bytes = b"", now: float | None = None) -> bool:
        return (self.method in ("*", method)) and bool(self.path.search(path)) and \
            (self.times is None or self.hits < self.times) and \
            (self.until is None or (time.monotonic() if now is None else now) < self.until) and \
            (self.body is None or bool(self.body.search(body.decode("utf-8", errors="replace"))))


class Request(NamedTuple):
    """One request through the proxy (the first three fields: what `requests` held before)."""
    method: str
    path: str
    status: int | str  # the answer's code, "dropped", or "unreachable" (the server refused the connection)
    query: str = ""
    user_agent: str = ""
    arrived: float = 0.0  # time.monotonic() when it came in
    answered: float = 0.0  # ... when its answer (status and headers) went out

    @property
    def write(self) -> bool:
        return self.method not in ("GET", "HEAD", "OPTIONS")


class FaultProxy:
    def __init__(self, upstream: str, workdir: Path, upstream_tls: ssl.SSLContext | None = None):
        self.upstream = upstream.rstrip("/")
        self.upstream_tls = upstream_tls
        self.workdir = Path(workdir)
        self.kubeconfig = self.workdir / "kubeconfig-via-faults"
        self.url = ""
        self.faults: list[Fault] = []
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None

    # --- faults ---------------------------------------------------------------------------------

    def fail(self, method: str, path: str, status: int | None = None, reason: str = "", message: str = "",
             times: int | None = 1, drop: bool = False, delay: float = 0.0, body: str | None = None,
             retry_after: float | None = None, headers: dict[str, str] | None = None,
             for_seconds: float | None = None) -> Fault:
        answer_headers = dict(headers or {})
        if retry_after is not None:
            answer_headers["Retry-After"] = f"{retry_after:g}"
        fault = Fault(method.upper(), re.compile(path), times, status, reason, message, drop, delay,
                      re.compile(body) if body is not None else None, answer_headers,
                      time.monotonic() + for_seconds if for_seconds is not None else None)
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self.faults.clear()

    def _take(self, method: str, path: str, body: bytes = b"") -> Fault | None:
        now = time.monotonic()
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, path, body, now):
                    fault.hits += 1
                    fault.seen.append(path)
                    return fault
        return None

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._main, name="fault-proxy", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error:
            raise self._error
        self.kubeconfig.write_text(kubeconfig_text(self.url), encoding="utf-8")
        return self

    def stop(self) -> None:
        if self._loop and self._stop and self._thread and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(30)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _main(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as error:  # reported to start()
            self._error = error
        finally:
            self._ready.set()
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1)
        await runner.setup()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        await web.SockSite(runner, listener).start()
        self.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        connector = aiohttp.TCPConnector(ssl=self.upstream_tls) if self.upstream_tls is not None else None
        async with aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None),
                                         connector=connector) as session:
            self._session = session
            self._ready.set()
            await self._stop.wait()
            await runner.cleanup()

    # --- requests -------------------------------------------------------------------------------

    def _log(self, request: web.Request, status: int | str, arrived: float) -> None:
        self.requests.append(Request(request.method, request.path, status, request.query_string,
                                     request.headers.get("User-Agent", ""), arrived, time.monotonic()))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        fault = self._take(request.method, request.path, await request.read() if request.can_read_body else b"")
        if fault is not None:
            if fault.drop:
                self._log(request, "dropped", arrived)
                assert request.transport is not None
                request.transport.close()  # the client sees the connection end without an answer
                raise asyncio.CancelledError()
            if fault.status is not None:
                await request.read()
                response = web.json_response(
                    {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                     "message": fault.message, "reason": fault.reason, "code": fault.status},
                    status=fault.status, dumps=json.dumps, headers=fault.headers)
                self._log(request, fault.status, arrived)
                return response
            await asyncio.sleep(fault.delay)
        return await self._forward(request, arrived)

    def rewrite(self, method: str, path: str, body: bytes) -> bytes:
        """The request body as forwarded (a subclass may change it, as a mutating webhook would)."""
        return body

    async def _forward(self, request: web.Request, arrived: float) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        body = self.rewrite(request.method, request.path, await request.read())
        try:
            return await self._relay(request, arrived, headers, body)
        except aiohttp.ClientError as error:  # the server is down or went away: the client's connection ends too
            if isinstance(error, aiohttp.ClientConnectorError):
                self._log(request, "unreachable", arrived)
            if request.transport is not None:
                request.transport.close()
            raise asyncio.CancelledError() from None

    async def _relay(self, request: web.Request, arrived: float, headers: dict[str, str],
                     body: bytes) -> web.StreamResponse:
        async with self._session.request(request.method, self.upstream + request.path_qs, headers=headers,
                                         data=body if body else None, allow_redirects=False,
                                         # as sent: no Content-Type added to a body without one
                                         skip_auto_headers=("Content-Type", "User-Agent", "Accept-Encoding")) as upstream:
            self._log(request, upstream.status, arrived)
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers={
                k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS})
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
