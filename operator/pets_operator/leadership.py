"""Leader election on a coordination.k8s.io/v1 Lease: one replica runs kopf's handlers, the others stand by.

The election is the official client's `kubernetes.leaderelection`: its `LeaderElection` loop and its
`LeaseLock`, here on the operator's own API client, with a timeout on every call and a note of when
each successful write of the lease began (`FencedLeaseLock`). Not kopf peering: kopf pauses every
replica that shares the top priority, and a peering is no lease, so nothing bounds how long two
replicas act at once after a pause or a partition.

Fencing: the leader may write only while its last successful renewal began less than the renew
deadline ago by its own monotonic clock (`may_write`). A standby takes over no sooner than the
lease duration (longer than the renew deadline) after it saw that renewal, which was after the
renewal began, so the two never act at once; no two clocks need to agree, only to run at the same
rate. Every write of the process asks first (`guard_write`: the calls in `kube`, kopf's session in
`kopf_api`). A write asked for too late, a renewal failing past the deadline, or a watchdog finding
the deadline passed end the process at once, without another write (exit 1, as controller-runtime
does); the Deployment restarts it as a standby. A process that was paused (SIGSTOP, a frozen VM)
past its lease therefore writes nothing when it resumes.
"""
from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import urllib3
from kubernetes.client import CoordinationV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from .config import LeaseConfig
from .refusals import is_api_error

log = logging.getLogger(__name__)
LOST_EXIT_CODE = 1
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
LEASE_CALL_TIMEOUT = (5, 10)  # (connect, read) seconds: a silent API server fails a renewal, never hangs it
WATCHDOG_SECONDS = 0.2  # how often the leader checks its own deadline, writes or not
VERBS = {"read": "get", "create": "create", "replace": "update"}


class LeadershipLost(RuntimeError):
    """A write was asked for when this process no longer holds the lease (the process is ending)."""


# --- pure parts ---------------------------------------------------------------------------------

def may_write(now: float, renewed_at: float | None, renew_deadline: float) -> bool:
    """Whether the holder may still write at `now` (monotonic seconds): its last successful acquisition or
    renewal of the lease began at `renewed_at`, less than `renew_deadline` ago. None: it never held it."""
    return renewed_at is not None and now - renewed_at < renew_deadline


def candidate_identity(pod_name: str, hostname: str, suffix: str) -> str:
    """The holder identity: the pod's name (POD_ID, which the chart sets), so a restarted container takes
    its own lease back at once; outside a pod `<host>_<suffix>`, one per process."""
    return pod_name.strip() or f"{hostname}_{suffix}"


def user_agent(base: str, identity: str) -> str:
    """The User-Agent of this process's calls: the client's own, and which replica sent it (audit logs show it)."""
    mark = f" (pets-operator {identity})"
    return base if base.endswith(mark) else base + mark


def lease_namespace(configured: str, service_account_namespace: str | None) -> str:
    """Where the lease lives: as configured, else the operator's own namespace, else `default` (outside a pod)."""
    return configured or (service_account_namespace or "").strip() or "default"


# --- the lock -----------------------------------------------------------------------------------

class _LeaseCalls:
    """The lock's calls, each with a timeout and its failures reported; a call that got no answer is raised as
    an ApiException, which the lock takes as a failed try (any other exception would end the election)."""

    def __init__(self, api: CoordinationV1Api, on_error: Callable[[str, str, int | None], None] | None):
        self._api = api
        self._on_error = on_error or (lambda verb, resource, code: None)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._api, name)
        verb = VERBS.get(name.partition("_")[0], name.partition("_")[0])

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, _request_timeout=LEASE_CALL_TIMEOUT, **kwargs)
            except ApiException as error:
                if is_api_error(error.status):
                    self._on_error(verb, "leases", error.status)
                raise
            except (urllib3.exceptions.HTTPError, OSError) as error:
                self._on_error(verb, "leases", None)
                raise ApiException(status=0, reason=f"no answer ({type(error).__name__}: {error})") from None

        return call


class FencedLeaseLock(LeaseLock):
    """The client's LeaseLock on `api_client`; `renewed_at`: when (monotonic) its last successful write began."""

    def __init__(self, name: str, namespace: str, identity: str, api_client: Any,
                 clock: Callable[[], float] = time.monotonic,
                 on_error: Callable[[str, str, int | None], None] | None = None):
        super().__init__(name, namespace, identity)
        self.api_instance = _LeaseCalls(CoordinationV1Api(api_client), on_error)
        self._clock = clock
        self.renewed_at: float | None = None
        self.released = False  # handed over: never written again by this process

    def create(self, name, namespace, election_record):
        return self._held(lambda: super(FencedLeaseLock, self).create(name, namespace, election_record))

    def update(self, name, namespace, updated_record):
        return self._held(lambda: super(FencedLeaseLock, self).update(name, namespace, updated_record))

    def _held(self, write: Callable[[], bool]) -> bool:
        if self.released:
            return False
        started = self._clock()
        if not write():
            return False
        self.renewed_at = started
        return True


# --- the election -------------------------------------------------------------------------------

def exit_now(reason: str) -> None:
    """End the process at once: no cleanup, no graceful kopf shutdown, so no other write leaves it."""
    log.critical("lost the leadership (%s): exiting without another write; a standby takes over", reason)
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except Exception:  # noqa: BLE001 - exiting regardless
            pass
    sys.stderr.flush()
    os._exit(LOST_EXIT_CODE)


