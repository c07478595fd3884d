"""Pod 0's log followed on the event loop (`logfollow`): the pure parts, and followers against a small HTTP server:
a dropped connection re-read without doubling, giving up when the pod is gone, the attempt and resumed lines
passed to the book, timestamps, batching, the session's credentials.
"""
from __future__ import annotations

import asyncio
import json

import kubernetes
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from pets_api.metric_lines import LineSplitter, split_lines
from pets_operator import logfollow
from pets_operator.epochs import EpochBook
from pets_operator.logfollow import (
    LogBroken,
    LogStreams,
    LogUnavailable,
    Retries,
    auth_headers,
    epoch_batches,
    parse_timestamp,
    split_timestamp,
)

STAMP = "2026-01-01T00:00:00.500000000Z"


def epoch_line(epoch, accuracy, **extra):
    return f"{STAMP} " + json.dumps({"event": "epoch", "epoch": epoch, "accuracy": accuracy, **extra}) + "\n"


def test_timestamps_as_the_kubelet_writes_them():
    assert parse_timestamp(STAMP) == 1767225600.5
    assert parse_timestamp("2026-01-01T01:00:00+01:00") == 1767225600.0
    assert parse_timestamp("epoch") is None and parse_timestamp("2026-01-01T00:00:00.x") is None
    assert split_timestamp(f"{STAMP} hello world") == (1767225600.5, "hello world")
    assert split_timestamp("no stamp here") == (None, "no stamp here")


def test_line_splitter_across_chunks():
    splitter = LineSplitter()
    assert splitter.feed(b"ab") == [] and splitter.feed(b"c\nde") == ["abc"]
    assert splitter.feed(b"f\n\ng") == ["def", ""] and splitter.rest() == ["g"] and splitter.rest() == []
    assert list(split_lines([b"ab", b"c\nde", b"f\n\ng"])) == ["abc", "def", "", "g"]  # the same, for a blocking reader


def test_epoch_batches_keep_order_and_split_where_resumed_changes():
    lines = [f"{STAMP} text", epoch_line(0, 0.4, resumed=True).strip(), epoch_line(1, 0.5, resumed=True).strip(),
             epoch_line(2, 0.6).strip(), f"{STAMP} [rank0]: epoch 3: 70.00"]
    batches = epoch_batches(lines)
    assert [([e["epoch"] for e in entries], resumed) for entries, _, resumed in batches] == [([0, 1], True),
                                                                                            ([2, 3], False)]
    assert batches[0][1] == [1767225600.5, 1767225600.5]


def test_the_authorization_header_is_the_clients():
    configuration = kubernetes.client.Configuration(host="https://k8s", api_key={"authorization": "Bearer abc"})
    assert auth_headers(configuration) == {"Authorization": "Bearer abc"}
    assert auth_headers(kubernetes.client.Configuration(host="http://k8s")) == {}


def test_the_authorization_header_carries_a_kubeconfigs_token(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://k8s"}}],
        "users": [{"name": "sa", "user": {"token": "abc"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "sa"}}]}))
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    assert auth_headers(configuration) == {"Authorization": "Bearer abc"}


