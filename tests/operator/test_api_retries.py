"""Failed API calls: Retry-After, capped backoff, the throttle of `Kube`, kopf's session and retry settings."""
from __future__ import annotations

import asyncio
import itertools
import json
from datetime import datetime, timedelta, timezone

import kubernetes
import pytest
import yarl
from kubernetes.client.exceptions import ApiException

from pets_operator.kopf_api import middleware
from pets_operator.kube import Kube, KubeError, Throttle, failure_of
from pets_operator.metrics import request_call
from pets_operator.refusals import (
    ApiFailure,
    CappedBackoffs,
    CreateFailure,
    backoff_seconds,
    is_api_error,
    retry_after_seconds,
)

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize("headers, seconds", [
    ({"Retry-After": "2"}, 2.0),
    ({"retry-after": " 1.5 "}, 1.5),
    ({"Retry-After": "Thu, 01 Jan 2026 00:00:30 GMT"}, 30.0),  # the HTTP-date form
    ({"Retry-After": "Wed, 31 Dec 2025 23:59:00 GMT"}, 0.0),  # already passed
    ({"Retry-After": "soon"}, None),
    ({}, None),
    (None, None),
])
def test_retry_after_is_read_from_the_headers(headers, seconds):
    assert retry_after_seconds(headers, now=T0) == seconds


def test_backoff_doubles_to_a_minute_and_never_undercuts_retry_after():
    assert [backoff_seconds(n) for n in (1, 2, 3, 7, 8, 1000)] == [1, 2, 4, 60, 60, 60]
    assert backoff_seconds(1, retry_after=2) == 2 and backoff_seconds(4, retry_after=2) == 8
    assert backoff_seconds(1, retry_after=86400) == 300  # a broken proxy cannot stop the operator for a day
    failed = CreateFailure("Pod p-0", ApiFailure(429, "TooManyRequests", "slow down", retry_after=5), 0, 1, T0)
    assert failed.retry_at == T0 + timedelta(seconds=5)


def test_kopf_backs_off_without_end():
    backoffs = CappedBackoffs()
    assert list(itertools.islice(backoffs, 9)) == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert list(itertools.islice(backoffs, 2)) == [1, 2]  # a fresh series for every request


@pytest.mark.parametrize("code, counted", [(None, True), (500, True), (503, True), (429, True), (403, True),
                                           (422, True), (404, False), (409, False), (410, False), (200, False)])
def test_what_counts_as_an_api_error(code, counted):
    assert is_api_error(code) is counted


def throttled_exception(code: int, retry_after: str | None) -> ApiException:
    error = ApiException(status=code, reason="Too Many Requests")
    error.body = json.dumps({"kind": "Status", "reason": "TooManyRequests", "message": "slow down", "code": code})
    error.headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return error


def test_failure_of_keeps_the_retry_after():
    failure = failure_of(throttled_exception(429, "2"))
    assert failure == ApiFailure(429, "TooManyRequests", "slow down", retry_after=2.0)
    assert failure.describe() == "429 TooManyRequests: slow down (Retry-After 2s)"
    assert failure_of(throttled_exception(503, None)).retry_after is None


class FakeTime:
    def __init__(self):
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class ThrottledCustom:
    """Answers 429 with Retry-After the first time, then succeeds; notes when each call came."""

    def __init__(self, time: FakeTime, retry_after: str | None = "2"):
        self.time, self.retry_after, self.calls = time, retry_after, []

    def patch_namespaced_custom_object_status(self, *args, **kwargs):
        self.calls.append(self.time.now)
        if len(self.calls) == 1:
            raise throttled_exception(429, self.retry_after)
        return {"status": {}}

    get_namespaced_custom_object = patch_namespaced_custom_object_status


