"""Volcano's chart configurations on the real control plane (issue 27; design.md Semantics 15):
``gpuq scheduler`` started with Volcano master's chart file, with the variant that lists reserve and
reservation, and with that variant inside Volcano's ConfigMap, reaches readiness and binds a pod; and
the reserve action's lock, seen from the API: a starving pod gets nodes locked for it, other pods are
kept off them (their PodScheduled condition says why), and the room a leaving pod frees goes to it."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.cluster_fixtures import Cluster, SchedulerFactory, eventually, node_of, pending_message
from tests.testing.paths import REPO_ROOT

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
run_scheduler = fixtures.run_scheduler

CONFIGS = REPO_ROOT / "examples" / "configs"
CHART = (CONFIGS / "volcano-chart.conf").read_text()
CHART_RESERVE = (CONFIGS / "volcano-chart-reserve.conf").read_text()
CONFIG_MAP = yaml.safe_dump(
    {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"},
        "data": {"volcano-scheduler.conf": CHART_RESERVE},
    }
)
NODE = {"cpu": "4", "memory": "16Gi", "pods": "110"}


async def test_the_charts_configurations_start_the_scheduler_and_bind(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    await cluster.node("n", NODE)
    for i, config in enumerate((CHART, CHART_RESERVE, CONFIG_MAP)):
        name = f"gpuq-{cluster.test_id}-{i}"
        scheduler = run_scheduler(name, config)
        await scheduler.wait_ready()
        await cluster.pod(f"p{i}", {"cpu": "100m"}, scheduler=name)

        async def placed(pod: str = f"p{i}") -> str:
            return node_of((await cluster.pods()).get(pod, {}))

        assert await eventually(placed, 30, f"p{i} bound", scheduler.log) == f"{cluster.test_id}-n"
        if config is CONFIG_MAP:
            note = "is a ConfigMap: read ConfigMap/volcano-system/volcano-scheduler-configmap"
            assert note in scheduler.log()
        assert scheduler.terminate() == 0, scheduler.log()


async def test_the_reserve_action_locks_nodes_for_the_starving_pod(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    name = f"gpuq-{cluster.test_id}"
    ns = cluster.namespace
    a, b = await cluster.node("a", NODE), await cluster.node("b", NODE)
    for node in (a, b):  # 3 of each node's 4 cpu held by a pod bound at creation
        body = cluster.pod_body(f"filler-{node[-1]}", {"cpu": "3"}, scheduler=name)
        body["spec"]["nodeName"] = node
        await cluster.create(body, f"/api/v1/namespaces/{ns}/pods")
    scheduler = run_scheduler(name, CHART_RESERVE)
    await scheduler.wait_ready()
    await cluster.pod("big", {"cpu": "4"}, scheduler=name)
    refused = await eventually(
        lambda: pending_message(cluster, "big", "Insufficient cpu"), 30, "big refused", scheduler.log
    )
    assert "2 Insufficient cpu" in refused
    await asyncio.sleep(2.5)  # two reserve steps (one a second): both nodes locked for big
    await cluster.pod("small", {"cpu": "1"}, scheduler=name)
    locked = f"2 node(s) locked for the target job Pod/{ns}/big (reservation)"
    await eventually(lambda: pending_message(cluster, "small", locked), 30, "small kept out", scheduler.log)
    # b's filler leaves: the room goes to big, and the lock is released once big is bound.
    await cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/filler-b", {"gracePeriodSeconds": 0})

    async def where(pod: str) -> str:
        return node_of((await cluster.pods()).get(pod, {}))

    assert await eventually(lambda: where("big"), 30, "big bound", scheduler.log) == b
    assert await eventually(lambda: where("small"), 30, "small bound after the release", scheduler.log) == a
