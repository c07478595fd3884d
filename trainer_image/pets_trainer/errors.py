"""Errors a user can fix: reported as one `error: ...` line and exit status 2, never a traceback."""
from __future__ import annotations


class TrainerError(Exception):
    """Base class for problems with the configuration or the data, not bugs in the trainer."""


class ConfigError(TrainerError):
    """A flag or environment variable has a value the trainer cannot use."""


class DataError(TrainerError):
    """The images directory cannot be used for training."""
