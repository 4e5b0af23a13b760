"""Tensor-fusion pods share one GPU, on the real control plane (design.md Semantics 19).

A 1-GPU node of 100 TFLOPS; three pods each asking 50 TFLOPS by tensor-fusion's annotations and no
GPU resource. Two are bound with ``tensor-fusion.ai/gpu-ids`` naming the node's ``gpu-0`` (written in
PreBind, before the binding); the third stays pending with the device's reason; the GPUResourceQuota's
``status.used`` equals what the bound pods' shares add up to, recounted from the API; a restarted
scheduler rebuilds the shares from the pods' annotation. Runs on the admin
kubeconfig and on the gpuq-scheduler ServiceAccount (the chart's RBAC must let it patch pods).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuq_k8s.common.model.quantity import parse_quantity
from tests.e2e import cluster_fixtures as fixtures
from tests.e2e import rbac_fixtures
from tests.e2e.cluster_fixtures import Cluster, SchedulerFactory, eventually, node_of, pending_message
from tests.testing.builders import MakeGPUResourceQuota
from tests.testing.config import BASE_TIER

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
run_scheduler = rbac_fixtures.run_scheduler_as_admin_and_service_account
installed_rbac = rbac_fixtures.installed_rbac
service_account_kubeconfigs = rbac_fixtures.service_account_kubeconfigs

GPU_IDS = "tensor-fusion.ai/gpu-ids"
ONE_GPU = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "1"}
LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.memory": "81920",
    "nvidia.com/gpu.tflops": "100",
}
SHARE = {"tensor-fusion.ai/tflops-request": "50", "tensor-fusion.ai/vram-request": "10Gi"}


async def test_two_50_tflops_pods_share_the_one_gpu_and_the_quota_counts_their_shares(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    name = f"gpuq-{cluster.test_id}"
    ns = cluster.namespace
    node = await cluster.node("a100", ONE_GPU, labels=LABELS)
    quota = MakeGPUResourceQuota("gq", ns).total(requests={"tflops": "1000", "vram": "100Gi"}, maxWorkers=10)
    await cluster.create(quota.obj(), f"/apis/tensor-fusion.ai/v1/namespaces/{ns}/gpuresourcequotas")
    for i in range(3):
        await cluster.pod(f"w-{i}", {"cpu": "1"}, annotations=SHARE, scheduler=name)
    scheduler = run_scheduler(name, BASE_TIER + "  - name: gpu-quota\n")
    await scheduler.wait_ready()

    async def two_bound() -> dict[str, dict[str, Any]] | None:
        bound = {n: p for n, p in (await cluster.pods()).items() if node_of(p)}
        return bound if len(bound) == 2 else None

    bound = await eventually(two_bound, 30, "two pods bound", scheduler.log)
    for pod in bound.values():
        assert node_of(pod) == node
        assert pod["metadata"]["annotations"][GPU_IDS] == f"{node}-gpu-0", pod["metadata"]
    (refused,) = {"w-0", "w-1", "w-2"} - set(bound)
    message = await eventually(
        lambda: pending_message(cluster, refused, "TFLOPS left"), 30, "the third pod refused", scheduler.log
    )
    assert f"gpu-0 on {node}: 0 TFLOPS left, 50 asked" in message, message
    pods = await cluster.pods()
    assert GPU_IDS not in (pods[refused]["metadata"].get("annotations") or {})

    # The quota's usage, recounted from the API: the bound pods' shares.
    shares = [p["metadata"]["annotations"] for p in bound.values()]
    tflops = sum(parse_quantity(a["tensor-fusion.ai/tflops-request"]) for a in shares)
    vram = sum(parse_quantity(a["tensor-fusion.ai/vram-request"]) for a in shares)

    async def used() -> dict[str, Any] | None:
        obj = await cluster.get(f"/apis/tensor-fusion.ai/v1/namespaces/{ns}/gpuresourcequotas/gq")
        found = (obj.get("status") or {}).get("used") or {}
        return found if found.get("workers") == len(bound) else None

    written = await eventually(used, 30, "GPUResourceQuota status.used", scheduler.log)
    assert parse_quantity(written["requests"]["tflops"]) == tflops == 100
    assert parse_quantity(written["requests"]["vram"]) == vram == 20 * 2**30
    assert scheduler.terminate() == 0, scheduler.log()

    # A new scheduler rebuilds the shares from the pods' gpu-ids: one bound pod leaves and a fourth
    # comes; of the two waiting, exactly one gets the 50 TFLOPS freed on gpu-0.
    gone = sorted(bound)[0]
    await cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{gone}?gracePeriodSeconds=0")
    await cluster.pod("w-3", {"cpu": "1"}, annotations=SHARE, scheduler=name)
    restarted = run_scheduler(name, BASE_TIER + "  - name: gpu-quota\n")
    await restarted.wait_ready()

    async def refilled() -> dict[str, dict[str, Any]] | None:
        pods = await cluster.pods()
        if gone in pods:
            return None
        now = {n: p for n, p in pods.items() if node_of(p)}
        return now if len(now) == 2 and set(now) != set(bound) - {gone} else None

    after = await eventually(refilled, 30, "the freed share taken again", restarted.log)
    assert all(p["metadata"]["annotations"][GPU_IDS] == f"{node}-gpu-0" for p in after.values())
    (waiting,) = {"w-2", "w-3"} - set(after)
    message = await eventually(
        lambda: pending_message(cluster, waiting, "TFLOPS left"), 30, "the other still refused", restarted.log
    )
    assert f"gpu-0 on {node}: 0 TFLOPS left, 50 asked" in message, message
    assert restarted.terminate() == 0, restarted.log()
