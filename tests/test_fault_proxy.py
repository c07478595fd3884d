"""tests/support/fault_proxy.py itself: what a client behind it sees when the server behind it is down."""
from __future__ import annotations

import http.client
import socket

import pytest

from tests.support.fault_proxy import FaultProxy


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens there once the probe is closed


def test_a_server_that_refuses_the_connection_ends_the_client_s_connection_without_an_answer(tmp_path):
    with FaultProxy(f"http://127.0.0.1:{closed_port()}", tmp_path) as proxy:
        host, port = proxy.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        connection.request("GET", "/api/v1/namespaces/default/pods")
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            connection.getresponse()  # as without the proxy: no answer, never a 500 of the proxy's own
        connection.close()
        assert [(r.method, r.path, r.status) for r in proxy.requests] == [
            ("GET", "/api/v1/namespaces/default/pods", "unreachable")]
