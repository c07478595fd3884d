"""Leader election: the fencing decision, the lock's bookkeeping, and every write of `Kube` asking first."""
from __future__ import annotations

import threading
import urllib.request

import kubernetes
import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from pets_operator import leadership
from pets_operator.config import LeaseConfig
from pets_operator.kube import Kube
from pets_operator.leadership import (
    FencedLeaseLock,
    Leadership,
    LeadershipLost,
    _LeaseCalls,
    candidate_identity,
    lease_namespace,
    may_write,
    user_agent,
)
from pets_operator.run import StandbyHealth

LEASE = LeaseConfig(duration_seconds=4, renew_deadline_seconds=3, retry_period_seconds=1)


@pytest.mark.parametrize("now, renewed_at, allowed", [
    (100.0, 99.0, True),  # renewed a second ago
    (100.0, 97.01, True),  # just inside the deadline
    (100.0, 97.0, False),  # exactly the deadline: a standby may take over from duration (> deadline) on
    (160.0, 99.0, False),  # resumed a minute later (SIGSTOP, then SIGCONT): nothing goes out
    (100.0, None, False),  # never held the lease
])
def test_the_holder_may_write_only_within_the_renew_deadline_of_its_last_renewal(now, renewed_at, allowed):
    assert may_write(now, renewed_at, renew_deadline=3) is allowed


def test_identity_namespace_and_user_agent():
    assert candidate_identity("pets-operator-7d9f-x2x", "host", "ab12") == "pets-operator-7d9f-x2x"
    assert candidate_identity("", "laptop", "ab12") == "laptop_ab12"
    assert lease_namespace("ops", "pets-operator") == "ops"
    assert lease_namespace("", "pets-operator\n") == "pets-operator"
    assert lease_namespace("", None) == "default"
    assert user_agent("kopf/1.45.2", "pod-a") == "kopf/1.45.2 (pets-operator pod-a)"
    assert user_agent(user_agent("kopf/1.45.2", "pod-a"), "pod-a") == "kopf/1.45.2 (pets-operator pod-a)"


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeLeases:
    """CoordinationV1Api's lease calls, answering as told."""

    def __init__(self, fail: Exception | None = None):
        self.fail = fail
        self.calls: list[tuple[str, dict]] = []

    def _answer(self, name: str, kwargs: dict):
        self.calls.append((name, kwargs))
        if self.fail is not None:
            raise self.fail
        return kubernetes.client.V1Lease(metadata=kubernetes.client.V1ObjectMeta(name="lease", resource_version="1"),
                                         spec=kubernetes.client.V1LeaseSpec(holder_identity="me"))

    def read_namespaced_lease(self, name, namespace, **kwargs):
        return self._answer("read", kwargs)

    def create_namespaced_lease(self, namespace, body, **kwargs):
        return self._answer("create", kwargs)

    def replace_namespaced_lease(self, name, namespace, body, **kwargs):
        return self._answer("replace", kwargs)


def lock_with(api: FakeLeases, clock: Clock, errors: list | None = None) -> FencedLeaseLock:
    lock = FencedLeaseLock("lease", "ops", "me", kubernetes.client.ApiClient(), clock=clock,
                           on_error=lambda *error: errors.append(error) if errors is not None else None)
    lock.api_instance = _LeaseCalls(api, lock.api_instance._on_error)
    return lock


def record():
    from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord
    return LeaderElectionRecord("me", "4", "2026-01-01 00:00:00", "2026-01-01 00:00:00")


def test_the_lock_notes_when_its_last_successful_write_began():
    clock, api = Clock(), FakeLeases()
    lock = lock_with(api, clock)
    assert lock.renewed_at is None
    assert lock.create("lease", "ops", record()) is True and lock.renewed_at == 1000.0
    clock.now = 1001.0
    assert lock.get("lease", "ops")[0] is True
    assert lock.update("lease", "ops", record()) is True and lock.renewed_at == 1001.0
    assert all(kwargs.get("_request_timeout") for _, kwargs in api.calls)  # never hangs on a silent server
    api.fail, clock.now = ApiException(status=409, reason="Conflict"), 1002.0
    assert lock.update("lease", "ops", record()) is False and lock.renewed_at == 1001.0  # a failed renewal: no credit
    api.fail = None
    lock.released = True
    assert lock.update("lease", "ops", record()) is False and lock.renewed_at == 1001.0  # released: never again


