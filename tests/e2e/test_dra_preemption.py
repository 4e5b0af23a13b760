"""Preemption and DRA devices on the real control plane (design.md "Quota over devices",
"Preemption"): as kube-scheduler 1.36, a pod whose DRA devices are free on a node but whose cpu is not
preempts there for the cpu (an extended resource a DeviceClass serves is no node room there), and a
pod whose devices are all held by lower-priority pods evicts nobody (DynamicResources' rejection is
UnschedulableAndUnresolvable: their removal would not free the devices before kube-controller-manager
clears their claims). The unit cases: tests/unit/scheduler/actions/test_dra_preemption.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.cluster_fixtures import Cluster, SchedulerFactory, eventually, node_of, pending_message
from tests.e2e.controlplane.harness import ControlPlane
from tests.testing import dra
from tests.testing.builders import MakePriorityClass

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
run_scheduler = fixtures.run_scheduler

DRA = "/apis/resource.k8s.io/v1"
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


@pytest.mark.parametrize("scheduler_kind", ["kube-scheduler", "gpuq"])
async def test_an_extended_resource_pod_preempts_for_cpu_never_for_held_devices(
    cluster: Cluster, control_plane: ControlPlane, run_scheduler: SchedulerFactory, scheduler_kind: str
) -> None:
    """The same scenario through kube-scheduler 1.36 (the reference) and gpuq: the same outcome."""
    name = f"{scheduler_kind}-{cluster.test_id}"
    driver = f"{cluster.test_id}.gpu.example.com"
    gpu = f"{cluster.test_id}.example.com/gpu"
    low, high = f"{cluster.test_id}-low", f"{cluster.test_id}-high"
    await cluster.create(MakePriorityClass(low, 10).obj(), PRIORITY_CLASSES)
    await cluster.create(MakePriorityClass(high, 1000).obj(), PRIORITY_CLASSES)
    node = await cluster.node("a", {"cpu": "2", "memory": "16Gi", "pods": "110"})
    await cluster.create(dra.device_class(name, driver, extended_resource_name=gpu), f"{DRA}/deviceclasses")
    gpus = [dra.device(f"gpu-{i}") for i in range(2)]
    await cluster.create(dra.resource_slice(f"{node}-gpus", node, gpus, driver), f"{DRA}/resourceslices")

    def pod(pod_name: str, cpu: str, priority: str, devices: int) -> dict[str, Any]:
        asked = {"cpu": cpu, **({gpu: str(devices)} if devices else {})}
        limits = {gpu: str(devices)} if devices else None  # an extended resource's limit is its request
        return cluster.pod_body(pod_name, asked, scheduler=name, limits=limits, priority_class=priority)

    scheduler = run_scheduler(name) if scheduler_kind == "gpuq" else None
    stop_kube = control_plane.start_kube_scheduler(name) if scheduler is None else None
    kube_log = control_plane.workdir / f"kube-scheduler-{name}.log"
    log = scheduler.log if scheduler is not None else (lambda: kube_log.read_text(errors="replace")[-4000:])
    try:
        if scheduler is not None:
            await scheduler.wait_ready()
        await _scenario(cluster, node, pod, log)
    finally:
        if stop_kube is not None:
            stop_kube()
    if scheduler is not None:
        assert scheduler.terminate() == 0, scheduler.log()


async def _scenario(
    cluster: Cluster,
    node: str,
    pod: Callable[[str, str, str, int], dict[str, Any]],
    log: Callable[[], str],
) -> None:
    """Two lower-priority pods hold one of node's two GPUs and the cpu; a first preemptor is given the
    other GPU by evicting the cpu holder only; a second, for which no GPU is left, evicts nobody."""
    low, high = f"{cluster.test_id}-low", f"{cluster.test_id}-high"

    async def create(body: dict[str, Any]) -> None:
        await cluster.request("POST", f"/api/v1/namespaces/{cluster.namespace}/pods", body)

    async def bound(*names: str) -> dict[str, dict[str, Any]] | None:
        pods = await cluster.pods()
        found = {n: pods[n] for n in names if node_of(pods.get(n) or {})}
        return found if len(found) == len(names) else None

    # A lower-priority pod holds one GPU, another all of the cpu the first leaves.
    await create(pod("holder", "100m", low, 1))
    await eventually(lambda: bound("holder"), 60, "the holder bound", log)
    await create(pod("hog", "1900m", low, 0))
    await eventually(lambda: bound("holder", "hog"), 60, "the hog bound", log)

    # The second GPU is free, the cpu is not: the hog is evicted, never the holder (its 100m of cpu
    # alone would not make room for 200m; its device, held, is no room in the dry run).
    await create(pod("first", "200m", high, 1))
    placed = await eventually(lambda: bound("holder", "first"), 60, "the preemptor bound", log)
    pods = await cluster.pods()
    assert "hog" not in pods, pods.get("hog")
    assert node_of(placed["first"]) == node

    # Both GPUs held (the holder's and the first preemptor's); the cpu is free: nobody is evicted.
    await create(pod("second", "100m", high, 1))
    message = await eventually(
        lambda: pending_message(cluster, "second", "cannot allocate all claims"), 30, "second pending", log
    )
    assert "1 cannot allocate all claims" in message, message
    pods = await cluster.pods()
    assert node_of(pods["holder"]) == node and "deletionTimestamp" not in pods["holder"]["metadata"]
    assert not (pods["second"].get("status") or {}).get("nominatedNodeName"), pods["second"]["status"]
