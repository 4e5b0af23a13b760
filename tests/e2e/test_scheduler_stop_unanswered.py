"""A leader stopped (SIGTERM) while its binds are unanswered keeps the Lease until it expires, so a
write that lands after it gave up still lands before the next leader decides (docs/operations.md
"Stopping").

Replicas A (leader, through its own e2e proxy) and B (standby). A binds 4 pods against an
ElasticQuota of ``max`` 4 cpu; its proxy holds the 4 binds (``outlive_client``: forwarded once
cleared even though A has gone, as a request already sent can). 4 more pods come, pending. A gets
SIGTERM: its drain gives up on the binds after 10 s and it exits without releasing the Lease. Only
then the held binds are let through; they land while the Lease, last renewed when A began stopping,
has not expired. From the API: the Lease still named A after A exited; B took it only once it
expired, after A's binds had landed; B bound none of the other 4 pods (the quota is full); never
more than 4 cpu bound, polled all along. A leader that released the Lease at once (the old
behaviour) would fail the first two: B would lead, list 8 pending pods and an empty quota, and
bind 4 of them while A's binds were still on their way.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from gpuq_k8s.common.model.wire import rfc3339_seconds
from tests.e2e import cluster_fixtures as fixtures
from tests.e2e import proxy as proxy_fixtures
from tests.e2e.cluster_fixtures import Cluster, eventually, node_of
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.leader_pair import LeaseTimes, leader_pair
from tests.e2e.proxy import ApiProxy, is_bind

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
proxy = proxy_fixtures.proxy

MAX_CPU = 4
LEASE_SECONDS = 15  # longer than the 10 s drain: A's Lease outlives A when it is not released
TIMES = LeaseTimes(lease_duration=str(LEASE_SECONDS), renew_deadline="10", retry_period="0.5")


async def test_a_leader_stopped_with_binds_unanswered_leaves_the_lease_to_expire(
    cluster: Cluster, control_plane: ControlPlane, proxy: ApiProxy, tmp_path: Path
) -> None:
    async with leader_pair(
        cluster, control_plane, tmp_path, max_cpu=MAX_CPU, times=TIMES, proxy_b=proxy
    ) as pair:
        proxy_a = pair.proxy_a
        a, b = await pair.a_leads_then_b_stands_by()

        late = proxy_a.hold(is_bind, outlive_client=True)
        first = [f"p-{i}" for i in range(MAX_CPU)]
        for pod in first:
            await cluster.pod(pod, {"cpu": "1"}, scheduler=pair.name)

        async def a_binding() -> bool:
            return sum(1 for x in proxy_a.exchanges if is_bind(x)) >= MAX_CPU

        await eventually(a_binding, 30, f"replica-a binding {MAX_CPU} pods", a.log)
        more = [f"q-{i}" for i in range(MAX_CPU)]
        for pod in more:
            await cluster.pod(pod, {"cpu": "1"}, scheduler=pair.name)

        async def b_saw_all() -> bool:
            seen = {e.name for e in proxy.events if e.kind == "Pod" and e.type == "ADDED"}
            return set(first + more) <= seen

        await eventually(b_saw_all, 30, "replica-b sees the pods", b.log)
        stopping = time.time()
        code = await asyncio.to_thread(a.terminate, 30.0)
        exited = time.time()
        assert code == 0, a.log()
        assert exited - stopping >= 9.0, f"replica-a exited {exited - stopping:.1f}s after SIGTERM"
        spec = await pair.lease_spec()
        assert spec.get("holderIdentity") == "replica-a", f"the Lease was handed over: {spec}"
        assert "the Lease is left to expire" in a.log(200), a.log(200)
        renewed = rfc3339_seconds(str(spec.get("renewTime") or ""))
        assert renewed is not None and renewed < stopping + 1.0, (renewed, stopping)

        late.clear()  # A's binds, given up by A, land now: before its Lease expires

        async def a_bound() -> bool:
            pods = await cluster.pods()
            return all(node_of(pods[p]) for p in first)

        await eventually(a_bound, 10, "replica-a's late binds land", b.log)
        landed = time.time()
        assert landed < renewed + LEASE_SECONDS, "the binds landed after the Lease expired: no test"
        await eventually(lambda: pair.held_by("replica-b"), 30, "replica-b takes the expired Lease", b.log)
        acquired = rfc3339_seconds(str((await pair.lease_spec()).get("acquireTime") or ""))
        assert acquired is not None and acquired >= renewed + LEASE_SECONDS - 1.0, (acquired, renewed)
        assert acquired > landed - 1.0
        await asyncio.sleep(3)  # B, leading, sees a full quota: a bind past it would show now

    pods = await cluster.pods()
    assert all(node_of(pods[p]) for p in first), "a pod A bound lost its node"
    assert not any(node_of(pods[p]) for p in more), [p for p in more if node_of(pods[p])]
    assert not [x for x in proxy.exchanges if is_bind(x)], "replica-b bound past the quota"
    worst = pair.recount.worst
    assert worst <= MAX_CPU, f"{worst} cpu bound against a max of {MAX_CPU}"
    assert pair.recount.polls >= 10
