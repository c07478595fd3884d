"""hack/toxiproxy.sh and tests/support/toxiproxy.py: each toxic the e2e test uses, on a local TCP echo server.

Every exchange is one fresh connection through the proxy: the client sends bytes, the echo server
sends them back, and the client measures what it got and when.
"""
from __future__ import annotations

import os
import socket
import socketserver
import subprocess
import threading
import time

import pytest

from tests.conftest import TOXIPROXY_SCRIPT
from tests.support.toxiproxy import ToxiproxyError, ToxiproxyServer


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except OSError:  # the proxy reset or closed its side
            pass


@pytest.fixture(scope="module")
def echo_server():
    socketserver.ThreadingTCPServer.daemon_threads = True
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield f"127.0.0.1:{server.server_address[1]}"
        server.shutdown()


@pytest.fixture
def proxy(toxiproxy_binary, echo_server, tmp_path):
    with ToxiproxyServer(toxiproxy_binary, tmp_path / "toxiproxy") as server:
        yield server.proxy("echo", upstream=echo_server)


def exchange(port: int, payload: bytes, timeout: float = 10) -> tuple[bytes, float]:
    """Send `payload`, read until it all came back or the connection ended: (what came back, seconds)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
        connection.sendall(payload)
        received = b""
        while len(received) < len(payload):
            chunk = connection.recv(65536)
            if not chunk:
                break
            received += chunk
    return received, time.monotonic() - started


def test_the_script_pins_v2_5_0_and_a_warm_call_needs_no_go(toxiproxy_binary):
    versions = subprocess.run(["bash", str(TOXIPROXY_SCRIPT), "--versions"], capture_output=True, text=True,
                              check=True).stdout.split()
    assert "toxiproxy=v2.5.0" in versions
    started = time.monotonic()
    warm = subprocess.run(["bash", str(TOXIPROXY_SCRIPT)], capture_output=True, text=True, check=True,
                          env={**os.environ, "GO": "/nonexistent/go"})
    assert time.monotonic() - started < 5  # measured: well under 0.1 s; generous for a loaded machine
    assert warm.stdout.strip().splitlines()[-1] == str(toxiproxy_binary.parent)
    said = subprocess.run([str(toxiproxy_binary), "-version"], capture_output=True, text=True, check=True)
    assert "2.5.0" in said.stdout + said.stderr


def test_latency_delays_each_way_and_removing_it_restores_the_connection(proxy):
    assert exchange(proxy.port, b"ping") == (b"ping", pytest.approx(0, abs=0.25))
    down = proxy.add("latency", stream="downstream", latency=300)
    proxy.add("latency", stream="upstream", latency=300)
    assert sorted(t.name for t in proxy.toxics()) == ["latency_downstream", "latency_upstream"]
    echoed, seconds = exchange(proxy.port, b"ping")
    assert echoed == b"ping" and seconds >= 0.6
    proxy.remove(down)
    echoed, seconds = exchange(proxy.port, b"ping")
    assert echoed == b"ping" and 0.3 <= seconds < 0.6 + 0.25
    proxy.clear()
    assert not proxy.toxics()
    assert exchange(proxy.port, b"ping")[1] < 0.25


def test_reset_peer_resets_the_connection(proxy):
    proxy.add("reset_peer", stream="upstream", timeout=0)
    with pytest.raises(ConnectionResetError):
        exchange(proxy.port, b"ping")
    proxy.clear()
    assert exchange(proxy.port, b"ping")[0] == b"ping"


def test_timeout_holds_the_data_and_closes_the_connection_after_it(proxy):
    proxy.add("timeout", stream="upstream", timeout=800)
    echoed, seconds = exchange(proxy.port, b"ping")
    assert echoed == b"" and seconds >= 0.8  # nothing reached the server; closed, not reset
    proxy.clear()
    assert exchange(proxy.port, b"ping")[0] == b"ping"


def test_bandwidth_limits_the_rate(proxy):
    payload = os.urandom(32 * 1024)
    assert exchange(proxy.port, payload)[1] < 0.5
    proxy.add("bandwidth", stream="downstream", rate=16)  # KB/s: 32 KB take about 2 s
    echoed, seconds = exchange(proxy.port, payload)
    assert echoed == payload and seconds >= 1.5


def test_the_api_s_refusals_are_raised_with_its_message(proxy):
    proxy.add("latency", latency=10)
    with pytest.raises(ToxiproxyError, match="409.*toxic already exists"):
        proxy.add("latency", latency=10)
    with pytest.raises(ToxiproxyError, match="404"):
        proxy.remove("no-such-toxic")
    with pytest.raises(ValueError, match="unknown toxic type"):
        proxy.add("packet_loss")