def test_after_a_retry_after_no_call_of_the_client_leaves_before_it_has_passed():
    time = FakeTime()
    kube = Kube(kubernetes.client.ApiClient(), Throttle(time.clock, time.sleep))
    kube.custom = ThrottledCustom(time)
    with pytest.raises(KubeError) as raised:
        kube.patch_job_status("ml", "a", {})
    assert raised.value.failure.retry_after == 2.0
    time.now += 0.5  # the caller retries after its own backoff, sooner than the server asked
    kube.get_job("ml", "a")  # any call of this client waits
    assert kube.custom.calls == [0.0, 2.0] and time.slept == [1.5]


def test_without_retry_after_the_next_call_goes_at_once():
    time = FakeTime()
    kube = Kube(kubernetes.client.ApiClient(), Throttle(time.clock, time.sleep))
    kube.custom = ThrottledCustom(time, retry_after=None)
    with pytest.raises(KubeError):
        kube.patch_job_status("ml", "a", {})
    kube.patch_job_status("ml", "a", {})
    assert time.slept == []


@pytest.mark.parametrize("method, path, query, call", [
    ("GET", "/api/v1/pods", "watch=true&resourceVersion=5", ("watch", "pods")),
    ("GET", "/api/v1/namespaces/ml/pods", "", ("list", "pods")),
    ("GET", "/api/v1/namespaces/ml/pods/p-0/log", "follow=true", ("get", "pods/log")),
    ("POST", "/api/v1/namespaces/ml/events", "", ("create", "events")),
    ("PATCH", "/apis/training.pets.dev/v1alpha1/namespaces/ml/petstrainingjobs/a", "", ("patch", "petstrainingjobs")),
    ("PATCH", "/apis/training.pets.dev/v1alpha1/namespaces/ml/petstrainingjobs/a/status", "",
     ("patch", "petstrainingjobs/status")),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ops/leases/l", "", ("update", "leases")),
    ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "watch=1", ("watch", "customresourcedefinitions")),
    ("GET", "/api/v1/namespaces/ml", "", ("get", "namespaces")),
    ("DELETE", "/api/v1/namespaces/ml/pods", "", ("deletecollection", "pods")),
    ("GET", "/apis", "", ("list", "")),
])
def test_request_call_names_verb_and_resource_as_the_audit_log_does(method, path, query, call):
    assert request_call(method, path, query) == call


class FakeRequest:
    def __init__(self, method: str, url: str):
        self.method, self.url = method, yarl.URL(url)


class FakeResponse:
    def __init__(self, status: int):
        self.status = status


def run_middleware(method: str, url: str, status: int | Exception):
    asked, errors, sent = [], [], []

    async def handler(request):
        sent.append(request.method)
        if isinstance(status, Exception):
            raise status
        return FakeResponse(status)

    async def go():
        return await middleware(lambda: asked.append(method), lambda *error: errors.append(error))(
            FakeRequest(method, url), handler)

    try:
        asyncio.run(go())
    except Exception as error:  # noqa: BLE001 - the test looks at what got through
        errors.append(("raised", type(error).__name__))
    return asked, errors, sent


def test_kopf_writes_ask_first_and_failed_answers_are_counted():
    server = "http://api"
    assert run_middleware("PATCH", f"{server}/apis/training.pets.dev/v1alpha1/namespaces/ml/petstrainingjobs/a", 200) \
        == (["PATCH"], [], ["PATCH"])
    assert run_middleware("GET", f"{server}/api/v1/pods?watch=true", 503) == ([], [("watch", "pods", 503)], ["GET"])
    assert run_middleware("POST", f"{server}/api/v1/namespaces/ml/events", 429) == \
        (["POST"], [("create", "events", 429)], ["POST"])
    assert run_middleware("GET", f"{server}/api/v1/namespaces/ml/pods/x", 404) == ([], [], ["GET"])


def test_a_fenced_kopf_write_never_leaves():
    sent = []

    def lost():
        raise RuntimeError("not the leader")

    async def handler(request):
        sent.append(request)
        return FakeResponse(200)

    with pytest.raises(RuntimeError):
        asyncio.run(middleware(lost, lambda *error: None)(FakeRequest("POST", "http://api/api/v1/namespaces/ml/events"),
                                                          handler))
    assert sent == []
