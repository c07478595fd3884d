"""asyncio's TLS read buffers made small (`tlsbuffers`): followed logs over TLS hold little memory each, and a
log longer than the buffer still arrives whole."""
from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess
import tracemalloc
from asyncio import sslproto

import kubernetes
import pytest
from aiohttp import web

from pets_operator.epochs import EpochBook
from pets_operator.logfollow import LogStreams
from pets_operator.tlsbuffers import TLS_READ_BUFFER, shrink_tls_read_buffers

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command for a certificate")
STAMP = "2026-01-01T00:00:00.500000000Z"


@pytest.fixture
def small_buffers(monkeypatch):
    monkeypatch.setattr(sslproto.SSLProtocol, "max_size", sslproto.SSLProtocol.max_size)  # put back afterwards
    shrink_tls_read_buffers()


@pytest.fixture
def certificate(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


class TlsApi:
    """`/log` sends `log` and ends (or, `silent`, stays open after its first line); the pod has ended."""

    def __init__(self, log: str, silent: bool = False):
        self.log, self.silent = log, silent
        self.open = 0
        self.release = asyncio.Event()  # the silent logs end

    async def serve_log(self, request):
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(self.log.encode())
        if self.silent:
            self.open += 1
            await self.release.wait()
        return response

    async def pod(self, request):
        return web.json_response({"metadata": {"uid": "uid"}, "status": {"phase": "Succeeded"}})

    async def start(self, certificate) -> tuple[web.AppRunner, LogStreams]:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/ml/pods/{pod}/log", self.serve_log)
        app.router.add_get("/api/v1/namespaces/ml/pods/{pod}", self.pod)
        runner = web.AppRunner(app)
        await runner.setup()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(certificate[0]), str(certificate[1]))
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        port = runner.addresses[0][1]
        configuration = kubernetes.client.Configuration(host=f"https://127.0.0.1:{port}")
        configuration.ssl_ca_cert = str(certificate[0])
        return runner, LogStreams(configuration)


def test_only_ever_smaller(monkeypatch):
    monkeypatch.setattr(sslproto.SSLProtocol, "max_size", 8 * 1024)
    shrink_tls_read_buffers()
    assert sslproto.SSLProtocol.max_size == 8 * 1024
    monkeypatch.setattr(sslproto.SSLProtocol, "max_size", 256 * 1024)
    shrink_tls_read_buffers()
    assert sslproto.SSLProtocol.max_size == TLS_READ_BUFFER


async def test_a_log_many_buffers_long_arrives_whole_over_tls(small_buffers, certificate):
    lines = []
    for epoch in range(20):
        lines += [f"{STAMP} " + "x" * 2000] * 20  # 40 KB of other output between two epoch lines
        lines.append(f"{STAMP} " + json.dumps({"event": "epoch", "epoch": epoch, "accuracy": epoch / 100}))
    api = TlsApi("\n".join(lines) + "\n")
    runner, streams = await api.start(certificate)
    published = []
    book = EpochBook([], published.append)
    try:
        drained = asyncio.Event()
        streams.follow("ml", "p", "trainer", "uid", book, drained.set)
        await asyncio.wait_for(drained.wait(), 20)
    finally:
        await streams.close()
        await runner.cleanup()
    assert [e["epoch"] for e in book.epochs] == list(range(20)) and published


async def test_followed_logs_over_tls_hold_little_memory_each(small_buffers, certificate):
    followers = 20
    api = TlsApi(f"{STAMP} starting\n", silent=True)
    runner, streams = await api.start(certificate)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(followers):
            streams.follow("ml", f"p{index}", "trainer", "uid", EpochBook([], lambda _: None), lambda: None)
        while api.open < followers:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        api.release.set()
        await streams.close()
        await runner.cleanup()
    # Both ends of each connection are in this process: asyncio's own buffers alone would be 2 x 256 KiB.
    assert held / followers < 128 * 1024, f"{held / followers / 1024:.0f} KiB per followed log"