class FakeApi:
    """`/log` answers from a list of bodies (a body ending without newline is a dropped connection), `/pods/p`
    from a list of (uid, phase) or None (404)."""

    def __init__(self, logs, states):
        self.logs, self.states = list(logs), list(states)
        self.requests: list[tuple[str, dict, str]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/ml/pods/p/log", self.log)
        app.router.add_get("/api/v1/namespaces/ml/pods/p", self.pod)
        return app

    async def log(self, request):
        self.requests.append(("log", dict(request.query), request.headers.get("Authorization", "")))
        body = self.logs.pop(0) if len(self.logs) > 1 else self.logs[0]
        if isinstance(body, int):
            return web.Response(status=body, text="not there")
        response = web.StreamResponse()
        await response.prepare(request)
        for part in body:
            await response.write(part.encode())
            await asyncio.sleep(0.01)
        return response

    async def pod(self, request):
        self.requests.append(("pod", {}, ""))
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        if state is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        return web.json_response({"metadata": {"uid": state[0]}, "status": {"phase": state[1]}})


async def follow(api: FakeApi, book, attempt=None, **streams_options):
    async with TestServer(api.app()) as server:
        configuration = kubernetes.client.Configuration(host=str(server.make_url("")).rstrip("/"),
                                                        api_key={"authorization": "Bearer token"})
        streams = LogStreams(configuration, **streams_options)
        drained = asyncio.Event()
        try:
            follower = streams.follow("ml", "p", "trainer", "uid", book, drained.set, attempt=attempt)
            await asyncio.wait_for(drained.wait(), 20)
            assert follower.drained.is_set() and not streams.followers
        finally:
            await streams.close()


async def test_a_dropped_log_is_read_again_without_doubling_and_with_the_clients_credentials():
    published, latencies, deliveries = [], [], []
    book = EpochBook([], published.append)
    api = FakeApi([["text\n", epoch_line(0, 0.4), '{"event": "ep'],
                   ["text\n", epoch_line(0, 0.4), epoch_line(1, 0.6)]],
                  [("uid", "Running"), ("uid", "Succeeded")])
    await follow(api, book, on_epoch=latencies.append, on_delivery=deliveries.append)
    assert book.epochs == [{"epoch": 0, "accuracy": 0.4}, {"epoch": 1, "accuracy": 0.6}]
    assert len(published) == 2 and len(latencies) == 2 and min(latencies) > 0
    # Each line reached the operator before its patch returned: delivery is the first part of the latency.
    assert len(deliveries) == 2 and all(0 < delivered <= latency for delivered, latency in zip(deliveries, latencies))
    logs = [request for request in api.requests if request[0] == "log"]
    assert len(logs) == 2 and logs[0][1] == {"container": "trainer", "follow": "true", "timestamps": "true"}
    assert logs[0][2] == "Bearer token"


async def test_following_stops_when_the_pod_is_gone():
    errors = []
    api = FakeApi([404], [None])
    await follow(api, EpochBook([], lambda _: None), on_error=lambda *args: errors.append(args[:2]))
    assert errors and errors[0] == ("get", "pods/log")


def test_an_api_server_away_is_waited_out_backing_off_and_a_refused_log_is_given_up(monkeypatch):
    monkeypatch.setattr(logfollow, "MAX_FAILURES", 3)
    retries = Retries()
    for error in [ConnectionRefusedError(), LogUnavailable(503, "etcd"), LogBroken("reset"), LogUnavailable(429, "")] * 5:
        retries.failed(error)
        assert not retries.give_up()
    assert retries.delay() == logfollow.RETRY_MAX_SECONDS
    retries.answered()
    assert retries.delay() == logfollow.RETRY_SECONDS
    retries.failed(ConnectionRefusedError())
    retries.failed(ConnectionRefusedError())
    assert retries.delay() == 2 * logfollow.RETRY_SECONDS
    for _ in range(2):
        retries.failed(LogUnavailable(403, "forbidden"))
    assert not retries.give_up() and retries.delay() == logfollow.RETRY_SECONDS
    retries.failed(LogUnavailable(403, "forbidden"))
    assert retries.give_up()


async def test_a_log_broken_by_an_api_server_restart_is_read_again_however_long_the_restart(monkeypatch):
    """More failed tries in a row than a refused log is given (the old follower stopped there, losing epoch 1)."""
    monkeypatch.setattr(logfollow, "MAX_FAILURES", 3)
    monkeypatch.setattr(logfollow, "RETRY_SECONDS", 0.01)
    monkeypatch.setattr(logfollow, "RETRY_MAX_SECONDS", 0.02)
    book = EpochBook([], lambda _: None)
    api = FakeApi([["text\n", epoch_line(0, 0.4), '{"event": "ep'], 503, 503, 502, 503, 503, 504,
                   ["text\n", epoch_line(0, 0.4), epoch_line(1, 0.6)]],
                  [("uid", "Running"), ("uid", "Succeeded")])
    await follow(api, book)
    assert book.epochs == [{"epoch": 0, "accuracy": 0.4}, {"epoch": 1, "accuracy": 0.6}]
    assert len([request for request in api.requests if request[0] == "log"]) == 8


async def test_the_attempt_and_resumed_lines_reach_the_book_one_add_per_run():
    calls = []

    class Book:
        epochs = []

        def add(self, entries, attempt=None, resumed=False):
            calls.append(([e["epoch"] for e in entries], attempt, resumed))
            return False

    api = FakeApi([[epoch_line(0, 0.5, resumed=True) + epoch_line(1, 0.6)]], [("uid", "Succeeded")])
    await follow(api, Book(), attempt=2)
    assert calls == [([0], 2, True), ([1], 2, False)]


async def test_stop_ends_a_follower_waiting_on_a_silent_log():
    api = FakeApi([["text\n"] + ["" for _ in range(2000)]], [("uid", "Running")])
    async with TestServer(api.app()) as server:
        streams = LogStreams(kubernetes.client.Configuration(host=str(server.make_url("")).rstrip("/")))
        drained = []
        follower = streams.follow("ml", "p", "trainer", "uid", EpochBook([], lambda _: None), lambda: drained.append(1))
        await asyncio.sleep(0.2)
        follower.stop()
        await asyncio.wait_for(follower.wait(), 5)
        assert drained == [1] and not streams.followers
        await streams.close()


@pytest.mark.parametrize("host", ["http://k8s"])
def test_plain_http_needs_no_tls_context(host):
    from pets_operator.logfollow import ssl_context
    assert ssl_context(kubernetes.client.Configuration(host=host)) is None
    insecure = kubernetes.client.Configuration(host="https://k8s")
    insecure.verify_ssl = False
    assert ssl_context(insecure) is False
