"""Split brain (issue 11): two ``gpuq scheduler`` replicas with leader election; the leader's Lease
requests (and only those) are black-holed while it is binding.

Each replica reaches the apiserver through its own HTTP proxy (``tests/e2e/proxy.py``), which records
every request it receives. Replica A leads and binds (its binds slowed, so binds are in flight when
its Lease goes silent); then its Lease GETs and PUTs are never answered. A must stop writing within
its renew deadline and exit (code 1, as kube-scheduler does); B takes the Lease once it expires. From
the proxies' records: A sends no bind, eviction, status or event write after B's ``acquireTime`` and
B binds after it. Pods keep coming throughout, more than the ElasticQuota's ``max`` holds, and the
quota used recounted from bound pods never exceeds it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio

from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.cluster_fixtures import Cluster, eventually, node_of
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.leader_pair import LeaseTimes, leader_pair
from tests.e2e.proxy import ApiProxy, Exchange, is_bind, is_lease, is_write

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster

MAX_CPU = 20
PODS = 32  # 1 cpu each: 12 more than the quota holds
TIMES = LeaseTimes(lease_duration="6", renew_deadline="4", retry_period="1")
A_BIND_DELAY = 1.0  # A's binds wait this long in its proxy (one at a time): A is binding when cut off


@pytest_asyncio.fixture
async def proxies(control_plane: ControlPlane) -> AsyncIterator[tuple[ApiProxy, ApiProxy]]:
    a, b = await ApiProxy(control_plane).start(), await ApiProxy(control_plane).start()
    yield a, b
    await a.stop()
    await b.stop()


def parse_micro_time(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def quota_writes(x: Exchange) -> bool:
    """What the old leader must not send once replaced: every write but its Lease's."""
    return is_write(x) and not is_lease(x)


async def test_black_holed_leader_stops_writing_before_the_standby_takes_over(
    cluster: Cluster,
    control_plane: ControlPlane,
    proxies: tuple[ApiProxy, ApiProxy],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    proxy_a, proxy_b = proxies
    proxy_a.delay(is_bind, A_BIND_DELAY)
    async with leader_pair(
        cluster, control_plane, tmp_path, max_cpu=MAX_CPU, times=TIMES, proxy_a=proxy_a, proxy_b=proxy_b
    ) as pair:
        a, b = await pair.a_leads_then_b_stands_by("--bind-concurrency", "1")
        for i in range(10):
            await cluster.pod(f"p-{i:02d}", {"cpu": "1"}, scheduler=pair.name)

        async def a_bound(count: int) -> bool:
            return sum(1 for x in proxy_a.exchanges if is_bind(x) and x.status == 201) >= count

        await eventually(lambda: a_bound(2), 30, "replica-a binding", a.log)
        cut = time.time()
        proxy_a.black_hole(is_lease)
        for i in range(10, PODS):  # more pods while the leadership changes hands
            await cluster.pod(f"p-{i:02d}", {"cpu": "1"}, scheduler=pair.name)
            await asyncio.sleep(0.3)

        taken = await eventually(lambda: pair.held_by("replica-b"), 60, "replica-b takes the Lease", b.log)
        acquired = parse_micro_time(str(taken["acquireTime"]))
        assert a.popen is not None
        code = await asyncio.to_thread(a.popen.wait, 60)
        exited = time.time()
        assert code == 1, f"the old leader exited with {code}\n{a.log()}"
        assert "leader election lost" in a.log(400), a.log()

        async def quota_full() -> bool:
            pods = await cluster.pods()
            return len(pods) == PODS and sum(1 for p in pods.values() if node_of(p)) == MAX_CPU

        await eventually(quota_full, 60, f"{MAX_CPU} pods bound (the quota's max)", b.log)
        await asyncio.sleep(2)  # anything still to come would show in the recount

    late = [x for x in proxy_a.exchanges if quota_writes(x) and x.received >= acquired]
    assert not late, [(x.method, x.path, x.received - acquired) for x in late]
    a_binds = [x for x in proxy_a.exchanges if is_bind(x)]
    b_binds = [x for x in proxy_b.exchanges if is_bind(x)]
    assert a_binds and max(x.received for x in a_binds) < acquired
    assert b_binds, "replica-b never bound"
    b_early = [x for x in proxy_b.exchanges if quota_writes(x) and x.received < acquired]
    assert not b_early, [
        (x.method, x.path, x.received - acquired) for x in b_early
    ]  # a standby writes nothing
    last_write = max(x.received for x in proxy_a.exchanges if quota_writes(x))
    worst, polls = pair.recount.worst, pair.recount.polls
    assert worst <= MAX_CPU, f"{worst} cpu bound against a max of {MAX_CPU}"
    assert polls >= 20
    bound = sum(1 for p in (await cluster.pods()).values() if node_of(p))
    assert bound == MAX_CPU
    first_b = min(x.received for x in b_binds)
    with capsys.disabled():
        print(
            f" [Lease cut at 0; replica-a last wrote +{last_write - cut:.1f}s,"
            f" its exit seen by +{exited - cut:.1f}s;"
            f" replica-b acquired +{acquired - cut:.1f}s, first bind +{first_b - cut:.1f}s;"
            f" binds a={len(a_binds)} b={len(b_binds)}; max bound {worst}/{MAX_CPU} over {polls} polls]",
            end="",
        )
