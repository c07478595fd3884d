"""A small asyncio API client for the local control-plane parts (scheduler, kubelet).

They talk to the API server over HTTP like any other client, never to its store directly: plain
HTTP to the emulated server, HTTPS with a client certificate (`tls_context`) to Kubernetes' own
kube-apiserver, where the kubelet is `system:node:<name>` in `system:nodes`.
"""
from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

logger = logging.getLogger(__name__)


class ApiStatusError(Exception):
    def __init__(self, code: int, body: Any):
        super().__init__(f"{code}: {body.get('message') if isinstance(body, dict) else body}")
        self.code = code
        self.body = body


def tls_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """Trust only `ca` for the server; present `cert` (and its `key`) as this client's identity."""
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key) if key is not None else None)
    return context


class Client:
    def __init__(self, base_url: str, tls: ssl.SSLContext | None = None):
        """`tls`: for an https URL, the CA to trust and the client certificate (`tls_context`)."""
        self.base_url = base_url.rstrip("/")
        self.tls = tls
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Client:
        connector = aiohttp.TCPConnector(ssl=self.tls) if self.tls is not None else None
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
                                              connector=connector)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session:
            await self._session.close()

    async def request(self, method: str, path: str, body: Any = None, params: dict[str, str] | None = None,
                      content_type: str = "application/json") -> Any:
        assert self._session is not None
        data = None if body is None else json.dumps(body)
        async with self._session.request(method, self.base_url + path, data=data, params=params,
                                         headers={"Content-Type": content_type}) as response:
            text = await response.text()
            try:
                payload = json.loads(text) if text else None
            except ValueError:  # not JSON (a proxy's or a load balancer's error page)
                payload = text
            if response.status >= 400:
                raise ApiStatusError(response.status, payload)
            return payload

    async def get(self, path: str, **params: str) -> Any:
        return await self.request("GET", path, params=params or None)

    async def create(self, path: str, body: Any) -> Any:
        return await self.request("POST", path, body)

    async def merge_patch(self, path: str, body: Any) -> Any:
        return await self.request("PATCH", path, body, content_type="application/merge-patch+json")

    async def delete(self, path: str, body: Any = None) -> Any:
        return await self.request("DELETE", path, body)

    async def watch(self, path: str, **params: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """List, then watch from the list's resourceVersion, relisting on 410; forever. A list that gets no
        answer, a 5xx or a 429 (an API server restarting, its etcd away) is tried again after a second."""
        assert self._session is not None
        while True:
            try:
                listing = await self.get(path, **params)
            except (ApiStatusError, aiohttp.ClientError, asyncio.TimeoutError) as error:
                if isinstance(error, ApiStatusError) and error.code != 429 and error.code < 500:
                    raise
                logger.debug("list of %s failed: %s", path, error)
                await asyncio.sleep(1)
                continue
            for item in listing["items"]:
                yield "ADDED", item
            version = listing["metadata"]["resourceVersion"]
            while version:
                query = {**params, "watch": "true", "resourceVersion": version, "allowWatchBookmarks": "true",
                         "timeoutSeconds": "300"}
                try:
                    async with self._session.get(self.base_url + path, params=query) as response:
                        if response.status != 200:  # refused as a whole (a Status, not events): relist
                            logger.debug("watch of %s answered %s: %s", path, response.status, await response.text())
                            version = ""
                            await asyncio.sleep(1)
                            break
                        async for line in response.content:
                            if not line.strip():
                                continue
                            event = json.loads(line)
                            if event["type"] == "ERROR":
                                version = ""  # expired: relist
                                break
                            version = event["object"]["metadata"].get("resourceVersion", version)
                            if event["type"] != "BOOKMARK":
                                yield event["type"], event["object"]
                except (aiohttp.ClientError, asyncio.TimeoutError) as error:
                    logger.debug("watch of %s interrupted: %s", path, error)
                    await asyncio.sleep(0.2)
