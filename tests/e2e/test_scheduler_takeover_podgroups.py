"""A standby's PodGroups when it takes over from a killed leader (scheduler/kube/feed.py
``adopt_admitted``, scheduler/groups.py; design.md "Data flow", the takeover): a standby is fed every
change but runs no enqueue action, and a PodGroup's phase is the leader's output, so its groups
follow their members only. Found by the CI run of the day in the life (seed 28): the standby that
took over kept two pods of an elastic gang held for the enqueue action, the gang Completed by its
two finished pods, and nobody tried them for minutes.

Replicas A (leader) and B (standby), each through an e2e proxy, an ElasticQuota of ``max`` 2 cpu,
pods of 1 cpu; A is killed (SIGKILL: no release) and B takes the Lease once it expires.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from gpuq_k8s.common.model.events import INSUFFICIENT_ELASTIC_QUOTA
from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.cluster_fixtures import Cluster, eventually, node_of
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.leader_pair import LeaseTimes, leader_pair
from tests.e2e.proxy import is_bind
from tests.testing.builders import MakePodGroup

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster

MAX_CPU = 2
TIMES = LeaseTimes(lease_duration="4", renew_deadline="3", retry_period="0.5")
GROUP_NAME = "scheduling.k8s.io/group-name"
MERGE_PATCH = "application/merge-patch+json"


async def podgroup(cluster: Cluster, name: str, min_member: int) -> None:
    ns = cluster.namespace
    await cluster.create(
        MakePodGroup(name, ns).min_member(min_member).obj(),
        f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups",
    )


async def phase_of(cluster: Cluster, name: str) -> str:
    ns = cluster.namespace
    group = await cluster.get(f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups/{name}")
    return str((group.get("status") or {}).get("phase") or "")


async def test_the_pods_of_a_gang_its_members_completed_are_placed_by_the_new_leader(
    cluster: Cluster, control_plane: ControlPlane, tmp_path: Path
) -> None:
    """An elastic gang (minMember 2 of 4): A admits it and binds two pods, the quota's 2 cpu; the
    other two wait for room. B, standing by, holds all four for the enqueue action until the two
    bound ones make the group Running. A is killed; the two bound pods succeed (their quota given
    back): the group is Completed. B takes the Lease and binds the other two (a B that kept them
    held would never try them: the enqueue action admits Pending groups only)."""
    ns = cluster.namespace
    async with leader_pair(cluster, control_plane, tmp_path, max_cpu=MAX_CPU, times=TIMES) as pair:
        a, b = await pair.a_leads_then_b_stands_by()
        await podgroup(cluster, "elastic", 2)
        names = [f"m-{i}" for i in range(4)]
        for name in names:
            await cluster.pod(name, {"cpu": "1"}, scheduler=pair.name, annotations={GROUP_NAME: "elastic"})

        async def two_bound() -> list[str] | None:
            pods = await cluster.pods()
            bound = sorted(n for n in names if node_of(pods[n]))
            return bound if len(bound) == MAX_CPU else None

        bound_by_a = await eventually(two_bound, 30, "replica-a binds two of the gang's pods", a.log)
        a.kill()  # no release: B takes the Lease once it expires
        for name in bound_by_a:  # as a kubelet reports them: done, their cpu free again
            await cluster.request(
                "PATCH",
                f"/api/v1/namespaces/{ns}/pods/{name}/status",
                {"status": {"phase": "Succeeded"}},
                MERGE_PATCH,
            )
        await eventually(lambda: pair.held_by("replica-b"), 30, "replica-b takes the Lease", b.log)

        async def all_bound() -> bool:
            pods = await cluster.pods()
            return all(node_of(pods[n]) for n in names)

        await eventually(all_bound, 30, "replica-b binds the gang's other two pods", b.log)
    binds = {x.name for x in pair.proxy_b.exchanges if is_bind(x)}
    assert binds == set(names) - set(bound_by_a), binds


async def test_a_podgroup_the_old_leader_admitted_stays_admitted(
    cluster: Cluster, control_plane: ControlPlane, tmp_path: Path
) -> None:
    """A admits PodGroup ``admitted`` (Inqueue) while the quota has room; its pod fits no node. Two
    pods of no group then fill the quota. B, standing by, holds the group Pending (a phase is not an
    input). On taking the Lease B adopts A's admission: the group stays Inqueue and B judges it no
    more; enqueued again by B's own reckoning it would be refused (the quota is full), its pod held
    and an InsufficientElasticQuota Warning recorded on it."""
    ns = cluster.namespace
    async with leader_pair(cluster, control_plane, tmp_path, max_cpu=MAX_CPU, times=TIMES) as pair:
        a, b = await pair.a_leads_then_b_stands_by()
        await podgroup(cluster, "admitted", 1)
        body = cluster.pod_body(
            "nowhere", {"cpu": "1"}, scheduler=pair.name, annotations={GROUP_NAME: "admitted"}
        )
        body["spec"]["nodeSelector"]["gpuq.e2e/no-such-label"] = "x"  # fits no node
        await cluster.request("POST", f"/api/v1/namespaces/{ns}/pods", body)

        async def admitted() -> bool:
            return await phase_of(cluster, "admitted") == "Inqueue"

        await eventually(admitted, 30, "replica-a admits the PodGroup", a.log)
        for name in ("fill-0", "fill-1"):
            await cluster.pod(name, {"cpu": "1"}, scheduler=pair.name)

        async def full() -> bool:
            pods = await cluster.pods()
            return all(node_of(pods[n]) for n in ("fill-0", "fill-1"))

        await eventually(full, 30, "replica-a fills the quota", a.log)
        a.kill()
        await eventually(lambda: pair.held_by("replica-b"), 30, "replica-b takes the Lease", b.log)
        took = time.monotonic()
        while time.monotonic() - took < 6:  # B's enqueue passes, status syncs and event flushes meanwhile
            assert await phase_of(cluster, "admitted") == "Inqueue", b.log()
            await asyncio.sleep(0.5)
        log = b.log(400)

    listing = await cluster.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")
    refused: list[dict[str, Any]] = [
        e
        for e in listing.get("items") or []
        if (e.get("regarding") or {}).get("name") == "admitted"
        and e.get("reason") == INSUFFICIENT_ELASTIC_QUOTA
    ]
    assert not refused, refused
    assert f"adopted as Inqueue ({ns}/admitted)" in log, log
