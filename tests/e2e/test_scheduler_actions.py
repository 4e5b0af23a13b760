"""Volcano's actions on the real control plane, one test per action (design.md Semantics 15):
``gpuq scheduler`` as a subprocess with a Volcano-format configuration, asserting what the API shows.

Preempt and reclaim evict through the API with the victim's UID as a precondition. Their tests prove
it with a fault: the scheduler's requests pass a loopback proxy whose client-to-server direction is
held shut while the scheduler decides on a victim; the test then replaces the victim by a pod of
the same name (a new UID) and opens the proxy. The scheduler's DELETE, carrying the old UID, is
refused (the apiserver's "Precondition failed"), and the new pod survives it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e import cluster_fixtures as fixtures
from tests.e2e import proxy as proxy_fixtures
from tests.e2e.cluster_fixtures import Cluster, SchedulerFactory, eventually, metric_value, node_of
from tests.e2e.proxy import ApiProxy, Fault, is_lease, is_write
from tests.testing.builders import MakePodGroup, MakePriorityClass, MakeQueue
from tests.testing.designs import designs_configurations

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
proxy = proxy_fixtures.proxy
run_scheduler = fixtures.run_scheduler

GROUP_NAME = "scheduling.k8s.io/group-name"
QUEUE_NAME = "scheduling.volcano.sh/queue-name"
PREEMPTABLE = "volcano.sh/preemptable"
QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


async def bound(cluster: Cluster, names: set[str]) -> dict[str, str] | None:
    pods = await cluster.pods()
    nodes = {name: node_of(pods[name]) for name in names if name in pods}
    return nodes if all(nodes.get(n) for n in names) else None


async def bound_names(cluster: Cluster) -> set[str]:
    return {name for name, pod in (await cluster.pods()).items() if node_of(pod)}


async def queue(cluster: Cluster, suffix: str, **capability: str) -> str:
    name = f"{cluster.test_id}-{suffix}"
    made = MakeQueue(name).weight(1)
    if capability:
        made.capability(**capability)
    await cluster.create(made.obj(), QUEUES)
    return name


async def test_the_designs_configurations_start_gpuq_scheduler(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    """The configuration blocks of capacity-card.md and resource-strategy-fit.md and Volcano's default
    file (tests/testing/designs.py) start ``gpuq scheduler``: ready, and a clean stop."""
    for i, config in enumerate(designs_configurations()):
        scheduler = run_scheduler(f"gpuq-{cluster.test_id}-{i}", config)
        await scheduler.wait_ready()
        assert scheduler.terminate() == 0, scheduler.log()


# -- enqueue ----------------------------------------------------------------------------------------


async def test_enqueue_admits_only_podgroups_within_the_queue(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    """enqueue with proportion: a PodGroup whose minResources fit the queue's capability goes Inqueue
    (then Running); one asking more than the capability stays Pending and its pod is never placed."""
    name = f"gpuq-{cluster.test_id}"
    config = """\
actions: "enqueue, allocate"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
  - name: proportion
"""
    await cluster.node("n", {"cpu": "8", "memory": "16Gi", "pods": "110"})
    q = await queue(cluster, "q", cpu="2")
    ns = cluster.namespace
    groups = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups"
    for pg, cpu in (("small", "1"), ("big", "4")):
        made = MakePodGroup(pg, ns).queue(q).min_member(1).min_resources(cpu=cpu)
        await cluster.create(made.obj(), groups)
        await cluster.pod(f"{pg}-0", {"cpu": cpu}, scheduler=name, annotations={GROUP_NAME: pg})
    scheduler = run_scheduler(name, config)
    await scheduler.wait_ready()

    async def running(pg: str) -> bool:
        status = (await cluster.get(f"{groups}/{pg}")).get("status") or {}
        return status.get("phase") == "Running"

    await eventually(lambda: running("small"), 30, "PodGroup small Running", scheduler.log)
    assert await bound_names(cluster) == {"small-0"}
    big = (await cluster.get(f"{groups}/big")).get("status") or {}
    assert big.get("phase") not in ("Inqueue", "Running"), big
    assert scheduler.terminate() == 0, scheduler.log()


# -- allocate ---------------------------------------------------------------------------------------


async def test_allocate_serves_the_queue_with_the_lower_share(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    """allocate with proportion's queue order (Volcano's TestAllocate "two Jobs on one node"): two
    queues of equal weight share a 2-cpu node; each gets one of its two pods."""
    name = f"gpuq-{cluster.test_id}"
    config = """\