def test_lease_calls_without_an_answer_are_a_failed_try_and_failures_are_counted():
    errors: list = []
    lock = lock_with(FakeLeases(fail=urllib3.exceptions.MaxRetryError(None, "/", "refused")), Clock(), errors)
    found, error = lock.get("lease", "ops")  # the election loop goes on: a failed try, not an exception
    assert found is False and isinstance(error, ApiException)
    lock.api_instance._api.fail = ApiException(status=404, reason="Not Found")
    assert lock.get("lease", "ops")[0] is False  # not there yet: created next, not an error
    lock.api_instance._api.fail = None
    assert lock.get("lease", "ops")[0] is True
    lock.api_instance._api.fail = ApiException(status=503, reason="Service Unavailable")
    assert lock.update("lease", "ops", record()) is False
    assert errors == [("get", "leases", None), ("update", "leases", 503)]


def leading(clock: Clock, lost: list) -> Leadership:
    lock = lock_with(FakeLeases(), clock)
    chosen = Leadership(lock, LEASE, on_lost=lost.append, clock=clock)
    lock.create("lease", "ops", record())
    chosen.leading.set()
    return chosen


def test_check_passes_while_renewed_and_loses_the_leadership_past_the_deadline():
    clock, lost = Clock(), []
    chosen = leading(clock, lost)
    clock.now += 2.9
    chosen.check()
    assert lost == [] and chosen.may_write()
    clock.now += 0.2
    with pytest.raises(LeadershipLost, match="renewed 3.1s ago, the renew deadline is 3s"):
        chosen.check()
    assert len(lost) == 1 and not chosen.may_write()


def test_no_write_before_leading():
    lost: list = []
    waiting = Leadership(lock_with(FakeLeases(), Clock()), LEASE, on_lost=lost.append, clock=Clock())
    with pytest.raises(LeadershipLost, match="before this process became the leader"):
        waiting.check()
    assert lost


def test_release_hands_the_lease_over_once_and_stops_renewals():
    clock, lost = Clock(), []
    chosen = leading(clock, lost)
    api = chosen.lock.api_instance._api
    assert chosen.release() is True
    assert [name for name, _ in api.calls] == ["create", "read", "replace"]
    assert chosen.lock.released and not chosen.may_write()
    assert chosen.release() is False and lost == []  # stopping: no exit for a lease it gave away


def test_a_late_release_writes_nothing():
    clock, lost = Clock(), []
    chosen = leading(clock, lost)
    clock.now += 10
    assert chosen.release() is False
    assert [name for name, _ in chosen.lock.api_instance._api.calls] == ["create"]


class RecordingCustom:
    def __init__(self):
        self.calls = []

    def patch_namespaced_custom_object_status(self, *args, **kwargs):
        self.calls.append(("patch", kwargs))
        return {"status": {}}

    def get_namespaced_custom_object(self, *args, **kwargs):
        self.calls.append(("get", kwargs))
        return {}


@pytest.fixture
def installed():
    yield leadership.install
    leadership.install(None)


def test_every_write_of_kube_asks_first_and_names_the_writer(installed):
    clock, lost = Clock(), []
    chosen = leading(clock, lost)
    installed(chosen)
    client = kubernetes.client.ApiClient()
    kube = Kube(client)
    assert client.user_agent.endswith("(pets-operator me)") and kube.field_manager == "me"
    kube.custom = RecordingCustom()
    kube.patch_job_status("ml", "a", {"phase": "Running"})
    assert kube.custom.calls[-1] == ("patch", {"field_manager": "me", "_content_type": "application/merge-patch+json",
                                               "_request_timeout": (10, 30)})
    clock.now += 60  # paused past the lease
    with pytest.raises(LeadershipLost):
        kube.patch_job_status("ml", "a", {"phase": "Failed"})
    assert len(kube.custom.calls) == 1 and len(lost) == 1  # the patch never left
    kube.get_job("ml", "a")  # reads need no lease
    assert [name for name, _ in kube.custom.calls] == ["patch", "get"]


def test_without_leader_election_kube_writes_as_before():
    kube = Kube(kubernetes.client.ApiClient())
    kube.custom = RecordingCustom()
    kube.patch_job_status("ml", "a", {})
    assert kube.field_manager is None and kube.custom.calls[0][1]["field_manager"] is None


def healthz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def test_a_standby_answers_the_liveness_probe_while_its_election_runs():
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    alive = threading.Event()
    alive.set()
    health = StandbyHealth(port, alive.is_set, host="127.0.0.1")
    try:
        assert healthz(port) == 200
        alive.clear()
        assert healthz(port) == 503
    finally:
        health.close()
    with socket.socket() as again:  # the port is free for kopf's own endpoint
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
