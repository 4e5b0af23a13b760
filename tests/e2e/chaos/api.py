"""The soak's own access to the API: straight to kube-apiserver (not through the proxy), retried
while an apiserver restart makes it unreachable or not yet serving."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp

from gpuq_k8s.common.kube.status import Reply, call

T = TypeVar("T")


@dataclass
class Api:
    client: Any

    async def retrying(self, attempt: Callable[[], Awaitable[T]], timeout: float = 90.0) -> T:
        """``attempt`` again while the API is unreachable (an apiserver restart)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return await attempt()
            except (aiohttp.ClientError, TimeoutError, OSError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    async def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Reply:
        """One request; retried while the apiserver is unreachable or not yet serving (5xx, 429)."""

        async def attempt() -> Reply:
            reply = await call(self.client, method, path, body, content_type=content_type)
            if reply.status >= 500 or reply.status == 429:
                raise aiohttp.ClientError(f"{method} {path}: {reply.status} {reply.message}")
            return reply

        return await self.retrying(attempt)

    async def write(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        ok: tuple[int, ...] = (),
    ) -> Reply:
        reply = await self.request(method, path, body, content_type)
        if not reply.ok and reply.status not in ok:
            raise RuntimeError(f"{method} {path}: {reply.status} {reply.message}")
        return reply

    async def read(self, path: str) -> Mapping[str, Any]:
        return (await self.write("GET", path)).body

    async def read_or_none(self, path: str) -> Mapping[str, Any] | None:
        reply = await self.request("GET", path)
        return reply.body if reply.ok else None

    async def wait_for(self, probe: Callable[[], Awaitable[T | None]], timeout: float) -> T | None:
        deadline = time.monotonic() + timeout
        while True:
            found = await probe()
            if found is not None or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.25)