actions: "enqueue, allocate"
tiers:
- plugins:
  - name: priority
  - name: proportion
- plugins:
  - name: predicates
"""
    await cluster.node("n", {"cpu": "2", "memory": "16Gi", "pods": "110"})
    qa, qb = await queue(cluster, "a"), await queue(cluster, "b")
    for q, prefix in ((qa, "a"), (qb, "b")):
        for i in (1, 2):
            await cluster.pod(f"{prefix}-{i}", {"cpu": "1"}, scheduler=name, annotations={QUEUE_NAME: q})
    scheduler = run_scheduler(name, config)
    await scheduler.wait_ready()

    async def two_bound() -> set[str] | None:
        names = await bound_names(cluster)
        return names if len(names) == 2 else None

    placed = await eventually(two_bound, 30, "two pods bound", scheduler.log)
    assert {n[0] for n in placed} == {"a", "b"}, placed
    assert scheduler.terminate() == 0, scheduler.log()


# -- backfill ---------------------------------------------------------------------------------------


async def test_backfill_places_pods_without_requests_after_the_others(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    """backfill: a node with room for one pod; the pod without requests has the higher priority but
    is only tried after the pod with requests, which gets the room."""
    name = f"gpuq-{cluster.test_id}"
    config = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
- plugins:
  - name: predicates
"""
    high = f"{cluster.test_id}-high"
    await cluster.create(MakePriorityClass(high, 1000).obj(), PRIORITY_CLASSES)
    await cluster.node("n", {"cpu": "8", "memory": "16Gi", "pods": "1"})
    await cluster.pod("besteffort", {}, scheduler=name, priority_class=high)
    await cluster.pod("requests", {"cpu": "1"}, scheduler=name)
    scheduler = run_scheduler(name, config)
    await scheduler.wait_ready()
    await eventually(lambda: bound(cluster, {"requests"}), 30, "the pod with requests bound", scheduler.log)

    async def besteffort_tried() -> bool:
        pod = (await cluster.pods())["besteffort"]
        conditions = (pod.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions)

    await eventually(besteffort_tried, 30, "the pod without requests tried and pending", scheduler.log)
    assert await bound_names(cluster) == {"requests"}
    assert scheduler.terminate() == 0, scheduler.log()


# -- preempt and reclaim, with the UID precondition ---------------------------------------------------


class Gate:
    """Holds the scheduler's writes (all but its Lease's, so it stays leader) in the proxy while shut:
    an eviction decided meanwhile reaches the apiserver only once the gate opens."""

    def __init__(self, proxy: ApiProxy) -> None:
        self.proxy = proxy
        self.fault: Fault | None = None

    def shut(self) -> None:
        self.fault = self.proxy.hold(lambda x: is_write(x) and not is_lease(x))

    def open(self) -> None:
        if self.fault is not None:
            self.fault.clear()


@pytest_asyncio.fixture
async def gated(proxy: ApiProxy, tmp_path: Path) -> AsyncIterator[tuple[Gate, Path]]:
    gate = Gate(proxy)
    yield gate, proxy.kubeconfig(tmp_path / "gated-kubeconfig")
    gate.open()


def _running(
    cluster: Cluster, name: str, node: str, scheduler: str, cpu: str, **annotations: str
) -> dict[str, Any]:
    body = cluster.pod_body(name, {"cpu": cpu}, scheduler=scheduler, annotations=annotations or None)
    body["spec"]["nodeName"] = node
    return body


