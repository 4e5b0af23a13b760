"""Poisoned objects (issue 24; design.md Semantics 17): a Queue and a PodGroup carrying a 5,000-digit
amount, written while no webhook checks them, on the real kube-apiserver. Before issue 24 the
scheduler's replay raised ``ValueError`` (Python's 4,300-digit limit) at every start: every replica
crash-looped. Now it starts, keeps scheduling everything else, and emits a Warning on those objects;
a restart does the same. Everything is asserted from the API (bindings, Events) and the process."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.cluster_fixtures import GPU_NODE, Cluster, SchedulerFactory, eventually, node_of
from tests.testing.builders import MakePodGroup, MakeQueue
from tests.testing.config import BASE_TIER

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
run_scheduler = fixtures.run_scheduler

HUGE = "1" + "0" * 5000
CONFIG = BASE_TIER + "  - name: capacity-card\n    arguments: {cardUnlimitedCpuMemory: true}\n"
QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"


def podgroups(namespace: str) -> str:
    return f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{namespace}/podgroups"


async def warnings(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    """The InvalidAnnotation Warnings on ``name`` (a cluster-scoped object's are in ``default``)."""
    listing = await cluster.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    return [
        e
        for e in listing.get("items") or []
        if (e.get("regarding") or {}).get("name") == name and e.get("reason") == "InvalidAnnotation"
    ]


async def test_poisoned_queue_and_podgroup_cost_only_themselves_across_a_restart(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    name = f"gpuq-{cluster.test_id}"
    poisoned_queue, queue = f"poison-{cluster.test_id}", f"q-{cluster.test_id}"
    await cluster.node("a100", GPU_NODE, labels={"nvidia.com/gpu.product": "NVIDIA-A100"})
    poison = f'{{"NVIDIA-A100": {HUGE}}}'
    await cluster.create(MakeQueue(poisoned_queue).card_quota(poison).weight(1).obj(), QUEUES)
    await cluster.create(MakeQueue(queue).card_quota('{"NVIDIA-A100": 4}').weight(1).obj(), QUEUES)
    group = MakePodGroup("poisoned", cluster.namespace).queue(queue).min_member(1).card_request(poison)
    await cluster.create(group.obj(), podgroups(cluster.namespace))
    card = {"cpu": "1", "nvidia.com/gpu": "1"}

    async def card_pod(pod: str, annotations: dict[str, str]) -> None:
        await cluster.pod(pod, card, limits={"nvidia.com/gpu": "1"}, annotations=annotations, scheduler=name)

    await card_pod("healthy", {"scheduling.volcano.sh/queue-name": queue})
    await card_pod("of-the-group", {"scheduling.k8s.io/group-name": "poisoned"})
    await card_pod("of-the-queue", {"scheduling.volcano.sh/queue-name": poisoned_queue})

    async def bound(*pods: str) -> dict[str, str] | None:
        placed = {n: node_of(p) for n, p in (await cluster.pods()).items() if node_of(p)}
        return placed if set(pods) <= set(placed) else None

    async def warned(namespace: str, obj: str, instances: int) -> list[dict[str, Any]] | None:
        found = await warnings(cluster, namespace, obj)
        return found if len({e.get("reportingInstance") for e in found}) >= instances else None

    for run, new_pod in ((1, "after-start"), (2, "after-restart")):
        scheduler = run_scheduler(name, CONFIG)
        await scheduler.wait_ready()  # before issue 24: the replay raised and the process exited
        await card_pod(new_pod, {"scheduling.volcano.sh/queue-name": queue})
        # Everything else is scheduled: the healthy pods, and the group's pod (its card.request read
        # as 0, Semantics 3, so the group is enqueued; the pod's own card meets the queue's quota).
        await eventually(partial(bound, "healthy", "of-the-group", new_pod), 30, "bound", scheduler.log)
        for namespace, obj, field in (
            ("default", poisoned_queue, "volcano.sh/card.quota"),
            (cluster.namespace, "poisoned", "volcano.sh/card.request"),
        ):
            found = await eventually(
                partial(warned, namespace, obj, run), 30, f"Warning on {obj}", scheduler.log
            )
            note = str(found[-1].get("note"))
            assert found[-1]["type"] == "Warning" and field in note, note
            assert f"... ({len(poison)} characters)" in note, note  # quoted bounded
            assert len(note) <= 1024, len(note)
        # The poisoned queue's card quota is 0: its pod waits, with the reason.
        pods = await cluster.pods()
        assert not node_of(pods["of-the-queue"])
        assert scheduler.running, scheduler.log()
        assert "Traceback" not in scheduler.log(400), scheduler.log(400)
        if run == 1:
            scheduler.kill()  # a restart: the replay of everything listed, poisoned objects included
        else:
            assert scheduler.terminate() == 0, scheduler.log()
