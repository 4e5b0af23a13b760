"""A small client of the differential test's own (aiohttp and the kubeconfig's certificates), so that
what the checker reads, the pod watch above all, does not pass through any of gpuq's code.

Paths of every kind the workload uses are spelled here (the test knows kinds gpuq does not read).
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Final

import aiohttp
import yaml

Obj = dict[str, Any]

# kind -> (API group path, plural, namespaced)
PATHS: Final = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "PersistentVolume": ("/api/v1", "persistentvolumes", False),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "PriorityClass": ("/apis/scheduling.k8s.io/v1", "priorityclasses", False),
    "RuntimeClass": ("/apis/node.k8s.io/v1", "runtimeclasses", False),
    "StorageClass": ("/apis/storage.k8s.io/v1", "storageclasses", False),
    "CSINode": ("/apis/storage.k8s.io/v1", "csinodes", False),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "ResourceClaim": ("/apis/resource.k8s.io/v1", "resourceclaims", True),
    "ElasticQuota": ("/apis/scheduling.x-k8s.io/v1alpha1", "elasticquotas", True),
}
MERGE: Final = "application/merge-patch+json"


def collection(kind: str, namespace: str = "") -> str:
    prefix, plural, namespaced = PATHS[kind]
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespaced and namespace else f"{prefix}/{plural}"


def path_of(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{collection(obj['kind'], meta.get('namespace', ''))}/{meta['name']}"


class ApiError(RuntimeError):
    pass


class Api:
    """``async with Api(kubeconfig) as api``: JSON in, JSON out; errors raise :class:`ApiError`."""

    def __init__(self, kubeconfig: Path, concurrency: int = 16) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        self._dir = Path(tempfile.mkdtemp(prefix="gpuq-diff-api-"))
        for name, data in (
            ("ca", cluster["certificate-authority-data"]),
            ("crt", user["client-certificate-data"]),
            ("key", user["client-key-data"]),
        ):
            (self._dir / name).write_bytes(base64.b64decode(data))
        self._context = ssl.create_default_context(cafile=str(self._dir / "ca"))
        self._context.load_cert_chain(self._dir / "crt", self._dir / "key")
        self.server = cluster["server"]
        self._gate = asyncio.Semaphore(concurrency)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Api:
        connector = aiohttp.TCPConnector(ssl=self._context, limit=64)
        self._session = aiohttp.ClientSession(self.server, connector=connector)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use Api as an async context manager"
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        ok: tuple[int, ...] = (),
    ) -> Obj:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        for attempt in range(5):
            async with self._gate, self.session.request(method, path, data=data, headers=headers) as reply:
                text = await reply.text()
                if reply.status < 300 or reply.status in ok:
                    return json.loads(text) if text else {}
                if reply.status in (429, 500, 503) and attempt < 4:
                    await asyncio.sleep(0.2 * (attempt + 1))
                    continue
                raise ApiError(f"{method} {path}: HTTP {reply.status}: {text[:300]}")
        raise AssertionError("unreachable")

    async def create(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        return await self.request("POST", collection(obj["kind"], meta.get("namespace", "")), obj)

    async def patch(self, obj_path: str, patch: Obj) -> Obj:
        return await self.request("PATCH", obj_path, patch, MERGE)

    async def list(self, kind: str, namespace: str = "") -> tuple[list[Obj], str]:
        """Every object of ``kind`` (kind and apiVersion filled in) and the list's resourceVersion."""
        body = await self.request("GET", collection(kind, namespace))
        prefix = PATHS[kind][0]
        version = prefix.removeprefix("/apis/").removeprefix("/api/")
        items = [{"kind": kind, "apiVersion": version, **item} for item in body.get("items") or ()]
        return items, str(body["metadata"]["resourceVersion"])

    async def watch(self, kind: str, resource_version: str) -> AsyncIterator[tuple[str, Obj]]:
        """Watch events ``(type, object)`` of ``kind`` from ``resource_version``, forever (each watch
        is resumed from the last version seen; bookmarks are read, not yielded)."""
        version = resource_version
        while True:
            params = {
                "watch": "1",
                "resourceVersion": version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "600",
            }
            async with self.session.get(
                collection(kind), params=params, timeout=aiohttp.ClientTimeout(total=None)
            ) as reply:
                if reply.status != 200:
                    raise ApiError(f"watch {kind}: HTTP {reply.status}: {(await reply.text())[:300]}")
                async for line in reply.content:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        raise ApiError(f"watch {kind}: {event['object']}")
                    version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        yield event["type"], event["object"]
