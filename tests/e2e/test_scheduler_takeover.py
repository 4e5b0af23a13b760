"""A standby takes over from a killed leader without listing (issue 29): its watches are live, so it
catches its caches up to the present (a ``limit=1`` list for the present resourceVersion, then its
watch past it) instead of listing every kind again; and it decides nothing before its cache holds
the old leader's last bind.

Replicas A (leader) and B (standby) each reach the apiserver through an e2e proxy
(``tests/e2e/proxy.py``), which records every request and every watch event it forwards. 28 pods of
1 cpu come against an ElasticQuota of ``max`` 20 cpu; both replicas see them pending. A's 20 binds
are held in its proxy until B's pod watch is stalled, then land: B's cache never sees them. A is
killed (SIGKILL: no release), and the stall is cleared only two seconds after B took the Lease. A B
deciding from its stale cache would see 28 pending pods and an unused quota, and bind. From the
proxies' records: B binds nothing before its pod watch forwarded an event or bookmark at or past the
resourceVersion of A's last bind, and sends no list after the kill but the ``limit=1`` reads of the
present resourceVersion. Then 4 of A's pods are deleted and B binds 4 of the pending ones. From the
API, polled all along: never more than 20 cpu bound.

The fallback: when B's pod watch cannot pass the present (stalled in its proxy from before A's binds
landed), B lists the pods again and decides only from that list.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.e2e import cluster_fixtures as fixtures
from tests.e2e import proxy as proxy_fixtures
from tests.e2e.cluster_fixtures import Cluster, SchedulerProcess, eventually, node_of
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.leader_pair import LeaderPair, LeaseTimes, leader_pair
from tests.e2e.proxy import ApiProxy, Exchange, Fault, is_bind, is_watch, lists_of

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
proxy = proxy_fixtures.proxy

MAX_CPU = 20
PODS = 28  # 8 more than the quota holds
FREED = 4  # A's pods deleted once B leads: B binds as many of the pending ones
TIMES = LeaseTimes(lease_duration="4", renew_deadline="3", retry_period="0.5")
STALL_AFTER_TAKEOVER = 2.0  # B's pod watch stays silent this long after B took the Lease


async def test_standby_takes_over_without_listing_and_decides_only_past_the_last_bind(
    cluster: Cluster, control_plane: ControlPlane, proxy: ApiProxy, tmp_path: Path
) -> None:
    ns = cluster.namespace
    async with leader_pair(
        cluster, control_plane, tmp_path, max_cpu=MAX_CPU, times=TIMES, proxy_b=proxy
    ) as pair:
        proxy_a = pair.proxy_a

        async def bound() -> dict[str, str]:
            return {
                n: p["metadata"]["resourceVersion"] for n, p in (await cluster.pods()).items() if node_of(p)
            }

        a, b = await pair.a_leads_then_b_stands_by()
        held = proxy_a.hold(is_bind)  # A decides, its binds wait in its proxy
        names = [f"p-{i:02d}" for i in range(PODS)]
        for pod in names:
            await cluster.pod(pod, {"cpu": "1"}, scheduler=pair.name)

        async def b_saw_all() -> bool:  # B's cache has every pod, pending
            seen = {e.name for e in proxy.events if e.kind == "Pod" and e.type == "ADDED"}
            return set(names) <= seen

        await eventually(b_saw_all, 30, "replica-b sees the pods", b.log)

        async def a_binding() -> bool:
            return sum(1 for x in proxy_a.exchanges if is_bind(x)) >= MAX_CPU

        await eventually(a_binding, 30, f"replica-a binding {MAX_CPU} pods", a.log)
        silent = proxy.stall(is_watch("pods"))  # B's cache will not see A's binds land
        held.clear()

        async def a_bound() -> dict[str, str] | None:
            now = await bound()
            return now if len(now) >= MAX_CPU else None

        bound_by_a = await eventually(a_bound, 30, "replica-a's binds land", a.log)
        last_bind = max(int(v) for v in bound_by_a.values())  # resourceVersions are etcd revisions
        a.kill()  # no release: B takes the Lease once it expires
        killed = time.time()
        await eventually(lambda: pair.held_by("replica-b"), 30, "replica-b takes the Lease", b.log)
        await asyncio.sleep(STALL_AFTER_TAKEOVER)
        early = [x for x in proxy.exchanges if is_bind(x)]
        assert not early, f"replica-b bound {len(early)} pods from a cache without replica-a's binds"
        stall_cleared = time.time()
        silent.clear()
        await asyncio.sleep(2)  # B's view now has A's binds, the quota full
        for pod in sorted(bound_by_a)[:FREED]:  # room for FREED of the pending pods
            await cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod}")

        async def quota_full_again() -> bool:
            pods = await cluster.pods()
            return len(pods) == PODS - FREED and sum(1 for p in pods.values() if node_of(p)) == MAX_CPU

        await eventually(quota_full_again, 60, f"{MAX_CPU} pods bound again", b.log)
        await asyncio.sleep(2)  # a bind past the quota would show in the recount

    # B's first decision came after its pod watch had passed A's last bind.
    binds = sorted(x.received for x in proxy.exchanges if is_bind(x))
    assert binds, "replica-b never bound"
    pod_events = [e for e in proxy.events if e.exchange.resource == "pods" and e.resource_version.isdigit()]
    passed = [e.at for e in pod_events if int(e.resource_version) >= last_bind]
    assert passed and min(passed) >= stall_cleared
    assert min(passed) <= binds[0], (min(passed) - stall_cleared, binds[0] - stall_cleared)
    worst = pair.recount.worst
    assert worst <= MAX_CPU, f"{worst} cpu bound against a max of {MAX_CPU}"
    assert pair.recount.polls >= 10
    pods = await cluster.pods()
    assert sum(1 for p in pods.values() if node_of(p)) == MAX_CPU
    kept = sorted(bound_by_a)[FREED:]
    assert all(node_of(pods[pod]) for pod in kept), "a pod bound by A lost its node"
    # No list after the kill: only the limit=1 reads of the present resourceVersion.
    reads = [x for x in proxy.exchanges if lists_of(x.resource)(x)]  # by pages or streamed
    lists = [x for x in reads if x.received > killed and x.query.get("limit") != "1"]
    assert not lists, [(x.path, dict(x.query)) for x in lists]
    assert any(x.received > killed and x.resource == "pods" for x in reads), "no read of the present"
    log = b.log(400)
    assert "caches caught up on taking the Lease without a list" in log, log
    assert "re-listed" not in log, log


async def test_standby_whose_watch_cannot_catch_up_lists_before_deciding(
    cluster: Cluster, control_plane: ControlPlane, proxy: ApiProxy, tmp_path: Path
) -> None:
    """Catch-up's fallback: B has seen the 28 pods pending when its pod watch is stalled (its proxy
    forwards no byte of it, nor of the watch catch-up opens); A's 20 binds land after that, and A
    is killed. B's watch cannot pass the present resourceVersion within the catch-up timeout, so B
    lists the pods again (from its proxy's request log: a full list of pods after the kill) and
    binds nothing before that list was answered. Its stale cache held 28 pending pods and an unused
    quota: deciding from it would bind 20 more. The list shows A's binds, so B binds none of the 8
    pending pods until 4 of A's are deleted, then 4. From the API, polled all along: never more than
    20 cpu bound."""
    ns = cluster.namespace
    async with leader_pair(
        cluster, control_plane, tmp_path, max_cpu=MAX_CPU, times=TIMES, proxy_b=proxy
    ) as pair:

        async def bound_count() -> int:
            return sum(1 for p in (await cluster.pods()).values() if node_of(p))

        a, b, silent = await _a_binds_unseen_by_b(cluster, pair, proxy)
        a.kill()
        killed = time.time()
        await eventually(lambda: pair.held_by("replica-b"), 30, "replica-b takes the Lease", b.log)

        async def relisted() -> bool:
            lists = [x for x in proxy.exchanges if x.received > killed and _full_pod_list(x)]
            return any(_complete_at(proxy, x) is not None for x in lists)

        await eventually(relisted, 30, "replica-b lists the pods again", b.log)
        await asyncio.sleep(2)  # a bind over the quota from a stale view would come now
        assert await bound_count() == MAX_CPU
        silent.clear()  # B's watch lives again: it sees the deletes below
        bound_by_a = sorted(n for n, p in (await cluster.pods()).items() if node_of(p))
        for pod in bound_by_a[:FREED]:
            await cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod}")

        async def quota_full_again() -> bool:
            pods = await cluster.pods()
            return len(pods) == PODS - FREED and sum(1 for p in pods.values() if node_of(p)) == MAX_CPU

        await eventually(quota_full_again, 60, f"{MAX_CPU} pods bound again", b.log)
        await asyncio.sleep(2)

    lists = [x for x in proxy.exchanges if x.received > killed and _full_pod_list(x)]
    binds = sorted(x.received for x in proxy.exchanges if is_bind(x))
    assert binds, "replica-b never bound"
    first_answer = min(t for x in lists if (t := _complete_at(proxy, x)) is not None)
    assert first_answer <= binds[0], "replica-b bound before its list of the pods was answered"
    assert len(binds) == FREED, f"replica-b sent {len(binds)} binds for {FREED} freed cpu"
    worst = pair.recount.worst
    assert worst <= MAX_CPU, f"{worst} cpu bound against a max of {MAX_CPU}"
    assert pair.recount.polls >= 10
    log = b.log(400)
    assert "caches re-listed on taking the Lease: Pod" in log, log


async def _a_binds_unseen_by_b(
    cluster: Cluster, pair: LeaderPair, proxy: ApiProxy
) -> tuple[SchedulerProcess, SchedulerProcess, Fault]:
    """A leads, B stands by and sees the PODS pods pending; B's pod watch is then stalled (its proxy
    forwards no byte of it until the returned fault is cleared) and A's MAX_CPU binds land unseen by B."""
    proxy_a = pair.proxy_a
    a, b = await pair.a_leads_then_b_stands_by()
    held = proxy_a.hold(is_bind)
    names = [f"p-{i:02d}" for i in range(PODS)]
    for pod in names:
        await cluster.pod(pod, {"cpu": "1"}, scheduler=pair.name)

    async def b_saw_all() -> bool:  # B's cache has every pod, pending
        seen = {e.name for e in proxy.events if e.kind == "Pod" and e.type == "ADDED"}
        return set(names) <= seen

    await eventually(b_saw_all, 30, "replica-b sees the pods", b.log)

    async def a_binding() -> bool:
        return sum(1 for x in proxy_a.exchanges if is_bind(x)) >= MAX_CPU

    await eventually(a_binding, 30, f"replica-a binding {MAX_CPU} pods", a.log)
    silent = proxy.stall(is_watch("pods"))  # from now on B's pod watch forwards nothing
    held.clear()

    async def a_bound() -> bool:
        return sum(1 for p in (await cluster.pods()).values() if node_of(p)) >= MAX_CPU

    await eventually(a_bound, 30, "replica-a's binds land", a.log)
    return a, b, silent


