"""The operator's own configuration, read from its environment (the Deployment / chart sets it)."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Mapping

from .contract import TRAINER_COMMAND

DEFAULT_TRAINER_IMAGE = "pets-trainer:0.1.0"
DEFAULT_LIVENESS_PORT = 8080
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class ConfigError(ValueError):
    """The operator's environment is not usable; the message names the variable."""


@dataclass(frozen=True)
class OperatorConfig:
    namespaces: tuple[str, ...] = ()  # empty: cluster-wide
    trainer_image: str = DEFAULT_TRAINER_IMAGE
    log_level: str = "INFO"
    peering: str = ""  # empty: --standalone
    # kopf pauses every operator of a peering that shares the top priority, so replicas must differ;
    # None: a random one per process (the highest live replica serves, the others wait).
    priority: int | None = None
    liveness_port: int = DEFAULT_LIVENESS_PORT
    # The trainer container's command; only images with another entrypoint (or tests' stand-ins) change it.
    trainer_command: tuple[str, ...] = TRAINER_COMMAND

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
    port_text = environ.get("PETS_OPERATOR_LIVENESS_PORT", "").strip() or str(DEFAULT_LIVENESS_PORT)
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"PETS_OPERATOR_LIVENESS_PORT must be a port number, got {port_text!r}") from None
    if not 0 <= port <= 65535:  # 0: no liveness endpoint
        raise ConfigError(f"PETS_OPERATOR_LIVENESS_PORT must be within 0..65535, got {port}")
    return OperatorConfig(
        trainer_command=_command(environ.get("PETS_OPERATOR_TRAINER_COMMAND", "").strip()),
        namespaces=namespaces,
        trainer_image=image,
        log_level=level,
        peering=environ.get("PETS_OPERATOR_PEERING", "").strip(),
        priority=_priority(environ.get("PETS_OPERATOR_PRIORITY", "").strip()),
        liveness_port=port,
    )


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


def _priority(text: str) -> int | None:
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"PETS_OPERATOR_PRIORITY must be an integer, got {text!r}") from None