async def _evicts_with_uid_precondition(
    cluster: Cluster,
    gated: tuple[Gate, Path],
    tmp_path: Path,
    config: str,
    *,
    running: list[dict[str, Any]],
    victim: str,
    preemptor: dict[str, Any],
) -> None:
    """Start the scheduler through the gated proxy, shut the gate, create ``preemptor``; once its
    attempt failed (and the eviction of ``victim`` was submitted), replace ``victim`` by a pod of the
    same name and a new UID, open the gate, and see the scheduler's DELETE refused by UID."""
    gate, kubeconfig = gated
    name = preemptor["spec"]["schedulerName"]
    ns = cluster.namespace
    for body in running:
        await cluster.request("POST", f"/api/v1/namespaces/{ns}/pods", body)
    started: list[fixtures.SchedulerProcess] = []
    scheduler = fixtures.scheduler_starter(kubeconfig, tmp_path, started)(name, config)
    try:
        await scheduler.wait_ready(60)
        gate.shut()
        await cluster.request("POST", f"/api/v1/namespaces/{ns}/pods", preemptor)

        async def attempt_failed() -> bool:
            text = await asyncio.to_thread(scheduler.metrics)
            return (
                metric_value(text, "gpuq_scheduler_schedule_attempts_total", {"result": "unschedulable"}) or 0
            ) >= 1

        await eventually(
            attempt_failed, 60, "the preemptor's attempt (and the eviction it submits)", scheduler.log
        )
        old = (await cluster.pods())[victim]
        delete = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        await cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{victim}", delete)

        async def gone() -> bool:
            return victim not in await cluster.pods()

        await eventually(gone, 30, f"{victim} deleted by the test")
        node = node_of(old)
        replacement = _running(
            cluster, victim, node, name, old["spec"]["containers"][0]["resources"]["requests"]["cpu"]
        )
        replacement["metadata"]["annotations"] = {
            **old["metadata"].get("annotations", {}),
            PREEMPTABLE: "false",
        }
        created = await cluster.request("POST", f"/api/v1/namespaces/{ns}/pods", replacement)
        new_uid = created.body["metadata"]["uid"]
        assert new_uid != old["metadata"]["uid"]
        gate.open()

        async def refused() -> bool:
            lines = scheduler.log(400).splitlines()
            return any(
                f"preempting Pod/{ns}/{victim} failed" in line and "recondition" in line for line in lines
            )

        await eventually(refused, 60, "the scheduler's DELETE refused by its UID precondition", scheduler.log)
        pods = await cluster.pods()
        assert pods[victim]["metadata"]["uid"] == new_uid
        assert "Traceback" not in scheduler.log(2000)
    finally:
        gate.open()
        code = scheduler.terminate()
    assert code == 0, scheduler.log()


async def test_preempt_evicts_a_lower_priority_pod_of_the_queue_by_uid(
    cluster: Cluster, gated: tuple[Gate, Path], tmp_path: Path
) -> None:
    """preempt (priority, gang, conformance): a higher-priority pod takes the room of a lower-priority
    pod of its queue; the eviction is a DELETE with the victim's UID as precondition."""
    name = f"gpuq-{cluster.test_id}"
    config = """\
actions: "enqueue, allocate, preempt"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: predicates
"""
    low, high = f"{cluster.test_id}-low", f"{cluster.test_id}-high"
    await cluster.create(MakePriorityClass(low, 10).obj(), PRIORITY_CLASSES)
    await cluster.create(MakePriorityClass(high, 1000).obj(), PRIORITY_CLASSES)
    node = await cluster.node("n", {"cpu": "2", "memory": "16Gi", "pods": "110"})
    victim = _running(cluster, "victim", node, name, "2")
    victim["spec"]["priorityClassName"] = low
    preemptor = cluster.pod_body("preemptor", {"cpu": "2"}, scheduler=name, priority_class=high)
    await _evicts_with_uid_precondition(
        cluster, gated, tmp_path, config, running=[victim], victim="victim", preemptor=preemptor
    )


async def test_reclaim_takes_back_from_a_queue_above_its_share_by_uid(
    cluster: Cluster, gated: tuple[Gate, Path], tmp_path: Path
) -> None:
    """reclaim (gang, conformance, proportion): queue a holds the whole node, queue b deserves half;
    b's pod takes one of a's pods back, a DELETE with the victim's UID as precondition."""
    name = f"gpuq-{cluster.test_id}"
    config = """\
actions: "enqueue, allocate, reclaim"
tiers:
- plugins:
  - name: gang
  - name: conformance
  - name: proportion
- plugins:
  - name: predicates
"""
    node = await cluster.node("n", {"cpu": "2", "memory": "16Gi", "pods": "110"})
    qa, qb = await queue(cluster, "a"), await queue(cluster, "b")
    running = [
        _running(cluster, "keep", node, name, "1", **{QUEUE_NAME: qa, PREEMPTABLE: "false"}),
        _running(cluster, "victim", node, name, "1", **{QUEUE_NAME: qa}),
    ]
    reclaimer = cluster.pod_body("reclaimer", {"cpu": "1"}, scheduler=name, annotations={QUEUE_NAME: qb})
    await _evicts_with_uid_precondition(
        cluster, gated, tmp_path, config, running=running, victim="victim", preemptor=reclaimer
    )
