"""The operator's own configuration, read from its environment (the Deployment / chart sets it)."""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from pets_api.contract import TRAINER_COMMAND
from pets_api.k8s_names import is_dns1123_label, is_dns1123_subdomain
from pets_api.names import DEFAULT_GANG_SCHEDULER_NAMES

from .policy import UNRESTRICTED, Policy, parse_list
from .reconcile.step import RESTART_BACKOFF_SECONDS as DEFAULT_RESTART_BACKOFF_SECONDS

DEFAULT_TRAINER_IMAGE = "pets-trainer:0.1.0"
DEFAULT_LIVENESS_PORT = 8080
DEFAULT_METRICS_PORT = 0  # no /metrics unless asked for (the chart asks for it)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


DEFAULT_LEASE_NAME = "pets-operator-leader"
# client-go's defaults (and controller-runtime's): a new leader within 15 s of the old one's last renewal.
DEFAULT_LEASE_DURATION_SECONDS = 15
DEFAULT_RENEW_DEADLINE_SECONDS = 10
DEFAULT_RETRY_PERIOD_SECONDS = 2
# kubernetes.leaderelection's rule (client-go's JitterFactor): renew deadline > 1.2 x retry period.
RETRY_JITTER_FACTOR = 1.2


class ConfigError(ValueError):
    """The operator's environment is not usable; the message names the variable."""


@dataclass(frozen=True)
class LeaseConfig:
    """Leader election on the coordination.k8s.io/v1 Lease `namespace`/`name` (`leadership`)."""
    name: str = DEFAULT_LEASE_NAME
    namespace: str = ""  # empty: the operator's own (its service account's), else "default"
    # A standby takes over when the lease has not been renewed for this long (as the standby sees it) ...
    duration_seconds: int = DEFAULT_LEASE_DURATION_SECONDS
    # ... the leader stops writing (and exits) when it has not renewed it for this long, by its own clock ...
    renew_deadline_seconds: int = DEFAULT_RENEW_DEADLINE_SECONDS
    # ... and every candidate tries to acquire or renew it this often.
    retry_period_seconds: int = DEFAULT_RETRY_PERIOD_SECONDS


@dataclass(frozen=True)
class OperatorConfig:
    namespaces: tuple[str, ...] = ()  # empty: cluster-wide
    trainer_image: str = DEFAULT_TRAINER_IMAGE
    log_level: str = "INFO"
    peering: str = ""  # empty: --standalone
    # One active replica, the holder of a Lease (`leadership`); None: every process acts (`--no-leader-elect`).
    leader_election: LeaseConfig | None = LeaseConfig()
    # kopf pauses every operator of a peering that shares the top priority, so replicas must differ;
    # None: a random one per process (the highest live replica serves, the others wait).
    priority: int | None = None
    liveness_port: int = DEFAULT_LIVENESS_PORT
    # Prometheus metrics on http://0.0.0.0:<port>/metrics (`metrics.py`); 0: none.
    metrics_port: int = DEFAULT_METRICS_PORT
    # The trainer container's command; only images with another entrypoint (or tests' stand-ins) change it.
    trainer_command: tuple[str, ...] = TRAINER_COMMAND
    # A NetworkPolicy per job admitting ingress to its pods only from its own pods; off for clusters whose
    # operator may not create NetworkPolicies (the chart's networkPolicy.enabled).
    network_policy: bool = True
    # The schedulerName the pods of a job with spec.gangScheduling get, per scheduler (the chart's
    # gangScheduling.*SchedulerName): the name that scheduler runs under in this cluster.
    coscheduling_scheduler_name: str = DEFAULT_GANG_SCHEDULER_NAMES["coscheduling"]
    volcano_scheduler_name: str = DEFAULT_GANG_SCHEDULER_NAMES["volcano"]
    # Seconds before a group is restarted after a worker failed, doubling with each restart (at most 6 minutes),
    # as the Job controller backs off; tests make it short.
    restart_backoff_seconds: float = DEFAULT_RESTART_BACKOFF_SECONDS
    # Which images and hostPath volumes a job may use (`policy`): the chart's policy.* values, from the ConfigMap
    # its admission policy reads too; none given: no restriction.
    policy: Policy = UNRESTRICTED

    @property
    def gang_scheduler_names(self) -> dict[str, str]:
        """spec.gangScheduling.scheduler -> the pods' schedulerName."""
        return {"coscheduling": self.coscheduling_scheduler_name, "volcano": self.volcano_scheduler_name}

    @property
    def cluster_wide(self) -> bool:
        return not self.namespaces

    @property
    def log_level_number(self) -> int:
        return getattr(logging, self.log_level)


