"""``gpuq scheduler`` as a subprocess against the real control plane, one test per feature.

Each test creates nodes and pods, runs the scheduler under its own name, and asserts what a user
would see in the API: bindings (``spec.nodeName``), the PodScheduled=False message of pending pods,
Events, and the status the scheduler writes on the quota objects. Each runs twice (the fixture's
parameter): the scheduler on the admin kubeconfig, and on the gpuq-scheduler ServiceAccount's token with
leader election on its Lease in gpuq-system, as the Deployment runs it (tests/e2e/rbac_fixtures.py).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import pytest

from gpuq_k8s.common.kube.status import MERGE_PATCH
from tests.e2e import cluster_fixtures as fixtures
from tests.e2e import rbac_fixtures
from tests.e2e.cluster_fixtures import (
    GPU_NODE,
    Cluster,
    SchedulerFactory,
    eventually,
    node_of,
    pending_message,
    scheduled_condition,
)
from tests.testing.builders import (
    MakeElasticQuota,
    MakeGPUResourceQuota,
    MakePodDisruptionBudget,
    MakePodGroup,
    MakePriorityClass,
    MakeQueue,
)
from tests.testing.config import BASE_TIER

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
# Every scenario runs twice: on the admin kubeconfig, and on the gpuq-scheduler ServiceAccount's token
# with what deploy/'s RBAC grants.
run_scheduler = rbac_fixtures.run_scheduler_as_admin_and_service_account
installed_rbac = rbac_fixtures.installed_rbac  # what the service-account runs ask for
service_account_kubeconfigs = rbac_fixtures.service_account_kubeconfigs

A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920"}


async def bound_pods(cluster: Cluster, names: set[str]) -> dict[str, str] | None:
    pods = await cluster.pods()
    nodes = {name: node_of(pods[name]) for name in names if name in pods}
    return nodes if all(nodes.get(n) for n in names) else None


async def events_for(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    listing = await cluster.get(f"/apis/events.k8s.io/v1/namespaces/{cluster.namespace}/events")
    return [e for e in listing.get("items") or [] if (e.get("regarding") or {}).get("name") == name]


async def test_crossquota_limits_cpu_pods_on_a_gpu_node(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    """crossquota.md "Predicate Function": CPU-only pods on a GPU node share quota.cpu (here 4 cores);
    a GPU pod is not limited by it. The third 2-core CPU pod stays pending with the plugin's reason,
    written as kube-scheduler writes it (PodScheduled=False, Unschedulable) and as one aggregated Event."""
    name = f"gpuq-{cluster.test_id}"
    config = BASE_TIER + (
        "  - name: crossquota\n"
        "    arguments:\n"
        '      {gpu-resource-names: "nvidia.com/gpu", quota-resources: "cpu,memory", quota.cpu: "4"}\n'
    )
    node = await cluster.node("gpu", GPU_NODE, labels=A100)
    for i in (1, 2, 3):
        await cluster.pod(f"cpu-{i}", {"cpu": "2"}, scheduler=name)
    await cluster.pod(
        "gpu-1", {"cpu": "8", "nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"}, scheduler=name
    )
    scheduler = run_scheduler(name, config)
    await scheduler.wait_ready()

    placed = await eventually(
        lambda: bound_pods(cluster, {"cpu-1", "cpu-2", "gpu-1"}),
        30,
        "two CPU pods and the GPU pod bound",
        scheduler.log,
    )
    assert set(placed.values()) == {node}
    message = await eventually(
        lambda: pending_message(cluster, "cpu-3", "cpu quota exceeded"),
        30,
        "cpu-3 PodScheduled=False",
        scheduler.log,
    )
    # The predicate's numbers (crossquota.md "Predicate Function"): 4 of the node's 4 cores used.
    assert message == "0/1 nodes are available: 1 cpu quota exceeded: required=2 used=4 quota=4."
    pods = await cluster.pods()
    assert node_of(pods["cpu-3"]) == ""
    assert (scheduled_condition(pods["cpu-3"]) or {}).get("reason") == "Unschedulable"

    async def failed_event() -> list[dict[str, Any]] | None:
        found = [e for e in await events_for(cluster, "cpu-3") if e.get("reason") == "FailedScheduling"]
        return found or None

    events = await eventually(failed_event, 30, "a FailedScheduling event for cpu-3", scheduler.log)
    assert len(events) == 1, events  # aggregated: one Event however often the pod was retried
    assert events[0]["note"] == message
    assert events[0]["reportingController"] == name
    scheduled = [e for e in await events_for(cluster, "cpu-1") if e.get("reason") == "Scheduled"]
    assert scheduled and scheduled[0]["note"] == f"Successfully assigned {cluster.namespace}/cpu-1 to {node}"

    # Freeing quota wakes the pending pod: delete a bound CPU pod, cpu-3 takes its place.
    await cluster.request("DELETE", f"/api/v1/namespaces/{cluster.namespace}/pods/cpu-1")
    placed = await eventually(
        lambda: bound_pods(cluster, {"cpu-3"}), 30, "cpu-3 bound after cpu-1 left", scheduler.log
    )
    assert placed["cpu-3"] == node
    assert scheduler.terminate() == 0, scheduler.log()


async def test_elastic_quota_borrowing_then_preemption_back_to_min(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    """capacity-scheduling.md (Semantics 4): namespace B borrows A's unused min (used 8 > min 4); when A
    asks for what it is guaranteed (used + request <= min), B's borrowing pods are preempted (deleted,
    Preempted events) until B is back at its min; A's third pod is over its own min and finds no
    victim. status.used of both ElasticQuotas is written by the scheduler."""
    name = f"gpuq-{cluster.test_id}"
    config = BASE_TIER + "  - name: capacity-scheduling\n"
    node = await cluster.node("n", {"cpu": "8", "memory": "64Gi", "pods": "110"})
    ns_a = cluster.namespace
    ns_b = await cluster.extra_namespace("b")
    for ns in (ns_a, ns_b):
        path = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/elasticquotas"
        await cluster.create(MakeElasticQuota("quota", ns).min(cpu="4").max(cpu="8").obj(), path)
    for i in range(4):
        await cluster.pod(f"b-{i}", {"cpu": "2"}, scheduler=name, namespace=ns_b)
    scheduler = run_scheduler(name, config)
    await scheduler.wait_ready()

    async def b_bound() -> bool:
        pods = await cluster.pods(ns_b)
        return len(pods) == 4 and all(node_of(p) == node for p in pods.values())

    await eventually(b_bound, 30, "B borrows: 4 x 2 cpu bound", scheduler.log)

    async def used(ns: str, cpu: str) -> bool:
        quota = await cluster.get(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/elasticquotas/quota")
        return (quota.get("status") or {}).get("used") == {"cpu": cpu}

    await eventually(lambda: used(ns_b, "8"), 30, "B's status.used cpu 8", scheduler.log)

    for i in range(3):
        await cluster.pod(f"a-{i}", {"cpu": "2"}, scheduler=name)
    await eventually(
        lambda: bound_pods(cluster, {"a-0", "a-1"}), 30, "A's guaranteed pods bound", scheduler.log
    )

    async def b_back_at_min() -> dict[str, dict[str, Any]] | None:
        pods = await cluster.pods(ns_b)
        return pods if len(pods) == 2 else None

    survivors = await eventually(b_back_at_min, 30, "B preempted back to min (2 pods)", scheduler.log)
    assert all(node_of(p) == node for p in survivors.values())
    message = await eventually(
        lambda: pending_message(cluster, "a-2", "no eligible victims"), 30, "a-2 pending", scheduler.log
    )
    assert "ElasticQuota min" in message, message
    await eventually(lambda: used(ns_a, "4"), 30, "A's status.used cpu 4", scheduler.log)
    await eventually(lambda: used(ns_b, "4"), 30, "B's status.used cpu 4", scheduler.log)

    async def preempted_events() -> list[dict[str, Any]] | None:
        listing = await cluster.get(f"/apis/events.k8s.io/v1/namespaces/{ns_b}/events")
        found = [e for e in listing.get("items") or [] if e.get("reason") == "Preempted"]
        return found if len(found) == 2 else None

    events = await eventually(preempted_events, 30, "two Preempted events in B", scheduler.log)
    victims = {e["regarding"]["name"] for e in events}
    assert victims.isdisjoint(survivors) and len(victims) == 2
    assert all(e["note"].startswith(f"Preempted by {ns_a}/a-") for e in events)
    assert scheduler.terminate() == 0, scheduler.log()


async def test_preemption_spares_the_pod_a_disruption_budget_protects(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    """design.md "Preemption": two full nodes, each with one lower-priority pod; the one on n1 has the
    lowest priority (kube-scheduler's pickOneNodeForPreemption would evict it), but a
    PodDisruptionBudget allowing no disruption covers it. The budget reaches the scheduler through its
    informer (the service-account run: the chart grants the read), and the preemptor evicts the pod on
    n2 instead."""
    name = f"gpuq-{cluster.test_id}"
    full = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    n1 = await cluster.node("n1", full)
    n2 = await cluster.node("n2", full)
    classes = "/apis/scheduling.k8s.io/v1/priorityclasses"
    for suffix, value in (("lowest", 10), ("low", 100), ("high", 1000)):
        await cluster.create(MakePriorityClass(f"{cluster.test_id}-{suffix}", value).obj(), classes)
    pods = f"/api/v1/namespaces/{cluster.namespace}/pods"
    for pod, node, priority, labels in (("guarded", n1, "lowest", {"app": "web"}), ("plain", n2, "low", {})):
        body = cluster.pod_body(
            pod, {"cpu": "4"}, scheduler=name, priority_class=f"{cluster.test_id}-{priority}"
        )
        body["spec"]["nodeName"] = node
        body["metadata"]["labels"] = labels
        await cluster.request("POST", pods, body)
    budgets = f"/apis/policy/v1/namespaces/{cluster.namespace}/poddisruptionbudgets"
    budget = MakePodDisruptionBudget("web", cluster.namespace).match_labels({"app": "web"}).min_available(1)
    await cluster.request("POST", budgets, budget.obj())
    # The disruption controller's part (no kubelet makes the pod Ready, so it would allow nothing either).
    status = {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
    await cluster.request("PATCH", f"{budgets}/web/status", {"status": status}, MERGE_PATCH)
    scheduler = run_scheduler(name, BASE_TIER)
    await scheduler.wait_ready()
    await cluster.pod("urgent", {"cpu": "4"}, scheduler=name, priority_class=f"{cluster.test_id}-high")
    placed = await eventually(
        lambda: bound_pods(cluster, {"urgent"}), 30, "the preemptor bound", scheduler.log
    )
    assert placed == {"urgent": n2}
    remaining = await cluster.pods()
    assert "plain" not in remaining and node_of(remaining["guarded"]) == n1
    assert scheduler.terminate() == 0, scheduler.log()


async def test_resource_strategy_fit_packs_gpu_pods_and_spreads_cpu_pods(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    """resource-strategy-fit.md: nvidia.com/gpu MostAllocated (weight 2) packs GPU pods on one node;
    cpu LeastAllocated spreads CPU pods evenly. Each pod is scored only on what it requests
    (Semantics 8), so the two strategies do not interfere."""
    name = f"gpuq-{cluster.test_id}"
    config = BASE_TIER + (
        "  - name: resource-strategy-fit\n"
        "    arguments:\n"
        "      resourceStrategyFitWeight: 10\n"
        "      resources:\n"
        "        nvidia.com/gpu: {type: MostAllocated, weight: 2}\n"
        "        cpu: {type: LeastAllocated, weight: 1}\n"
    )
    nodes = {await cluster.node(n, GPU_NODE) for n in ("n1", "n2")}
    for i in range(4):
        await cluster.pod(f"gpu-{i}", {"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"}, scheduler=name)
        await cluster.pod(f"cpu-{i}", {"cpu": "4"}, scheduler=name)
    scheduler = run_scheduler(name, config)
    await scheduler.wait_ready()
    names = {f"{kind}-{i}" for kind in ("gpu", "cpu") for i in range(4)}
    placed = await eventually(lambda: bound_pods(cluster, names), 30, "all 8 pods bound", scheduler.log)
    gpu_nodes = {placed[f"gpu-{i}"] for i in range(4)}
    assert len(gpu_nodes) == 1, placed  # packed
    cpu_counts = sorted([placed[f"cpu-{i}"] for i in range(4)].count(n) for n in nodes)
    assert cpu_counts == [2, 2], placed  # spread
    assert scheduler.terminate() == 0, scheduler.log()


async def test_card_quota_prefers_a100_then_falls_back_to_h100(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    """capacity-card.md "Multi-Card Requests" with Semantics 1: ``A100|H100`` pods of a queue with
    A100=2, H100=1 take the preferred A100 while its quota lasts, then H100; the fourth is refused
    with both quota messages. Queue status.allocated and volcano_queue_card_* report the concrete
    card types."""
    name = f"gpuq-{cluster.test_id}"
    queue = f"q-{cluster.test_id}"
    config = BASE_TIER + (
        "  - name: capacity-card\n    arguments: {cardUnlimitedCpuMemory: true, nodeOrderWeight: 1.0}\n"
    )
    a100 = await cluster.node("a100", GPU_NODE, labels={"nvidia.com/gpu.product": "NVIDIA-A100"})
    h100 = await cluster.node("h100", GPU_NODE, labels={"nvidia.com/gpu.product": "NVIDIA-H100"})
    quota = json.dumps({"NVIDIA-A100": 2, "NVIDIA-H100": 1})
    await cluster.create(
        MakeQueue(queue).card_quota(quota).weight(1).obj(), "/apis/scheduling.volcano.sh/v1beta1/queues"
    )
    annotations = {
        "volcano.sh/card.name": "NVIDIA-A100|NVIDIA-H100",
        "scheduling.volcano.sh/queue-name": queue,
    }
    for i in range(4):
        await cluster.pod(
            f"p-{i}",
            {"cpu": "1", "nvidia.com/gpu": "1"},
            limits={"nvidia.com/gpu": "1"},
            annotations=annotations,
            scheduler=name,
        )
    scheduler = run_scheduler(name, config)
    await scheduler.wait_ready()

    async def three_bound() -> dict[str, str] | None:
        pods = await cluster.pods()
        nodes = {n: node_of(p) for n, p in pods.items() if node_of(p)}
        return nodes if len(nodes) == 3 else None

    placed = await eventually(three_bound, 30, "three card pods bound", scheduler.log)
    assert sorted(placed.values()) == sorted([a100, a100, h100]), placed
    (pending,) = {f"p-{i}" for i in range(4)} - set(placed)
    message = await eventually(
        lambda: pending_message(cluster, pending, "quota exceeded"), 30, "the 4th pod refused", scheduler.log
    )
    assert f"Queue/{queue} for NVIDIA-A100" in message and f"Queue/{queue} for NVIDIA-H100" in message

    async def allocated() -> bool:
        obj = await cluster.get(f"/apis/scheduling.volcano.sh/v1beta1/queues/{queue}")
        return (obj.get("status") or {}).get("allocated") == {"NVIDIA-A100": "2", "NVIDIA-H100": "1"}

    await eventually(allocated, 30, "Queue status.allocated", scheduler.log)
    text = scheduler.metrics()
    for card, count in (("NVIDIA-A100", 2), ("NVIDIA-H100", 1)):
        labels = {"queue_name": queue, "card_name": card}
        assert fixtures.metric_value(text, "volcano_queue_card_allocated", labels) == count, text
        assert fixtures.metric_value(text, "volcano_queue_card_capacity", labels) == count, text
    assert scheduler.terminate() == 0, scheduler.log()


async def test_gpu_resource_quota_refuses_the_worker_over_max_workers(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    """gpu-resource-quota.md with Semantics 5: maxWorkers 2, each pod is one worker; the third is
    refused. status.used, availablePercent (two decimals) and both conditions are written; crossing
    the 80% alert threshold emits QuotaAlertThreshold; gpuq_gpu_quota_usage_ratio follows."""
    name = f"gpuq-{cluster.test_id}"
    ns = cluster.namespace
    config = BASE_TIER + "  - name: gpu-quota\n"
    await cluster.node("a100", GPU_NODE, labels=A100)
    quota = MakeGPUResourceQuota("gq", ns).total(
        requests={"tflops": "1000", "vram": "100Gi"},
        limits={"tflops": "2000", "vram": "200Gi"},
        maxWorkers=2,
        alertThresholdPercent=80,
    )
    await cluster.create(quota.obj(), f"/apis/tensor-fusion.ai/v1/namespaces/{ns}/gpuresourcequotas")
    annotations = {
        "tensor-fusion.ai/tflops-request": "100",
        "tensor-fusion.ai/vram-request": "10Gi",
        "tensor-fusion.ai/tflops-limit": "200",
        "tensor-fusion.ai/vram-limit": "20Gi",
    }
    for i in range(3):
        await cluster.pod(f"w-{i}", {"cpu": "1"}, annotations=annotations, scheduler=name)
    scheduler = run_scheduler(name, config)
    await scheduler.wait_ready()

    async def two_bound() -> set[str] | None:
        bound = {n for n, p in (await cluster.pods()).items() if node_of(p)}
        return bound if len(bound) == 2 else None

    bound = await eventually(two_bound, 30, "two workers bound", scheduler.log)
    (refused,) = {"w-0", "w-1", "w-2"} - bound
    message = await eventually(
        lambda: pending_message(cluster, refused, "total.maxWorkers"),
        30,
        "the third worker refused",
        scheduler.log,
    )
    assert "requested 1, available 0, used 2, limit 2" in message, message

    async def status() -> dict[str, Any] | None:
        obj = await cluster.get(f"/apis/tensor-fusion.ai/v1/namespaces/{ns}/gpuresourcequotas/gq")
        found = obj.get("status") or {}
        return found if (found.get("used") or {}).get("workers") == 2 else None

    written = await eventually(status, 30, "GPUResourceQuota status", scheduler.log)
    assert written["availablePercent"] == {
        "requests.tflops": "80.00",
        "requests.vram": "80.00",
        "limits.tflops": "80.00",
        "limits.vram": "80.00",
        "workers": "0.00",
    }
    assert written["used"]["requests"] == {"tflops": "200", "vram": "20Gi"}
    conditions = {c["type"]: c["status"] for c in written["conditions"]}
    assert conditions == {"Ready": "True", "AlertThresholdReached": "True"}
    assert written.get("lastUpdateTime")

    async def alert() -> bool:
        listing = await cluster.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")
        return any(
            e.get("reason") == "QuotaAlertThreshold" and e["regarding"]["kind"] == "GPUResourceQuota"
            for e in listing.get("items") or []
        )

    await eventually(alert, 30, "a QuotaAlertThreshold event", scheduler.log)
    text = scheduler.metrics()
    ratio = fixtures.metric_value(
        text, "gpuq_gpu_quota_usage_ratio", {"namespace": ns, "resource_type": "workers"}
    )
    assert ratio == 1.0, text
    assert (
        fixtures.metric_value(
            text, "gpuq_gpu_quota_usage_ratio", {"namespace": ns, "resource_type": "requests.tflops"}
        )
        == 0.2
    )
    assert scheduler.terminate() == 0, scheduler.log()


async def test_pod_group_phase_is_written_through_the_status_subresource(
    cluster: Cluster, run_scheduler: SchedulerFactory, control_plane: Any
) -> None:
    """Gang scheduling (design.md "Data flow"): a PodGroup of minMember 2 is enqueued (Pending ->
    Inqueue) and, once both members are bound, Running; the phase is written to podgroups/status.
    Then ``gpuq explain ns/pod --kubeconfig`` explains a member from the live state."""
    name = f"gpuq-{cluster.test_id}"
    ns = cluster.namespace
    await cluster.node("n", {"cpu": "8", "memory": "64Gi", "pods": "110"})
    await cluster.create(
        MakePodGroup("pg", ns).min_member(2).min_resources(cpu="2").obj(),
        f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups",
    )
    for i in range(2):
        await cluster.pod(
            f"m-{i}", {"cpu": "1"}, annotations={"scheduling.k8s.io/group-name": "pg"}, scheduler=name
        )
    scheduler = run_scheduler(name, None)
    await scheduler.wait_ready()
    await eventually(lambda: bound_pods(cluster, {"m-0", "m-1"}), 30, "both members bound", scheduler.log)

    async def running() -> dict[str, Any] | None:
        obj = await cluster.get(f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups/pg")
        status = obj.get("status") or {}
        return status if status.get("phase") == "Running" else None

    status = await eventually(running, 30, "PodGroup phase Running", scheduler.log)
    # status.running counts pods whose phase is Running, as Volcano's jobStatus does: without a
    # kubelet the bound pods stay Pending (tests/e2e/test_living.py has pods that run).
    assert status.get("running") == 0, status
    assert scheduler.terminate() == 0, scheduler.log()

    explained = await asyncio.to_thread(
        subprocess.run,
        [
            *fixtures.python_module("gpuq_k8s.cli"),
            "explain",
            f"{ns}/m-0",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert explained.returncode == 0, explained.stderr
    answer = json.loads(explained.stdout)
    assert (answer["phase"], answer["node"]) == ("Bound", node_of((await cluster.pods())["m-0"]))

    # A pod too big for the node: explained node by node from the live state.
    await cluster.pod("big", {"cpu": "100"}, scheduler=name)
    explained = await asyncio.to_thread(
        subprocess.run,
        [
            *fixtures.python_module("gpuq_k8s.cli"),
            "explain",
            f"{ns}/big",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert explained.returncode == 0, explained.stderr
    answer = json.loads(explained.stdout)
    assert answer["phase"] == "Pending" and "Insufficient cpu" in answer["reason"], answer
    assert "Insufficient cpu" in answer["nodes"][f"{cluster.test_id}-n"]["filtered"], answer
