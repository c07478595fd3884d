"""`pets-operator run`: the kopf operator, configured from the environment (PETS_OPERATOR_*).

With leader election (the default) the process first stands for leader (`leadership`) and starts
kopf only once it holds the lease; until then it serves /healthz itself (`StandbyHealth`), so the
kubelet keeps a standby. It exits 1 the moment it loses the lease, and releases the lease after a
graceful stop, so a standby takes over at once.
"""
from __future__ import annotations

import argparse
import dataclasses
import http.server
import os
import random
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from .config import ConfigError, OperatorConfig, from_environ


def kopf_run_options(config: OperatorConfig) -> dict:
    """The keyword arguments of `kopf.run` that this configuration means."""
    options: dict = {
        "standalone": not config.peering,
        "clusterwide": config.cluster_wide,
        "namespaces": list(config.namespaces),
    }
    if config.peering:
        options["peering_name"] = config.peering
        options["priority"] = config.priority if config.priority is not None else random.SystemRandom().randint(1, 2**31 - 1)
    if config.liveness_port:
        options["liveness_endpoint"] = f"http://0.0.0.0:{config.liveness_port}/healthz"
    return options


def log_options(config: OperatorConfig, log_format: str) -> dict:
    """The keyword arguments of `kopf.configure`: a job's lines name it, as `[namespace/name]` in text (kopf
    leaves that prefix out unless asked) and as the `object` field in JSON."""
    import kopf

    text = log_format == "text"
    return {"verbose": config.log_level == "DEBUG", "log_format": kopf.LogFormat.FULL if text else kopf.LogFormat.JSON,
            "log_prefix": text}


def liveness_port_problem(port: int, host: str = "0.0.0.0") -> str | None:
    """Why kopf could not serve /healthz on `port` (another process listens there), or None.

    Bound the way aiohttp binds it (SO_REUSEADDR), so only a port really in use fails.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            return (f"cannot serve the liveness endpoint on port {port} ({error.strerror or error}): another "
                    "process (a second operator?) uses it; set PETS_OPERATOR_LIVENESS_PORT to a free port, "
                    "or 0 for none")
    return None


class _ReusingServer(http.server.ThreadingHTTPServer):
    allow_reuse_address = True  # bound as aiohttp binds kopf's endpoint, which takes the port over
    daemon_threads = True


class StandbyHealth:
    """/healthz on `port` while the process waits for the lease: 200 while the election runs, 503 once it stopped."""

    def __init__(self, port: int, alive: Callable[[], bool], host: str = "0.0.0.0"):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                code = 404 if self.path.split("?")[0] != "/healthz" else 200 if alive() else 503
                body = {200: b"standby\n", 503: b"leader election stopped\n", 404: b"not found\n"}[code]
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:  # one line per probe otherwise
                pass

        self.server = _ReusingServer((host, port), Handler)
        threading.Thread(target=self.server.serve_forever, name="standby-healthz", daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def parse(argv: list[str] | None, environ: Mapping[str, str]) -> tuple[argparse.Namespace, OperatorConfig]:
    """The command line and the environment; ConfigError names a bad variable."""
    parser = argparse.ArgumentParser(
        prog="pets-operator run",
        description="Run the PetsTrainingJob operator against the cluster in KUBECONFIG (or in-cluster). "
                    "Configuration: PETS_OPERATOR_NAMESPACES, PETS_OPERATOR_TRAINER_IMAGE, PETS_OPERATOR_LOG_LEVEL, "
                    "PETS_OPERATOR_LEADER_ELECT, PETS_OPERATOR_LEASE_NAME, PETS_OPERATOR_LEASE_NAMESPACE, "
                    "PETS_OPERATOR_LEASE_DURATION_SECONDS, PETS_OPERATOR_LEASE_RENEW_DEADLINE_SECONDS, "
                    "PETS_OPERATOR_LEASE_RETRY_PERIOD_SECONDS, "
                    "PETS_OPERATOR_PEERING, PETS_OPERATOR_PRIORITY, PETS_OPERATOR_LIVENESS_PORT, PETS_OPERATOR_METRICS_PORT, "
                    "PETS_OPERATOR_TRAINER_COMMAND.")
    parser.add_argument("--log-format", choices=("json", "text"), default="json",
                        help="structured JSON log lines (default) or plain text")
    parser.add_argument("--no-leader-elect", action="store_true",
                        help="act at once, without leader election (as PETS_OPERATOR_LEADER_ELECT=false): for a "
                             "single replica only")
    args = parser.parse_args(argv)
    config = from_environ(environ)
    if args.no_leader_elect:
        config = dataclasses.replace(config, leader_election=None)
    return args, config


def main(argv: list[str] | None = None) -> int:
    try:
        args, config = parse(argv, os.environ)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    if config.liveness_port:
        problem = liveness_port_problem(config.liveness_port)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 1

    if config.metrics_port:
        from . import metrics

        try:
            metrics.serve(config.metrics_port)
        except OSError as error:
            print(f"error: cannot serve metrics on port {config.metrics_port} ({error.strerror or error}): another "
                  "process uses it; set PETS_OPERATOR_METRICS_PORT to a free port, or 0 for none", file=sys.stderr)
            return 1

    import kopf  # only now: `--help` and configuration errors need no kopf
    from kubernetes.config import ConfigException

    from . import (
        handlers,  # noqa: F401 - registers the handlers
        kopf_api,
        leadership,
        metrics,
    )

    kopf.configure(**log_options(config, args.log_format))
    counted = metrics.default()
    try:
        leader = _lead(config, counted) if config.leader_election is not None else None
    except ConfigException as error:
        print(f"error: cannot reach the cluster for leader election: {error}", file=sys.stderr)
        return 1
    counted.leader.set_function(lambda: 1.0 if leader is None or leader.may_write() else 0.0)
    kopf_api.register(leadership.guard_write, counted.api_error, leader.identity if leader is not None else None)
    kopf.run(**kopf_run_options(config))
    if leader is not None:
        leader.release()
    return 0


def _lead(config: OperatorConfig, counted: Any) -> Any:
    """Stand for leader; the Leadership once this process holds the lease (serving /healthz meanwhile)."""
    from pets_api.connection import load_api_client

    from . import leadership

    leader = leadership.elect(config.leader_election, load_api_client(), on_error=counted.api_error)
    leadership.install(leader)
    health = StandbyHealth(config.liveness_port, leader.alive) if config.liveness_port else None
    try:
        leader.start()
        leader.leading.wait()
    finally:
        if health is not None:
            health.close()  # kopf serves /healthz from now on
    return leader
