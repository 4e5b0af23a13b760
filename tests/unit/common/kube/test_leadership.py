"""Leadership gates writes (common/kube/leader.py, common/kube/client.py): Lease requests time out
within renewDeadline/2, writes stop at the renew deadline even while a renew hangs, and every
write but a read passes the gate when it is sent. A scripted API client, real asyncio time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpuq_k8s.common.kube.client import GatedClient
from gpuq_k8s.common.kube.errors import WriteRefused
from gpuq_k8s.common.kube.leader import LeaderElector, LeaseTimings
from gpuq_k8s.common.kube.status import call
from tests.testing.scripted_api import Response

# Short but valid (client-go's rules): duration > deadline > 1.2 x retry.
TIMINGS = LeaseTimings(lease_duration=1.5, renew_deadline=0.4, retry_period=0.1)


class LeaseApi:
    """A Lease endpoint that works until ``hang`` is set, then never answers (black-holed)."""

    def __init__(self) -> None:
        self.hang = False
        self.lease: dict[str, Any] | None = None
        self.requests: list[str] = []

    async def call_api(self, path: str, method: str, body: Any = None, **_: Any) -> Response:
        self.requests.append(method)
        if self.hang:
            await asyncio.Event().wait()
        if method == "GET":
            return Response(404, {}) if self.lease is None else Response(200, self.lease)
        assert body is not None
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": str(len(self.requests))}}
        return Response(201, self.lease)


def elector(api: LeaseApi) -> LeaderElector:
    return LeaderElector(api, namespace="kube-system", name="gpuq", identity="me", timings=TIMINGS)


def test_a_hung_lease_request_times_out_within_half_the_renew_deadline() -> None:
    async def go() -> tuple[bool, float]:
        api = LeaseApi()
        api.hang = True
        leader = elector(api)
        loop = asyncio.get_running_loop()
        began = loop.time()
        ok = await leader._try()
        return ok, loop.time() - began

    ok, took = asyncio.run(go())
    assert not ok
    assert took < TIMINGS.renew_deadline / 2 + 0.1


def test_writes_stop_at_the_renew_deadline_while_a_renew_hangs_then_the_lease_is_lost() -> None:
    async def go() -> None:
        api = LeaseApi()
        leader = elector(api)
        task = asyncio.create_task(leader.run())
        await asyncio.wait_for(leader.leading.wait(), 1.0)
        assert leader.writes_allowed()
        await asyncio.sleep(TIMINGS.retry_period * 3)
        assert leader.writes_allowed()  # renewing fine
        api.hang = True
        hung_at = leader.clock()
        while leader.writes_allowed():
            await asyncio.sleep(0.01)
        # Stopped no later than the deadline after the last renewal that went through.
        assert leader.clock() - hung_at <= TIMINGS.renew_deadline + 0.05
        await asyncio.wait_for(leader.lost.wait(), TIMINGS.renew_deadline + TIMINGS.retry_period + 0.3)
        assert not leader.writes_allowed()
        await task

    asyncio.run(go())


def test_the_gate_refuses_writes_when_they_are_sent_and_lets_reads_through() -> None:
    async def go() -> None:
        api = LeaseApi()
        api.lease = {"metadata": {"name": "x"}, "spec": {}}
        allowed = [True]
        gated = GatedClient(api, lambda: allowed[0])
        assert (await call(gated, "PUT", "/x", {"metadata": {"name": "x"}})).ok
        allowed[0] = False
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            with pytest.raises(WriteRefused, match="not the leader"):
                await call(gated, method, "/x", {"metadata": {"name": "x"}})
        assert (await call(gated, "GET", "/x")).ok
        assert api.requests == ["PUT", "GET"] and gated.refused == 4

    asyncio.run(go())
