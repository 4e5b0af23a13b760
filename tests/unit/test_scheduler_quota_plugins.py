"""capacity-card and gpu-quota in the cycle: Reserve/Unreserve, gangs, retries and the batched status sync."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from common.model.config import SchedulerConfig
from common.model.nodes import NodeInfo
from common.model.pods import PodInfo
from scheduler.cycle import Scheduler
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interfaces import ClusterEvent
from scheduler.memory_backend import MemoryBackend
from scheduler.plugins import default_registry
from scheduler.plugins.capacity_card import CapacityCardPlugin
from scheduler.plugins.gpu_quota import GPUQuota


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


class CountingBackend(MemoryBackend):
    def __init__(self) -> None:
        super().__init__()
        self.patches: list[tuple[str, str, str]] = []

    def patch_status(self, kind: str, namespace: str, name: str, status: Any) -> None:
        self.patches.append((kind, namespace, name))
        super().patch_status(kind, namespace, name, status)


def _scheduler() -> tuple[Scheduler, CountingBackend]:
    backend = CountingBackend()
    sched = Scheduler(SchedulerConfig.default(), default_registry(), backend, clock=Clock())
    backend.objects = sched.objects
    return sched, backend


def _node(name: str, product: str, gpus: int) -> NodeInfo:
    return NodeInfo.from_dict(
        {
            "metadata": {
                "name": name,
                "labels": {"nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": "81920"},
            },
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": str(gpus)}},
        }
    )


def _pod(name: str, gpus: int = 1, ns: str = "ns", **annotations: str) -> PodInfo:
    return PodInfo.from_dict(
        {
            "metadata": {"name": name, "namespace": ns, "annotations": annotations},
            "spec": {
                "schedulerName": "gpuq-scheduler",
                "containers": [
                    {"name": "c", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}}}
                ],
            },
        }
    )


def _queue(name: str, cards: dict[str, int]) -> dict[str, Any]:
    return {
        "kind": "Queue",
        "metadata": {"name": name, "annotations": {"volcano.sh/card.quota": json.dumps(cards)}},
        "spec": {"capability": {"cpu": "100", "memory": "1Ti"}},
    }


def _group(name: str, queue: str, min_member: int) -> dict[str, Any]:
    return {
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"queue": queue, "minMember": min_member},
    }


def _run(sched: Scheduler) -> None:
    sched.run_enqueue()
    while sched.schedule_one() is not None or sched.run_enqueue():
        pass
    sched.reject_waiting()
    sched.sync_status()


def _plugin(sched: Scheduler, kind: type[Any]) -> Any:
    return next(p for p in sched.framework.plugins if isinstance(p, kind))


def test_capacity_card_reserve_and_unreserve_are_idempotent() -> None:
    sched, _ = _scheduler()
    sched.set_node(_node("a100", "NVIDIA-A100", 8))
    sched.put_object(_queue("q", {"NVIDIA-A100": 4}))
    plugin: CapacityCardPlugin = _plugin(sched, CapacityCardPlugin)
    pod = _pod("p", 2, **{"scheduling.volcano.sh/queue-name": "q"})
    sched.add_pod(pod)
    state = CycleState()
    assert plugin.pre_filter(state, pod).is_success
    bound = replace(pod, node_name="a100")
    for _ in range(2):
        assert plugin.reserve(state, bound, 0).is_success
    assert plugin.engine.ledgers["q"].allocated.amount("NVIDIA-A100") == 2000
    for _ in range(2):
        plugin.unreserve(state, bound, 0)
    assert plugin.engine.ledgers["q"].allocated.amount("NVIDIA-A100") == 0


def test_gang_waits_in_permit_with_its_card_charges_and_rolls_back_together() -> None:
    """A gang of three 2-card pods (queue quota 6 A100) on a node with 4 free cards: two reserve and
    wait in Permit, the third does not fit, so the whole gang rolls back and nothing stays charged."""
    sched, backend = _scheduler()
    sched.set_node(_node("a100", "NVIDIA-A100", 4))
    sched.put_object(_queue("q", {"NVIDIA-A100": 6}))
    sched.put_object(_group("g", "q", 3))
    group = {"scheduling.k8s.io/group-name": "g", "volcano.sh/card.name": "NVIDIA-A100"}
    for i in range(3):
        sched.add_pod(_pod(f"p{i}", 2, **group))
    _run(sched)
    plugin: CapacityCardPlugin = _plugin(sched, CapacityCardPlugin)
    assert backend.bindings == {}
    assert plugin.engine.ledgers["q"].allocated.amount("NVIDIA-A100") == 0
    assert "only 2 of minMember 3" in sched.reasons["ns/p0"]
    assert backend.statuses[("PodGroup", "ns", "g")]["phase"] == "Inqueue"


def test_enqueue_refuses_a_gang_whose_cards_exceed_the_queue() -> None:
    """capacity-card job mode: the pods' card requests (3 x 2) are the job minimum; 6 > 4 stays Pending."""
    sched, backend = _scheduler()
    sched.set_node(_node("a100", "NVIDIA-A100", 8))
    sched.put_object(_queue("q", {"NVIDIA-A100": 4}))
    sched.put_object(_group("g", "q", 3))
    for i in range(3):
        sched.add_pod(_pod(f"p{i}", 2, **{"scheduling.k8s.io/group-name": "g"}))
    _run(sched)
    assert backend.bindings == {}
    assert sched.podgroups.groups["ns/g"].phase == "Pending"
    refusals = [e for e in backend.events if e.obj == "PodGroup/ns/g"]
    assert [e.reason for e in refusals] == ["InsufficientScalarQuota"]  # once, not once per enqueue pass


