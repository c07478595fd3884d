"""`pets-operator run`: the kopf operator, configured from the environment (PETS_OPERATOR_*)."""
from __future__ import annotations

import argparse
import os
import random
import socket
import sys

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="pets-operator run",
        description="Run the PetsTrainingJob operator against the cluster in KUBECONFIG (or in-cluster). "
                    "Configuration: PETS_OPERATOR_NAMESPACES, PETS_OPERATOR_TRAINER_IMAGE, PETS_OPERATOR_LOG_LEVEL, "
                    "PETS_OPERATOR_PEERING, PETS_OPERATOR_PRIORITY, PETS_OPERATOR_LIVENESS_PORT, PETS_OPERATOR_METRICS_PORT, "
                    "PETS_OPERATOR_TRAINER_COMMAND.")
    parser.add_argument("--log-format", choices=("json", "text"), default="json",
                        help="structured JSON log lines (default) or plain text")
    args = parser.parse_args(argv)
    try:
        config = from_environ(os.environ)
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

    from . import handlers  # noqa: F401 - registers the handlers

    kopf.configure(**log_options(config, args.log_format))
    kopf.run(**kopf_run_options(config))
    return 0
