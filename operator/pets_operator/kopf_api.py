"""kopf's own API calls: a login whose session fences writes, names the writer and counts errors; retry settings.

kopf retries its failed calls (5xx, 429, 403, no answer) with `settings.networking.error_backoffs`,
never sooner than a 429's Retry-After. Its default gives up after 9 tries (about a minute), and a
watch that gives up ends the operator; here the backoffs never end (`refusals.CappedBackoffs`: 1 s
doubling up to 60 s), so an API outage is waited out, never a crash loop.

The session is the one kopf would make from the same credentials (`kopf.login_via_client`), plus a
middleware: a write (any method but GET, HEAD, OPTIONS) first asks `before_write` (with leader
election: `leadership.guard_write`), so kopf's finalizer patches and Events are fenced like the
operator's own calls, and every failed answer is reported (`on_error`: the API error metric).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import aiohttp
import kopf

from .metrics import request_call
from .refusals import CappedBackoffs, is_api_error

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
REQUEST_TIMEOUT_SECONDS = 60  # kopf's own calls but watches (kopf's default: 5 minutes)
CONNECT_TIMEOUT_SECONDS = 10

log = logging.getLogger(__name__)


def middleware(before_write: Callable[[], None], on_error: Callable[[str, str, int | None], None]):
    """The aiohttp client middleware of kopf's session."""

    async def fenced_and_counted(request: aiohttp.ClientRequest, handler) -> aiohttp.ClientResponse:
        verb, resource = request_call(request.method, request.url.path, request.url.query_string)
        if request.method.upper() not in READ_METHODS:
            before_write()
        try:
            response = await handler(request)
        except (aiohttp.ClientConnectionError, TimeoutError):
            on_error(verb, resource, None)
            raise
        if is_api_error(response.status):
            on_error(verb, resource, response.status)
        return response

    return fenced_and_counted


def session_for(info: kopf.ConnectionInfo, middlewares: tuple, identity: str | None) -> kopf.AiohttpSession:
    """kopf's own session for `info` (as kopf's APIContext makes it), with `middlewares`."""
    agent = f"kopf/{version('kopf')}"
    if identity:
        from .leadership import user_agent

        agent = user_agent(agent, identity)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=info.as_ssl_context()),
        headers={**info.as_http_headers(), "User-Agent": agent},
        proxy=info.proxy_url, trust_env=info.trust_env, middlewares=middlewares)
    return kopf.AiohttpSession(aiohttp_session=session, server=info.server, default_namespace=info.default_namespace,
                               priority=info.priority, expiration=info.expiration)


def register(before_write: Callable[[], None], on_error: Callable[[str, str, int | None], None],
             identity: str | None = None, registry: kopf.OperatorRegistry | None = None) -> None:
    """Register the login and the retry settings with kopf (its default registry unless given)."""
    registry = registry or kopf.get_default_registry()
    middlewares = (middleware(before_write, on_error),)

    @kopf.on.login(registry=registry)
    async def login(**kwargs: Any) -> kopf.AiohttpSession | None:
        info = kopf.login_via_client(**kwargs)
        return session_for(info, middlewares, identity) if info is not None else None

    @kopf.on.startup(registry=registry)
    async def retry_settings(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.networking.error_backoffs = CappedBackoffs()
        settings.networking.request_timeout = REQUEST_TIMEOUT_SECONDS
        settings.networking.connect_timeout = CONNECT_TIMEOUT_SECONDS