def from_environ(environ: Mapping[str, str]) -> OperatorConfig:
    namespaces = tuple(part.strip() for part in environ.get("PETS_OPERATOR_NAMESPACES", "").split(",") if part.strip())
    image = environ.get("PETS_OPERATOR_TRAINER_IMAGE", "").strip() or DEFAULT_TRAINER_IMAGE
    level = (environ.get("PETS_OPERATOR_LOG_LEVEL", "").strip() or "INFO").upper()
    if level not in LOG_LEVELS:
        raise ConfigError(f"PETS_OPERATOR_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    port = _port(environ, "PETS_OPERATOR_LIVENESS_PORT", DEFAULT_LIVENESS_PORT)  # 0: no liveness endpoint
    metrics_port = _port(environ, "PETS_OPERATOR_METRICS_PORT", DEFAULT_METRICS_PORT)  # 0: no /metrics
    if metrics_port and metrics_port == port:
        raise ConfigError(f"PETS_OPERATOR_METRICS_PORT and PETS_OPERATOR_LIVENESS_PORT must differ, both are {port}")
    peering = environ.get("PETS_OPERATOR_PEERING", "").strip()
    return OperatorConfig(
        leader_election=_leader_election(environ, peering),
        trainer_command=_command(environ.get("PETS_OPERATOR_TRAINER_COMMAND", "").strip()),
        namespaces=namespaces,
        trainer_image=image,
        log_level=level,
        peering=peering,
        priority=_priority(environ.get("PETS_OPERATOR_PRIORITY", "").strip()),
        liveness_port=port,
        metrics_port=metrics_port,
        network_policy=_switch("PETS_OPERATOR_NETWORK_POLICY", environ.get("PETS_OPERATOR_NETWORK_POLICY", ""),
                               default=True),
        coscheduling_scheduler_name=_scheduler_name(environ, "PETS_OPERATOR_COSCHEDULING_SCHEDULER_NAME", "coscheduling"),
        volcano_scheduler_name=_scheduler_name(environ, "PETS_OPERATOR_VOLCANO_SCHEDULER_NAME", "volcano"),
        restart_backoff_seconds=_seconds(environ, "PETS_OPERATOR_RESTART_BACKOFF_SECONDS",
                                         DEFAULT_RESTART_BACKOFF_SECONDS),
        policy=_policy(environ),
    )


def _policy(environ: Mapping[str, str]) -> Policy:
    """PETS_OPERATOR_POLICY_ALLOWED_IMAGES (unset: any image; set, even empty: only these and the trainer image),
    PETS_OPERATOR_POLICY_HOST_PATH_ALLOWED (unset: true), PETS_OPERATOR_POLICY_HOST_PATH_PREFIXES (empty: any)."""
    images = environ.get("PETS_OPERATOR_POLICY_ALLOWED_IMAGES")
    prefixes = parse_list(environ.get("PETS_OPERATOR_POLICY_HOST_PATH_PREFIXES", ""))
    relative = [prefix for prefix in prefixes if not prefix.startswith("/")]
    if relative:
        raise ConfigError(f"PETS_OPERATOR_POLICY_HOST_PATH_PREFIXES must list absolute paths, got {', '.join(relative)}")
    allowed = environ.get("PETS_OPERATOR_POLICY_HOST_PATH_ALLOWED", "")
    return Policy(allowed_images=None if images is None else parse_list(images),
                  host_path_allowed=_switch("PETS_OPERATOR_POLICY_HOST_PATH_ALLOWED", allowed, default=True),
                  host_path_prefixes=prefixes)


def _leader_election(environ: Mapping[str, str], peering: str) -> LeaseConfig | None:
    """On unless PETS_OPERATOR_LEADER_ELECT=false, or kopf peering picks the active replica instead."""
    switch = environ.get("PETS_OPERATOR_LEADER_ELECT", "")
    if not _switch("PETS_OPERATOR_LEADER_ELECT", switch, default=not peering):
        return None
    if peering:
        raise ConfigError("PETS_OPERATOR_LEADER_ELECT=true and PETS_OPERATOR_PEERING both pick the one active replica: "
                          "set only one (leader election is the default; peering needs PETS_OPERATOR_LEADER_ELECT=false)")
    name = environ.get("PETS_OPERATOR_LEASE_NAME", "").strip() or DEFAULT_LEASE_NAME
    if not is_dns1123_subdomain(name):
        raise ConfigError(f"PETS_OPERATOR_LEASE_NAME must be a Lease name (a DNS-1123 subdomain), got {name!r}")
    namespace = environ.get("PETS_OPERATOR_LEASE_NAMESPACE", "").strip()
    if namespace and not is_dns1123_label(namespace):
        raise ConfigError(f"PETS_OPERATOR_LEASE_NAMESPACE must be a namespace name, got {namespace!r}")
    duration = _whole_seconds(environ, "PETS_OPERATOR_LEASE_DURATION_SECONDS", DEFAULT_LEASE_DURATION_SECONDS)
    deadline = _whole_seconds(environ, "PETS_OPERATOR_LEASE_RENEW_DEADLINE_SECONDS", DEFAULT_RENEW_DEADLINE_SECONDS)
    retry = _whole_seconds(environ, "PETS_OPERATOR_LEASE_RETRY_PERIOD_SECONDS", DEFAULT_RETRY_PERIOD_SECONDS)
    if not duration > deadline > RETRY_JITTER_FACTOR * retry:
        raise ConfigError(
            "the lease needs PETS_OPERATOR_LEASE_DURATION_SECONDS > PETS_OPERATOR_LEASE_RENEW_DEADLINE_SECONDS > "
            f"{RETRY_JITTER_FACTOR} x PETS_OPERATOR_LEASE_RETRY_PERIOD_SECONDS, got {duration} > {deadline} > "
            f"{RETRY_JITTER_FACTOR} x {retry}")
    return LeaseConfig(name, namespace, duration, deadline, retry)


def _whole_seconds(environ: Mapping[str, str], name: str, default: int) -> int:
    text = environ.get(name, "").strip() or str(default)
    try:
        seconds = int(text)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number of seconds, got {text!r}") from None
    if seconds < 1:
        raise ConfigError(f"{name} must be at least 1, got {seconds}")
    return seconds


def _port(environ: Mapping[str, str], name: str, default: int) -> int:
    text = environ.get(name, "").strip() or str(default)
    try:
        port = int(text)
    except ValueError:
        raise ConfigError(f"{name} must be a port number, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"{name} must be within 0..65535, got {port}")
    return port


def _seconds(environ: Mapping[str, str], name: str, default: float) -> float:
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise ConfigError(f"{name} must be a number of seconds (0 or more), got {text!r}")
    return seconds


def _scheduler_name(environ: Mapping[str, str], name: str, scheduler: str) -> str:
    text = environ.get(name, "").strip()
    if not text:
        return DEFAULT_GANG_SCHEDULER_NAMES[scheduler]
    if not is_dns1123_subdomain(text):
        raise ConfigError(f"{name} must be a scheduler name (a DNS-1123 subdomain), got {text!r}")
    return text


def _command(text: str) -> tuple[str, ...]:
    if not text:
        return TRAINER_COMMAND
    try:
        command = json.loads(text)
    except json.JSONDecodeError:
        command = None
    if not isinstance(command, list) or not command or not all(isinstance(part, str) and part for part in command):
        raise ConfigError(f"PETS_OPERATOR_TRAINER_COMMAND must be a JSON list of non-empty strings, got {text!r}")
    return tuple(command)


def _switch(name: str, text: str, default: bool) -> bool:
    value = text.strip().lower()
    if not value:
        return default
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false, got {text!r}")


def _priority(text: str) -> int | None:
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"PETS_OPERATOR_PRIORITY must be an integer, got {text!r}") from None
