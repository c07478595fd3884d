"""Toxiproxy (a TCP proxy that injects connection faults) as a process, driven through its HTTP API.

    with ToxiproxyServer(binary, workdir) as toxiproxy:
        proxy = toxiproxy.proxy("apiserver", upstream="127.0.0.1:6443")   # listens on a free port
        proxy.listen                                                        # "127.0.0.1:<port>"
        lag = proxy.add("latency", stream="downstream", latency=300, jitter=100)
        proxy.add("reset_peer", timeout=0)          # every connection reset when data arrives
        proxy.add("timeout", timeout=2000)          # data held, the connection closed after 2 s
        proxy.add("bandwidth", rate=16)             # KB/s
        proxy.remove(lag)
        proxy.clear()                               # every toxic of the proxy

The server is the binary hack/toxiproxy.sh builds (`toxiproxy-server`, Toxiproxy v2.5.0), started on
a free port of 127.0.0.1 and stopped on exit; its log is `<workdir>/toxiproxy.log`. A proxy passes
bytes through untouched, so TLS goes end to end: a client pointed at the listen port sees the
upstream server's own certificate (kube-apiserver's serving certificate names 127.0.0.1, whatever
the port). Toxics (https://github.com/Shopify/toxiproxy#toxics) apply to open connections as well as
new ones; `stream` is "downstream" (server to client, Toxiproxy's default) or "upstream", and the
attributes are Toxiproxy's own (milliseconds, KB/s). Toxiproxy's API refusing a call raises
`ToxiproxyError` with its message.

Why not a PyPI client: the one on PyPI, toxiproxy-python 0.1.1, had its last release in January
2019 (classifiers up to Python 3.5), depends on `future`, and keeps the API's host and port in class
attributes (one server per process). The API needs four calls (create a proxy, add, remove and list
toxics), which urllib makes here.
"""
from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOXIC_TYPES = ("latency", "bandwidth", "slow_close", "timeout", "reset_peer", "slicer", "limit_data")


class ToxiproxyError(RuntimeError):
    """Toxiproxy's API answered with an error (its status and message)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class Toxic:
    name: str
    type: str
    stream: str
    attributes: dict[str, Any]


class Proxy:
    """One proxy of a running server: `listen` (host:port) forwards to `upstream`."""

    def __init__(self, server: ToxiproxyServer, name: str, listen: str, upstream: str):
        self.server, self.name, self.listen, self.upstream = server, name, listen, upstream

    @property
    def port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])

    def add(self, type: str, stream: str = "downstream", toxicity: float = 1.0, name: str | None = None,
            **attributes: Any) -> Toxic:
        """Add a toxic of `type` (one of TOXIC_TYPES) with Toxiproxy's attributes for it."""
        if type not in TOXIC_TYPES:
            raise ValueError(f"unknown toxic type {type!r}: one of {TOXIC_TYPES}")
        if stream not in ("downstream", "upstream"):
            raise ValueError(f"stream is 'downstream' or 'upstream', not {stream!r}")
        body = {"name": name or f"{type}_{stream}", "type": type, "stream": stream, "toxicity": toxicity,
                "attributes": attributes}
        made = self.server.call("POST", f"/proxies/{self.name}/toxics", body)
        return Toxic(made["name"], made["type"], made["stream"], made["attributes"])

    def remove(self, toxic: Toxic | str) -> None:
        self.server.call("DELETE", f"/proxies/{self.name}/toxics/{getattr(toxic, 'name', toxic)}")

    def toxics(self) -> list[Toxic]:
        return [Toxic(t["name"], t["type"], t["stream"], t["attributes"])
                for t in self.server.call("GET", f"/proxies/{self.name}/toxics")]

    def clear(self) -> None:
        for toxic in self.toxics():
            self.remove(toxic)


class ToxiproxyServer:
    """`toxiproxy-server` on a free port of 127.0.0.1, for the lifetime of the `with` block."""

    def __init__(self, binary: Path, workdir: Path, startup_timeout: float = 15.0):
        self.binary, self.workdir, self.startup_timeout = Path(binary), Path(workdir), startup_timeout
        self.process: subprocess.Popen | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ToxiproxyServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        log = (self.workdir / "toxiproxy.log").open("ab")
        self.process = subprocess.Popen([str(self.binary), "-host", "127.0.0.1", "-port", str(self.port)],
                                        stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self.process.poll() is not None:
                raise ToxiproxyError(f"toxiproxy-server exited with {self.process.returncode}: {self.log()[-2000:]}")
            try:
                self.version = self.call("GET", "/version")
                return self
            except OSError:
                if time.monotonic() > deadline:
                    self.__exit__(None, None, None)
                    raise ToxiproxyError(f"toxiproxy-server did not answer on {self.url} within "
                                         f"{self.startup_timeout} s: {self.log()[-2000:]}") from None
                time.sleep(0.1)

    def __exit__(self, *exc: object) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def log(self) -> str:
        path = self.workdir / "toxiproxy.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                text = answer.read().decode()
        except urllib.error.HTTPError as error:
            raise ToxiproxyError(f"{method} {path}: {error.code} {error.read().decode(errors='replace')}") from None
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError:  # GET /version answers plain text
            return text.strip()

    def proxy(self, name: str, upstream: str, listen: str | None = None) -> Proxy:
        """Create a proxy from `listen` (default: a free port of 127.0.0.1) to `upstream` (host:port)."""
        made = self.call("POST", "/proxies", {"name": name, "listen": listen or f"127.0.0.1:{free_port()}",
                                              "upstream": upstream, "enabled": True})
        return Proxy(self, made["name"], made["listen"], made["upstream"])
