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

from gpuq_k8s.common.kube.status import call
from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.cluster_fixtures import Cluster, SchedulerProcess, eventually, node_of
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.proxy import ApiProxy, Exchange, is_bind, is_lease, is_write
from tests.testing.builders import MakeElasticQuota
from tests.testing.config import BASE_TIER

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster

ELASTIC = BASE_TIER + "  - name: capacity-scheduling\n"
MAX_CPU = 20
PODS = 32  # 1 cpu each: 12 more than the quota holds
LEASE = ("--leader-elect-lease-duration", "6", "--leader-elect-renew-deadline", "4")
RETRY = ("--leader-elect-retry-period", "1")
A_BIND_DELAY = 1.0  # A's binds wait this long in its proxy (one at a time): A is binding when cut off


@pytest_asyncio.fixture
async def proxies(control_plane: ControlPlane) -> AsyncIterator[tuple[ApiProxy, ApiProxy]]:
    a, b = await ApiProxy(control_plane).start(), await ApiProxy(control_plane).start()
    yield a, b
    await a.stop()
    await b.stop()


def lease_path(namespace: str, name: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"


def parse_micro_time(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def quota_writes(x: Exchange) -> bool:
    """What the old leader must not send once replaced: every write but its Lease's."""
    return is_write(x) and not is_lease(x)


async def test_black_holed_leader_stops_writing_before_the_standby_takes_over(
    cluster: Cluster, proxies: tuple[ApiProxy, ApiProxy], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proxy_a, proxy_b = proxies
    ns = cluster.namespace
    name = f"gpuq-{cluster.test_id}"
    lease = f"lease-{cluster.test_id}"
    await cluster.node("n", {"cpu": "64", "memory": "64Gi", "pods": "110"})
    await cluster.create(
        MakeElasticQuota("quota", ns).min(cpu=str(MAX_CPU)).max(cpu=str(MAX_CPU)).obj(),
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/elasticquotas",
    )
    election = (
        *("--leader-elect", "--leader-elect-resource-namespace", ns, "--leader-elect-resource-name", lease),
        *LEASE,
        *RETRY,
    )
    started: list[SchedulerProcess] = []
    start_a = fixtures.scheduler_starter(proxy_a.kubeconfig(tmp_path / "a.kubeconfig"), tmp_path, started)
    start_b = fixtures.scheduler_starter(proxy_b.kubeconfig(tmp_path / "b.kubeconfig"), tmp_path, started)
    proxy_a.delay(is_bind, A_BIND_DELAY)

    async def holder() -> dict[str, str]:
        reply = await call(cluster.api, "GET", lease_path(ns, lease))  # 404 until the first leader
        return dict(reply.body.get("spec") or {}) if reply.ok else {}

    async def held_by(identity: str) -> dict[str, str] | None:
        spec = await holder()
        return spec if spec.get("holderIdentity") == identity else None

    # Quota used, recounted from bound pods, polled all along.
    worst = 0
    polls = 0

    async def watch_quota() -> None:
        nonlocal worst, polls
        while True:
            pods = await cluster.pods()
            worst = max(worst, sum(1 for p in pods.values() if node_of(p)))
            polls += 1
            await asyncio.sleep(0.2)

    a = start_a(name, ELASTIC, *election, "--leader-elect-identity", "replica-a", "--bind-concurrency", "1")
    poller = asyncio.create_task(watch_quota())
    try:
        await eventually(lambda: held_by("replica-a"), 30, "replica-a leads", a.log)
        b = start_b(name, ELASTIC, *election, "--leader-elect-identity", "replica-b")
        await b.wait_ready(60)
        for i in range(10):
            await cluster.pod(f"p-{i:02d}", {"cpu": "1"}, scheduler=name)

        async def a_bound(count: int) -> bool:
            return sum(1 for x in proxy_a.exchanges if is_bind(x) and x.status == 201) >= count

        await eventually(lambda: a_bound(2), 30, "replica-a binding", a.log)
        cut = time.time()
        proxy_a.black_hole(is_lease)
        for i in range(10, PODS):  # more pods while the leadership changes hands
            await cluster.pod(f"p-{i:02d}", {"cpu": "1"}, scheduler=name)
            await asyncio.sleep(0.3)

        taken = await eventually(lambda: held_by("replica-b"), 60, "replica-b takes the Lease", b.log)
        acquired = parse_micro_time(taken["acquireTime"])
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
    finally:
        poller.cancel()
        for process in started:
            process.terminate()

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
