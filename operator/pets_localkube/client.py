"""A small asyncio API client for the local control-plane parts (scheduler, kubelet).

They talk to the API server over HTTP like any other client, never to its store directly.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, AsyncIterator

import aiohttp

logger = logging.getLogger(__name__)


class ApiStatusError(Exception):
    def __init__(self, code: int, body: Any):
        super().__init__(f"{code}: {body.get('message') if isinstance(body, dict) else body}")
        self.code = code
        self.body = body


class Client:
    def __init__(self, base_url: str):
        self.base_url = base_url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> "Client":
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
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
            payload = await response.json(content_type=None)
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
        """List, then watch from the list's resourceVersion, relisting on 410; forever."""
        assert self._session is not None
        while True:
            listing = await self.get(path, **params)
            for item in listing["items"]:
                yield "ADDED", item
            version = listing["metadata"]["resourceVersion"]
            while version:
                query = {**params, "watch": "true", "resourceVersion": version, "allowWatchBookmarks": "true",
                         "timeoutSeconds": "300"}
                try:
                    async with self._session.get(self.base_url + path, params=query) as response:
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