async def test_standby_whose_read_of_the_present_fails_lists_before_deciding(
    cluster: Cluster, control_plane: ControlPlane, proxy: ApiProxy, tmp_path: Path
) -> None:
    """Catch-up's other fallback: B's pod watch is stalled as above and, on taking the Lease, its
    ``limit=1`` read of the pods' present resourceVersion is answered 503 (its proxy fails it, as
    kube-apiserver does when etcd fails the read). B lists the pods again (a WARNING names the kind)
    and decides only from that list: its stale cache held 28 pending pods and an unused quota, and
    deciding from it (the error taken for a finished catch-up) would bind 20 more. From the API,
    polled all along: never more than 20 cpu bound; B binds nothing until 4 of A's pods are deleted."""
    ns = cluster.namespace
    async with leader_pair(
        cluster, control_plane, tmp_path, max_cpu=MAX_CPU, times=TIMES, proxy_b=proxy
    ) as pair:
        proxy.fail(lambda x: lists_of("pods")(x) and x.query.get("limit") == "1")
        a, b, silent = await _a_binds_unseen_by_b(cluster, pair, proxy)
        a.kill()
        killed = time.time()
        await eventually(lambda: pair.held_by("replica-b"), 30, "replica-b takes the Lease", b.log)

        async def relisted() -> bool:
            lists = [x for x in proxy.exchanges if x.received > killed and _full_pod_list(x)]
            return any(_complete_at(proxy, x) is not None for x in lists)

        await eventually(relisted, 30, "replica-b lists the pods again", b.log)
        await asyncio.sleep(2)  # a bind over the quota from a stale view would come now
        assert pair.recount.worst <= MAX_CPU, f"{pair.recount.worst} cpu bound against a max of {MAX_CPU}"
        silent.clear()
        pods = await cluster.pods()
        for pod in sorted(n for n, p in pods.items() if node_of(p))[:FREED]:
            await cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod}")

        async def quota_full_again() -> bool:
            pods = await cluster.pods()
            return len(pods) == PODS - FREED and sum(1 for p in pods.values() if node_of(p)) == MAX_CPU

        await eventually(quota_full_again, 60, f"{MAX_CPU} pods bound again", b.log)
        log = b.log(400)

    reads = [
        x
        for x in proxy.exchanges
        if x.received > killed and lists_of("pods")(x) and x.query.get("limit") == "1"
    ]
    assert reads and all(x.status == 503 for x in reads), [(x.query, x.status) for x in reads]
    assert pair.recount.worst <= MAX_CPU, f"{pair.recount.worst} cpu bound against a max of {MAX_CPU}"
    assert len([x for x in proxy.exchanges if is_bind(x)]) == FREED
    assert "Pod: could not catch up on taking the Lease" in log, log
    assert "caches re-listed on taking the Lease: Pod" in log, log


def _complete_at(proxy: ApiProxy, x: Exchange) -> float | None:
    """When the list ``x`` was through: its answer's last byte, or a streaming list's end bookmark."""
    if not x.streaming_list:
        return x.answered
    ends = [e.at for e in proxy.events if e.exchange is x and e.type == "BOOKMARK"]
    return min(ends, default=None)


def _full_pod_list(x: Exchange) -> bool:
    """A list of pods (its first page), not the ``limit=1`` read of the present resourceVersion."""
    return lists_of("pods")(x) and x.query.get("limit") != "1"
