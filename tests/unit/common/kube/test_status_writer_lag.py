"""Status writes while the informer lags behind them (common/kube/status.py): found by issue 11's chaos
soak, an ElasticQuota's usage going A -> B -> A faster than the watch delivered the write of B was
left at B for good, since the cache still said A and the second A looked like no change."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from gpuq_k8s.common.kube.status import StatusWriter
from gpuq_k8s.common.model import kinds
from tests.testing.scripted_api import Response, apply_merge_patch

EQ = kinds.ELASTIC_QUOTA.kind
A = {"used": {"cpu": "4", "memory": "3Gi"}}
B = {"used": {"cpu": "4"}}


class Server:
    """One ElasticQuota's status as the apiserver holds it, patched by merge patches."""

    def __init__(self, status: Mapping[str, Any]) -> None:
        self.status: Any = dict(status)
        self.patches: list[Any] = []

    async def call_api(self, path: str, method: str, **kwargs: Any) -> Response:
        patch = kwargs["body"]["status"]
        self.patches.append(patch)
        self.status = apply_merge_patch(self.status, patch)
        return Response(200, {"status": self.status})


def writer_over(server: Server, cache: dict[str, Any]) -> StatusWriter:
    return StatusWriter(server, {EQ: kinds.ELASTIC_QUOTA}, lambda *a: cache["status"])


def write(writer: StatusWriter, status: Mapping[str, Any]) -> None:
    writer.put(EQ, "ns", "eq", status)
    asyncio.run(writer.flush())


def test_a_change_undone_before_the_watch_showed_it_is_written_back() -> None:
    server = Server(A)
    cache = {"status": A}  # the informer's view: it has not seen any write of ours yet
    writer = writer_over(server, cache)
    write(writer, B)
    assert server.status == B and server.patches == [{"used": {"memory": None}}]
    write(writer, A)  # the cache still says A; the object holds B
    assert server.status == A and server.patches[-1] == {"used": {"memory": "3Gi"}}


def test_once_the_watch_shows_the_write_the_cache_is_the_base_again() -> None:
    server = Server(A)
    cache = {"status": A}
    writer = writer_over(server, cache)
    write(writer, B)
    cache["status"] = server.status  # the watch delivered our write
    write(writer, B)
    assert len(server.patches) == 1  # nothing to write: B is there
    cache["status"] = {"used": {"cpu": "9"}}  # someone else wrote since: the cache is believed
    write(writer, B)
    assert server.patches[-1] == {"used": {"cpu": "4"}}
