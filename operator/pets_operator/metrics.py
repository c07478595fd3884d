"""The operator's Prometheus metrics: jobs by phase, job totals and durations, epochs, accuracy, API errors.

Served by `prometheus_client` on PETS_OPERATOR_METRICS_PORT (`serve`), with the client's process
metrics (RSS, CPU, open fds). Names follow Kubeflow's training operator
(`training_operator_jobs_created_total{job_namespace}` ...): `pets_operator_jobs_created_total`,
`_successful_total`, `_failed_total`, `_restarted_total`, `_deleted_total`. Per-job series carry
`job_namespace` and `job_name`, not `namespace` and `job`: Prometheus gives every scraped series its
target's `namespace` and `job` labels, which would rename the job's own to `exported_*`.

What a job's status change means is decided by `job_change(before, after)` (pure); `Metrics` applies
it, keeping per job only its phase, restarts and epoch numbers. The per-job series (accuracy, best
accuracy, current epoch) go when the job is deleted, so their number is the number of jobs.
A `CountedKube` wraps the operator's `Kube` and counts its failed calls by verb and resource; kopf's
session (`kopf_api`) and the leader election (`leadership`) count theirs into the same counter, the
verb and resource read from the request (`request_call`). `pets_operator_leader` says which replica acts.
"""
from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .kube import KubeError
from .status import FAILED, PENDING, PHASES, SUCCEEDED, parse_timestamp

PREFIX = "pets_operator"
JOB_LABELS = ("job_namespace", "job_name")
DURATION_BUCKETS = (10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, math.inf)
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, math.inf)
DELETED = "DELETED"  # kopf's event type of a job gone from the API
# `Kube` method name parts -> the API resource they call.
RESOURCES = {"pod": "pods", "pod_log": "pods/log", "service": "services", "network_policy": "networkpolicies",
             "pod_group": "podgroups", "job": "petstrainingjobs", "job_status": "petstrainingjobs/status"}
VERBS = {"create": "create", "delete": "delete", "patch": "patch", "read": "get", "get": "get", "open": "get",
         "list": "list", "update": "update", "replace": "update"}


@dataclass(frozen=True)
class JobChange:
    """What one status change of a job adds to the counters."""
    created: bool = False
    succeeded: bool = False
    failed: bool = False
    restarts: int = 0
    new_epochs: int = 0
    duration: float | None = None  # seconds from startTime to completionTime, when it just finished


def _epochs(status: Mapping[str, Any]) -> set[int]:
    return {int(e["epoch"]) for e in status.get("epochs") or [] if isinstance(e, Mapping) and "epoch" in e}


