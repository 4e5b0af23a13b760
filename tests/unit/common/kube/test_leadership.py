"""Leadership gates writes (common/kube/leader.py, common/kube/client.py): Lease requests time out
within renewDeadline/2, writes stop at the renew deadline even while a renew hangs, and every
write but a read passes the gate when it is sent. A scripted API client, real asyncio time."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from gpuq_k8s.common.kube.client import GatedClient
from gpuq_k8s.common.kube.errors import WriteRefused
from gpuq_k8s.common.kube.leader import STANDBY_READ_PERIOD, LeaderElector, LeaseTimings
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


# A retry period longer than the standby's read period (and than the time left on the Lease).
SLOW_RETRY = LeaseTimings(lease_duration=1.2, renew_deadline=1.0, retry_period=0.8)


def test_a_standby_takes_a_dead_holders_lease_the_moment_it_expires_by_its_own_count() -> None:
    """client-go's candidate reads on its retry period only, so it takes a dead holder's Lease up to a
    retry period past the expiry (here at 1.6 s: reads at 0, 0.8, 1.6). Ours reads at most every
    STANDBY_READ_PERIOD and once more at the expiry: it takes the Lease as soon as the holder's
    duration (1 s, from its record) has passed since it first saw the record, never before."""

    async def go() -> tuple[float, list[str]]:
        api = LeaseApi()
        other = {"holderIdentity": "other", "leaseDurationSeconds": 1, "renewTime": "2026-11-27T00:00:00Z"}
        api.lease = {"metadata": {"name": "gpuq", "resourceVersion": "1"}, "spec": other}
        standby = LeaderElector(api, namespace="kube-system", name="gpuq", identity="me", timings=SLOW_RETRY)
        began = standby.clock()
        task = asyncio.create_task(standby.run())
        await asyncio.wait_for(standby.leading.wait(), 3.0)
        took = standby.acquired_at - began
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return took, api.requests

    took, requests = asyncio.run(go())
    assert 1.0 <= took < 1.15, took  # not at 1.6 (the retry grid)
    assert requests.count("PUT") == 1, requests


def test_the_standbys_wait_is_the_read_period_or_the_time_left_on_the_holders_lease() -> None:
    now = [100.0]

    def at(timings: LeaseTimings) -> LeaderElector:
        api = LeaseApi()
        return LeaderElector(
            api, namespace="kube-system", name="gpuq", identity="me", timings=timings, clock=lambda: now[0]
        )

    standby = at(SLOW_RETRY)
    assert standby.standby_wait() == STANDBY_READ_PERIOD  # nothing seen yet
    standby._observed_spec = {"holderIdentity": "other", "leaseDurationSeconds": 15}
    standby._observed_at = 90.0
    assert standby.standby_wait() == STANDBY_READ_PERIOD  # 5 s left
    now[0] = 104.8
    assert standby.standby_wait() == pytest.approx(0.2)  # the expiry comes first
    now[0] = 106.0
    assert standby.standby_wait() == STANDBY_READ_PERIOD  # expired: read again (a Conflict, an error)
    standby._observed_spec = {"holderIdentity": "me", "leaseDurationSeconds": 15}
    now[0] = 104.8
    assert standby.standby_wait() == STANDBY_READ_PERIOD  # ours
    assert at(TIMINGS).standby_wait() == TIMINGS.retry_period  # a retry period under the read period
