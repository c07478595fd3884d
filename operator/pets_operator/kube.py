"""The few Kubernetes API calls the operator makes itself (blocking; the daemon runs them in threads).

kopf watches and indexes; these calls create and delete the owned objects and patch the job's
status through the `/status` subresource (pod 0's log is `logfollow`'s).

Every write first asks `leadership.guard_write` (with leader election, only the lease holder
writes; a process that lost it ends before the call leaves), and names the writer: the leader's
identity as the field manager and in the User-Agent. A 429 or 5xx with Retry-After holds back
every call of this client until then (`Throttle`); the callers retry failed calls with backoff.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException

from pets_api import GROUP, PLURAL, VERSION
from pets_api.connection import CONNECTION_POOL_SIZE, kubeconfig_path, load_api_client  # noqa: F401

from . import leadership
from .refusals import RETRY_AFTER_MAX_SECONDS, ApiFailure, retry_after_seconds

# (connect, read) seconds for every call but the followed log: a silent API server fails the call, never hangs the job.
REQUEST_TIMEOUT = (10, 30)
T = TypeVar("T")


class KubeError(Exception):
    """An API call failed: refused (4xx/5xx), or no answer came (timeout, connection). `failure` says how."""

    def __init__(self, failure: ApiFailure):
        super().__init__(failure.describe())
        self.failure = failure


def failure_of(error: BaseException) -> ApiFailure | None:
    """The `ApiFailure` of an exception the client raises for a failed call; None for anything else (a bug)."""
    if isinstance(error, ApiException):
        reason, message = error.reason or "", ""
        try:
            status = json.loads(error.body or "")
        except (TypeError, ValueError):
            status = None
        if isinstance(status, dict):
            reason = status.get("reason") or reason
            message = status.get("message") or ""
        elif error.body:
            message = str(error.body).strip()[:500]
        return ApiFailure(error.status, reason, message, retry_after_seconds(error.headers))
    if isinstance(error, (urllib3.exceptions.HTTPError, OSError)):
        cause = error.reason if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason else error
        return ApiFailure(None, type(cause).__name__, str(cause))
    return None


def _calling(call: Callable[[], T]) -> T:
    try:
        return call()
    except Exception as error:  # noqa: BLE001 - translated when it is an API failure, else re-raised
        failure = failure_of(error)
        if failure is None:
            raise
        raise KubeError(failure) from None


class Throttle:
    """No call before the moment a server's Retry-After named (one for every call of a client: the API server
    answers 429 to a client whose flow is overloaded, not to one request)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self._clock = clock
        self._sleep = sleep
        self._until = 0.0
        self._lock = threading.Lock()

    def hold(self, seconds: float) -> None:
        with self._lock:
            self._until = max(self._until, self._clock() + min(seconds, RETRY_AFTER_MAX_SECONDS))

    def wait(self) -> None:
        while (left := self._until - self._clock()) > 0:
            self._sleep(left)