def job_change(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> JobChange:
    """The counters' share of a job's status going from `before` (None: first seen by this process) to `after`.

    A job first seen without a phase is a created one; first seen with one (after an operator restart),
    it is counted from its next change on, so a restart never counts a job twice."""
    if before is None:
        return JobChange(created=not after.get("phase"))
    phase, previous = after.get("phase"), before.get("phase")
    finished = phase in (SUCCEEDED, FAILED) and previous != phase
    duration = None
    if finished:
        start, end = parse_timestamp(after.get("startTime")), parse_timestamp(after.get("completionTime"))
        if start is not None and end is not None:
            duration = max(0.0, (end - start).total_seconds())
    return JobChange(succeeded=finished and phase == SUCCEEDED, failed=finished and phase == FAILED,
                     restarts=max(0, int(after.get("restarts") or 0) - int(before.get("restarts") or 0)),
                     new_epochs=len(_epochs(after) - _epochs(before)), duration=duration)


def api_call(method: str) -> tuple[str, str]:
    """(verb, resource) of a `Kube` method: `create_pod` -> ("create", "pods")."""
    verb, _, rest = method.partition("_")
    return VERBS.get(verb, verb), RESOURCES.get(rest, rest)


REQUEST_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def request_call(method: str, path: str, query: str = "") -> tuple[str, str]:
    """(verb, resource) of an API request, as Kubernetes' audit names them: `GET /api/v1/namespaces/ns/pods?watch=1`
    -> ("watch", "pods"); `PATCH /apis/g/v1/namespaces/ns/things/x/status` -> ("patch", "things/status")."""
    parts = [part for part in path.split("/") if part]
    if parts[:1] == ["api"]:
        parts = parts[2:]
    elif parts[:1] == ["apis"]:
        parts = parts[3:]
    else:
        parts = []
    if len(parts) >= 3 and parts[0] == "namespaces":
        parts = parts[2:]
    resource = "/".join(parts[:1] + parts[2:3])
    named = len(parts) >= 2
    method = method.upper()
    if method == "GET":
        watch = (parse_qs(query).get("watch") or [""])[0].lower() in ("true", "1")
        verb = "watch" if watch else "get" if named else "list"
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = REQUEST_VERBS.get(method, method.lower())
    return verb, resource


@dataclass
class _Seen:
    phase: str
    restarts: int
    epochs: frozenset[int]


class _PhaseCollector(Collector):
    """`pets_operator_jobs{phase}`: the jobs this operator knows, by the phase in their status."""

    def __init__(self, phases: Callable[[], Iterable[str]]):
        self._phases = phases

    def collect(self):
        family = GaugeMetricFamily(f"{PREFIX}_jobs", "PetsTrainingJobs by status.phase (no phase yet: Pending)",
                                   labels=["phase"])
        counts = dict.fromkeys(PHASES, 0)
        for phase in self._phases():
            counts[phase] = counts.get(phase, 0) + 1
        for phase, count in counts.items():
            family.add_metric([phase], count)
        yield family


class Metrics:
    """The metrics, on `registry` (a fresh one per test; the process-wide one in the operator)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        registry = registry if registry is not None else CollectorRegistry()
        self.registry = registry

        def counter(name: str, text: str, labels: Iterable[str] = ("job_namespace",)) -> Counter:
            return Counter(f"{PREFIX}_{name}", text, list(labels), registry=registry)

        def job_gauge(name: str, text: str) -> Gauge:
            return Gauge(f"{PREFIX}_{name}", text, list(JOB_LABELS), registry=registry)

        self.created = counter("jobs_created", "PetsTrainingJobs created (first seen without a status)")
        self.successful = counter("jobs_successful", "PetsTrainingJobs that reached phase Succeeded")
        self.failed = counter("jobs_failed", "PetsTrainingJobs that reached phase Failed")
        self.restarted = counter("jobs_restarted", "Whole-group restarts of PetsTrainingJobs (status.restarts)")
        self.deleted = counter("jobs_deleted", "PetsTrainingJobs deleted")
        self.epochs = counter("epochs_recorded", "Finished epochs newly recorded in status.epochs")
        self.duration = Histogram(f"{PREFIX}_job_duration_seconds", "From status.startTime to completionTime",
                                  ["job_namespace", "phase"], buckets=DURATION_BUCKETS, registry=registry)
        self.accuracy = job_gauge("job_accuracy", "The latest epoch's eval accuracy (status.accuracy)")
        self.best_accuracy = job_gauge("job_best_accuracy", "The best epoch's eval accuracy (status.bestAccuracy)")
        self.current_epoch = job_gauge("job_current_epoch", "Epochs completed, from 1 (status.currentEpoch)")
        self.epoch_latency = Histogram(f"{PREFIX}_epoch_status_latency_seconds",
                                       "From pod 0 writing an epoch line (its log timestamp) to the status patch "
                                       "that records it returning", buckets=LATENCY_BUCKETS, registry=registry)
        self.epoch_delivery = Histogram(f"{PREFIX}_epoch_log_delivery_seconds",
                                        "From pod 0 writing an epoch line (its log timestamp) to the operator reading "
                                        "it from the followed log: the kubelet's, the API server's proxy's and the "
                                        "operator's event loop's share of epoch_status_latency_seconds",
                                        buckets=LATENCY_BUCKETS, registry=registry)
        self.api_errors = counter("api_errors", "Failed Kubernetes API calls: the operator's own, kopf's (watches, "
                                  "patches, events) and the leader election's; code none: no answer",
                                  ("verb", "resource", "code"))
        self.leader = Gauge(f"{PREFIX}_leader", "1 on the replica that holds the leader-election Lease and runs the "
                            "handlers (1 without leader election), 0 on a standby", registry=registry)
        self.followed_logs = Gauge(f"{PREFIX}_followed_logs", "Pod logs being followed", registry=registry)
        self._jobs: dict[tuple[str, str], _Seen] = {}
        self._lock = threading.Lock()  # job events come from the loop, collection from the server's thread
        registry.register(_PhaseCollector(lambda: [seen.phase for seen in list(self._jobs.values())]))

    # --- jobs ---------------------------------------------------------------------------------

    def job_event(self, event_type: str | None, namespace: str, name: str, status: Mapping[str, Any] | None) -> None:
        """A watch event of a job (kopf's `type`: None for the initial listing, ADDED, MODIFIED, DELETED)."""
        if event_type == DELETED:
            self.job_deleted(namespace, name)
            return
        status = status or {}
        key = (namespace, name)
        with self._lock:
            seen = self._jobs.get(key)
            before = None if seen is None else {"phase": seen.phase, "restarts": seen.restarts,
                                                "epochs": [{"epoch": e} for e in seen.epochs]}
            change = job_change(before, status)
            self._jobs[key] = _Seen(status.get("phase") or PENDING, int(status.get("restarts") or 0),
                                    frozenset(_epochs(status)))
        self._apply(namespace, change, status.get("phase"))
        self._set_job_gauges(namespace, name, status)

    def _apply(self, namespace: str, change: JobChange, phase: str | None) -> None:
        if change.created:
            self.created.labels(namespace).inc()
        if change.succeeded:
            self.successful.labels(namespace).inc()
        if change.failed:
            self.failed.labels(namespace).inc()
        if change.restarts:
            self.restarted.labels(namespace).inc(change.restarts)
        if change.new_epochs:
            self.epochs.labels(namespace).inc(change.new_epochs)
        if change.duration is not None:
            self.duration.labels(namespace, phase).observe(change.duration)

    def _set_job_gauges(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        for gauge, field in ((self.accuracy, "accuracy"), (self.best_accuracy, "bestAccuracy"),
                             (self.current_epoch, "currentEpoch")):
            value = status.get(field)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                gauge.labels(namespace, name).set(value)
            else:  # none yet, or cleared by a restart without checkpoint
                _remove(gauge, namespace, name)

    def job_deleted(self, namespace: str, name: str) -> None:
        with self._lock:
            known = self._jobs.pop((namespace, name), None)
        if known is not None:
            self.deleted.labels(namespace).inc()
        for gauge in (self.accuracy, self.best_accuracy, self.current_epoch):
            _remove(gauge, namespace, name)

    # --- the operator's own work --------------------------------------------------------------

    def epoch_to_status(self, seconds: float) -> None:
        self.epoch_latency.observe(seconds)

    def epoch_delivered(self, seconds: float) -> None:
        self.epoch_delivery.observe(seconds)

    def api_error(self, verb: str, resource: str, code: int | None) -> None:
        self.api_errors.labels(verb, resource, str(code) if code else "none").inc()


def _remove(gauge: Gauge, *labels: str) -> None:
    try:
        gauge.remove(*labels)
    except KeyError:
        pass


class CountedKube:
    """The operator's `Kube`, each failed call counted in `api_errors` (by verb and resource) and re-raised."""

    def __init__(self, kube: Any, metrics: Metrics):
        self._kube = kube
        self._metrics = metrics

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._kube, name)
        if name.startswith("_") or not callable(attribute):
            return attribute
        verb, resource = api_call(name)

        @functools.wraps(attribute)
        def counted(*args: Any, **kwargs: Any) -> Any:
            try:
                return attribute(*args, **kwargs)
            except KubeError as error:
                self._metrics.api_error(verb, resource, error.failure.code)
                raise

        setattr(self, name, counted)  # looked up once per method
        return counted


_default: Metrics | None = None
_default_lock = threading.Lock()


def default() -> Metrics:
    """The process's metrics, on prometheus_client's global registry (with its process and GC metrics)."""
    global _default
    with _default_lock:
        if _default is None:
            disable_created_metrics()  # no `*_created` twin of every counter and histogram
            _default = Metrics(REGISTRY)
        return _default


def serve(port: int, host: str = "0.0.0.0") -> None:
    """/metrics of `default()` on `port`, in a thread of prometheus_client's; OSError when the port is taken."""
    default()
    start_http_server(port, addr=host, registry=REGISTRY)