def test_gang_within_quota_binds_all_members_and_charges_the_queue() -> None:
    sched, backend = _scheduler()
    sched.set_node(_node("a100", "NVIDIA-A100", 8))
    sched.put_object(_queue("q", {"NVIDIA-A100": 6}))
    sched.put_object(
        {
            "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns"},
            "spec": {"queue": "q", "minMember": 3},
        }
    )
    for i in range(3):
        sched.add_pod(_pod(f"p{i}", 2, **{"scheduling.k8s.io/group-name": "g"}))
    _run(sched)
    assert sorted(backend.bindings) == ["ns/p0", "ns/p1", "ns/p2"]
    plugin: CapacityCardPlugin = _plugin(sched, CapacityCardPlugin)
    assert plugin.engine.ledgers["q"].allocated.amount("NVIDIA-A100") == 6000
    assert backend.statuses[("Queue", "", "q")]["allocated"]["NVIDIA-A100"] == "6"


def _gpu_quota(max_gpu_count: int = 1, max_workers: int = 10) -> dict[str, Any]:
    return {
        "kind": "GPUResourceQuota",
        "metadata": {"name": "gq", "namespace": "ns"},
        "spec": {"total": {"maxWorkers": max_workers}, "single": {"maxGPUCount": max_gpu_count}},
    }


def test_gpu_quota_single_limit_is_not_retried_on_unrelated_events() -> None:
    sched, _ = _scheduler()
    sched.set_node(_node("a100", "NVIDIA-A100", 8))
    sched.put_object(_gpu_quota(max_gpu_count=1))
    sched.add_pod(
        _pod("wide", 2, **{"tensor-fusion.ai/tflops-request": "10", "tensor-fusion.ai/gpu-count": "2"})
    )
    _run(sched)
    queued = sched.queue.get("ns/wide")
    assert queued is not None and queued.pool == "unschedulable"
    assert queued.rejected_by == frozenset({"gpu-quota:single"})
    assert "single.maxGPUCount" in sched.reasons["ns/wide"]
    for event in (ClusterEvent.POD_DELETED, ClusterEvent.NODE_CHANGED, ClusterEvent.PODGROUP_CHANGED):
        assert sched.queue.on_event(event) == 0
    assert sched.queue.on_event(ClusterEvent.QUOTA_CHANGED) == 1


def test_gpu_quota_reserve_is_atomic_and_idempotent_and_status_is_synced_once_per_namespace() -> None:
    sched, backend = _scheduler()
    sched.set_node(_node("a100", "NVIDIA-A100", 8))
    sched.put_object(_gpu_quota(max_gpu_count=8, max_workers=2))
    for i in range(3):
        sched.add_pod(_pod(f"w{i}", 1))
    _run(sched)
    assert sorted(backend.bindings) == ["ns/w0", "ns/w1"]
    assert "total.maxWorkers" in sched.reasons["ns/w2"]
    assert backend.patches.count(("GPUResourceQuota", "ns", "gq")) == 1
    plugin: GPUQuota = _plugin(sched, GPUQuota)
    assert plugin.store.usage("ns").gpu_count == 2
    bound = sched.cluster.pods["ns/w0"]
    row = sched.cluster.row_of["a100"]
    assert plugin.reserve(CycleState(), bound, row).is_success  # already charged: no change
    assert plugin.store.usage("ns").gpu_count == 2
    sched.delete_pod("ns/w0")
    assert plugin.store.usage("ns").gpu_count == 1
    plugin.unreserve(CycleState(), bound, row)  # a no-op for a pod no longer charged
    assert plugin.store.usage("ns").gpu_count == 1