class Kube:
    """Each call raises `KubeError` when it fails (404 and 409 where they mean done: see each call)."""

    def __init__(self, api_client: kubernetes.client.ApiClient, throttle: Throttle | None = None):
        identity = leadership.writer_identity()
        if identity is not None:
            api_client.user_agent = leadership.user_agent(api_client.user_agent, identity)
        self.field_manager = identity  # None: the API server's default (from the User-Agent)
        self.throttle = throttle or Throttle()
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.networking = kubernetes.client.NetworkingV1Api(api_client)
        # The gang schedulers' PodGroups (scheduling.x-k8s.io, scheduling.volcano.sh): custom objects too,
        # kept apart from `custom` (the job) so that each call's permission is plain to see.
        self.scheduling = kubernetes.client.CustomObjectsApi(api_client)

    def create_pod(self, body: dict[str, Any]) -> bool:
        """False when it already exists (creation is idempotent)."""
        return _created(self._write(lambda: self.core.create_namespaced_pod(
            body["metadata"]["namespace"], body, field_manager=self.field_manager, _request_timeout=REQUEST_TIMEOUT)))

    def create_service(self, body: dict[str, Any]) -> bool:
        return _created(self._write(lambda: self.core.create_namespaced_service(
            body["metadata"]["namespace"], body, field_manager=self.field_manager, _request_timeout=REQUEST_TIMEOUT)))

    def create_network_policy(self, body: dict[str, Any]) -> bool:
        return _created(self._write(lambda: self.networking.create_namespaced_network_policy(
            body["metadata"]["namespace"], body, field_manager=self.field_manager, _request_timeout=REQUEST_TIMEOUT)))

    def create_pod_group(self, body: dict[str, Any]) -> bool:
        """A gang scheduler's PodGroup (`apiVersion` says whose); False when it already exists."""
        group, _, version = body["apiVersion"].partition("/")
        return _created(self._write(lambda: self.scheduling.create_namespaced_custom_object(
            group, version, body["metadata"]["namespace"], "podgroups", body, field_manager=self.field_manager,
            _request_timeout=REQUEST_TIMEOUT)))

    def existing(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The object already there under the name of `body` (after a create answered 409); None when it is gone."""
        namespace, name, kind = body["metadata"]["namespace"], body["metadata"]["name"], body["kind"]
        if kind == "Pod":
            found = _unless_missing(lambda: self.core.read_namespaced_pod(
                name, namespace, _request_timeout=REQUEST_TIMEOUT))
        elif kind == "Service":
            found = _unless_missing(lambda: self.core.read_namespaced_service(
                name, namespace, _request_timeout=REQUEST_TIMEOUT))
        elif kind == "NetworkPolicy":
            found = _unless_missing(lambda: self.networking.read_namespaced_network_policy(
                name, namespace, _request_timeout=REQUEST_TIMEOUT))
        else:  # a gang scheduler's PodGroup
            group, _, version = body["apiVersion"].partition("/")
            found = _unless_missing(lambda: self.scheduling.get_namespaced_custom_object(
                group, version, namespace, "podgroups", name, _request_timeout=REQUEST_TIMEOUT))
        if found is None:
            return None
        return {"kind": kind, **self.core.api_client.sanitize_for_serialization(found)}

    def failed_mounts(self, namespace: str) -> dict[str, str]:
        """Pod uid -> the message of the kubelet's latest FailedMount Warning Event about it, in `namespace`
        (the only place a volume that cannot be mounted is reported: the pod just stays ContainerCreating)."""
        events = _calling(lambda: self.core.list_namespaced_event(
            namespace, field_selector="involvedObject.kind=Pod,reason=FailedMount,type=Warning",
            _request_timeout=REQUEST_TIMEOUT))
        latest: dict[str, str] = {}
        for event in sorted(events.items, key=lambda e: str(e.last_timestamp or e.event_time or "")):
            if event.involved_object is not None and event.involved_object.uid:
                latest[event.involved_object.uid] = event.message or "FailedMount"
        return latest

    def delete_pod(self, namespace: str, name: str) -> None:
        _ignore_missing(self._write(lambda: self.core.delete_namespaced_pod(
            name, namespace, _request_timeout=REQUEST_TIMEOUT)))

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _unless_missing(self._read(lambda: self.custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, _request_timeout=REQUEST_TIMEOUT)))

    def patch_job_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any] | None:
        """A JSON merge patch of `status` (lists are replaced whole); the job as stored after it, None if gone."""
        return _unless_missing(self._write(lambda: self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": status}, field_manager=self.field_manager,
            _content_type="application/merge-patch+json", _request_timeout=REQUEST_TIMEOUT)))

    def delete_job(self, namespace: str, name: str) -> None:
        # Background: the garbage collector removes the owned pods and Service.
        _ignore_missing(self._write(lambda: self.custom.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, propagation_policy="Background", _request_timeout=REQUEST_TIMEOUT)))

    def _read(self, call: Callable[[], T]) -> Callable[[], T]:
        return lambda: self._send(call)

    def _write(self, call: Callable[[], T]) -> Callable[[], T]:
        return lambda: self._send(call, write=True)

    def _send(self, call: Callable[[], T], write: bool = False) -> T:
        """The call, once the server's Retry-After has passed and, for a write, while this process may write."""
        self.throttle.wait()
        if write:
            leadership.guard_write()
        try:
            return call()
        except ApiException as error:
            wait = retry_after_seconds(error.headers)
            if wait is not None:
                self.throttle.hold(wait)
            raise


def _created(call) -> bool:
    try:
        _calling(call)
    except KubeError as error:
        if error.failure.code == 409:  # AlreadyExists: made by an earlier step
            return False
        raise
    return True


def _unless_missing(call: Callable[[], T]) -> T | None:
    try:
        return _calling(call)
    except KubeError as error:
        if error.failure.code == 404:
            return None
        raise


def _ignore_missing(call) -> None:
    _unless_missing(call)
