"""A pod's status sent the way a kubelet's status manager sends it: the latest one, again until it lands.

A kubelet keeps the status it wants each pod to have and writes it until the API server has it: an
API server that is down or restarting (no answer, 5xx, 429) only delays the write. `StatusReporter.send`
replaces whatever status still waits to be written, so an older one never lands after a newer one;
a refusal (4xx) is not tried again, a 404 (the pod went) quietly.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from .client import ApiStatusError

logger = logging.getLogger(__name__)
RETRY_FIRST, RETRY_MAX = 0.5, 5.0  # seconds between tries, doubling


def transient(error: BaseException) -> bool:
    """Whether a failed write is worth another try: no answer (connection, timeout), a 5xx or a 429."""
    if isinstance(error, ApiStatusError):
        return error.code == 429 or error.code >= 500
    return isinstance(error, (aiohttp.ClientError, OSError, asyncio.TimeoutError))


def next_delay(delay: float) -> float:
    return min(delay * 2, RETRY_MAX)


class StatusReporter:
    """One pod's status writes: `send(status)` returns once that status, or a newer one, was written or refused."""

    def __init__(self, write: Callable[[dict[str, Any]], Awaitable[Any]], what: str):
        self._write = write
        self._what = what
        self._wanted: dict[str, Any] | None = None
        self._lock = asyncio.Lock()

    async def send(self, status: dict[str, Any]) -> None:
        self._wanted = status
        async with self._lock:  # one write at a time; whoever holds the lock writes the newest status
            delay = RETRY_FIRST
            while self._wanted is not None:
                status, self._wanted = self._wanted, None
                try:
                    await self._write(status)
                except Exception as error:  # noqa: BLE001 - sorted below: retried, or given up with a line
                    if not transient(error):
                        self._refused(error)
                        continue
                    if self._wanted is None:  # nothing newer meanwhile: this one again
                        self._wanted = status
                    logger.info("status of %s not written (%s); again in %gs", self._what, error, delay)
                    await asyncio.sleep(delay)
                    delay = next_delay(delay)

    def _refused(self, error: BaseException) -> None:
        if isinstance(error, ApiStatusError) and error.code == 404:  # deleted meanwhile
            logger.debug("status of %s: %s", self._what, error)
        else:  # refused (e.g. by the API server's validation): say so, the pod's status is stale
            logger.warning("status of %s refused: %s", self._what, error)
