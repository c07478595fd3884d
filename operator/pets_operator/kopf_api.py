"""kopf's own API calls: a login whose session fences writes, names the writer and counts errors; retry settings.

kopf retries its failed calls (5xx, 429, 403, no answer) with `settings.networking.error_backoffs`,
never sooner than a 429's Retry-After. Its default gives up after 9 tries (about a minute), and a
watch that gives up ends the operator; here the backoffs never end (`refusals.CappedBackoffs`: 1 s
doubling up to 60 s), so an API outage is waited out, never a crash loop.

The session is the one kopf would make (`kopf.login_via_client`), from the credentials the operator's own
calls use (`pets_api.connection.load_configuration`: in-cluster first, then the kubeconfig, as kopf's;
`connection_info` reads them as kopf does), plus a middleware: a write (any method but GET, HEAD, OPTIONS) first asks `before_write` (with leader
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
PRIORITY_OF_CLIENT = 10  # kopf's for credentials from the kubernetes client (piggybacking.PRIORITY_OF_CLIENT)

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


def connection_info(configuration: Any, trust_env: bool) -> kopf.ConnectionInfo:
    """kopf's credentials from a kubernetes client Configuration, read as `kopf.login_via_client` reads the
    client's default one: the bearer token through the key hook (a refreshed service account token, an
    auth provider's), the CA and client certificate files, basic auth."""
    header = (configuration.get_api_key_with_prefix("BearerToken")
              or configuration.get_api_key_with_prefix("authorization"))
    parts = header.split(" ", 1) if header else []
    scheme, token = (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    return kopf.ConnectionInfo(
        server=configuration.host, ca_path=configuration.ssl_ca_cert, insecure=not configuration.verify_ssl,
        username=configuration.username or None, password=configuration.password or None, scheme=scheme, token=token,
        certificate_path=configuration.cert_file, private_key_path=configuration.key_file, trust_env=trust_env,
        priority=PRIORITY_OF_CLIENT)


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
    async def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.AiohttpSession:
        from kubernetes.config import ConfigException

        from pets_api.connection import load_configuration

        try:
            configuration = load_configuration()
        except ConfigException as error:
            raise kopf.LoginError(str(error)) from None
        return session_for(connection_info(configuration, settings.networking.trust_env), middlewares, identity)

    @kopf.on.startup(registry=registry)
    async def retry_settings(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.networking.error_backoffs = CappedBackoffs()
        settings.networking.request_timeout = REQUEST_TIMEOUT_SECONDS
        settings.networking.connect_timeout = CONNECT_TIMEOUT_SECONDS