class Leadership:
    """This process's candidacy: `start()` runs the election in a thread; `leading` is set once it holds the lease."""

    def __init__(self, lock: FencedLeaseLock, lease: LeaseConfig, on_lost: Callable[[str], None] = exit_now,
                 clock: Callable[[], float] = time.monotonic):
        self.lock = lock
        self.lease = lease
        self.leading = threading.Event()
        self._on_lost = on_lost
        self._clock = clock
        self._stopping = False
        self._thread: threading.Thread | None = None

    @property
    def identity(self) -> str:
        return self.lock.identity

    @property
    def where(self) -> str:
        return f"Lease {self.lock.namespace}/{self.lock.name}"

    def start(self) -> Leadership:
        log.info("standing for leader: %s, identity %s", self.where, self.identity)
        self._thread = threading.Thread(target=self._elect, name="leader-election", daemon=True)
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def may_write(self) -> bool:
        return self.leading.is_set() and not self.lock.released and \
            may_write(self._clock(), self.lock.renewed_at, self.lease.renew_deadline_seconds)

    def check(self) -> None:
        """Before a write: returns while this process holds the lease; else it loses it (`on_lost`) and raises."""
        if self.may_write():
            return
        reason = self._why_not()
        self._lose(reason)
        raise LeadershipLost(reason)

    def release(self) -> bool:
        """After a graceful stop: hand the lease over at once (holder cleared, as client-go's ReleaseOnCancel),
        if this process still holds it; no renewal follows. False when it did not."""
        self._stopping = True
        if not self.may_write():
            return False
        self.lock.released = True
        api = self.lock.api_instance
        try:
            lease = api.read_namespaced_lease(self.lock.name, self.lock.namespace)
            if lease.spec is None or lease.spec.holder_identity != self.identity or not self._in_time():
                return False
            lease.spec.holder_identity = ""
            lease.spec.lease_duration_seconds = 1
            api.replace_namespaced_lease(self.lock.name, self.lock.namespace, lease)
        except ApiException as error:
            log.info("could not release the %s: %s", self.where, error.reason)
            return False
        log.info("released the %s", self.where)
        return True

    def _in_time(self) -> bool:
        return may_write(self._clock(), self.lock.renewed_at, self.lease.renew_deadline_seconds)

    def _why_not(self) -> str:
        if not self.leading.is_set():
            return "a write before this process became the leader"
        if self.lock.released:
            return "the lease was released"
        since = self._clock() - (self.lock.renewed_at or 0.0)
        return f"the lease was last renewed {since:.1f}s ago, the renew deadline is {self.lease.renew_deadline_seconds}s"

    def _elect(self) -> None:
        lease = self.lease
        config = electionconfig.Config(self.lock, lease.duration_seconds, lease.renew_deadline_seconds,
                                       lease.retry_period_seconds, onstarted_leading=self._started,
                                       onstopped_leading=self._stopped)
        try:
            leaderelection.LeaderElection(config).run()
        except Exception as error:  # noqa: BLE001 - whatever ends the election ends the leadership
            self._lose(f"the election failed: {error!r}")

    def _started(self) -> None:
        log.info("became the leader: %s, identity %s", self.where, self.identity)
        self.leading.set()
        threading.Thread(target=self._watch, name="leader-watchdog", daemon=True).start()

    def _stopped(self) -> None:
        self._lose(f"could not renew the {self.where} within {self.lease.renew_deadline_seconds}s")

    def _watch(self) -> None:
        while not self._stopping:
            time.sleep(WATCHDOG_SECONDS)
            if not self._stopping and not self.may_write():
                self._lose(self._why_not())
                return

    def _lose(self, reason: str) -> None:
        if not self._stopping:
            self._on_lost(reason)


def elect(lease: LeaseConfig, api_client: Any, environ: dict[str, str] | None = None,
          on_error: Callable[[str, str, int | None], None] | None = None) -> Leadership:
    """This process's Leadership on `lease` (not started), its identity in the User-Agent of `api_client`."""
    environ = dict(os.environ if environ is None else environ)
    identity = candidate_identity(environ.get("POD_ID", ""), socket.gethostname(), uuid.uuid4().hex[:8])
    try:
        own_namespace = SERVICE_ACCOUNT_NAMESPACE.read_text()
    except OSError:
        own_namespace = None
    api_client.user_agent = user_agent(api_client.user_agent, identity)
    lock = FencedLeaseLock(lease.name, lease_namespace(lease.namespace, own_namespace), identity, api_client,
                           on_error=on_error)
    logging.getLogger("leaderelection").setLevel(logging.WARNING)  # a line per retry otherwise
    return Leadership(lock, lease)


# --- the process's leadership -------------------------------------------------------------------

_current: Leadership | None = None


def install(leadership: Leadership | None) -> None:
    """From now on every write of this process asks `leadership` first (None: no election, every write goes)."""
    global _current
    _current = leadership


def current() -> Leadership | None:
    return _current


def guard_write() -> None:
    """Before any write of this process: returns when no election runs or this process still holds the lease."""
    leadership = _current
    if leadership is not None:
        leadership.check()


def writer_identity() -> str | None:
    """The holder identity this process writes as; None without leader election."""
    leadership = _current
    return leadership.identity if leadership is not None else None
