"""capacity-card and gpu-quota in the cycle: Reserve/Unreserve, gangs, retries and the batched status sync."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import ClusterEvent
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins.capacity_card import CapacityCardPlugin
from gpuq_k8s.scheduler.plugins.gpu_quota import GPUQuota
from tests.testing.builders import GPU, MakeGPUResourceQuota, MakeNode, MakePod, MakePodGroup, MakeQueue
from tests.testing.scheduler import make_scheduler, plugin_of


class CountingBackend(MemoryBackend):
    def __init__(self) -> None:
        super().__init__()
        self.patches: list[tuple[str, str, str]] = []

    def patch_status(self, kind: Kind, namespace: str, name: str, status: Any) -> None:
        self.patches.append((kind.kind, namespace, name))
        super().patch_status(kind, namespace, name, status)


A100_NODE = (
    MakeNode("a100")
    .product("NVIDIA-A100")
    .label("nvidia.com/gpu.memory", "81920")
    .alloc(cpu="64", memory="256Gi")
)
POD = MakePod().req(cpu="1")
CARD_QUEUE = MakeQueue().capability(cpu="100", memory="1Ti")


def _run(sched: Scheduler) -> None:
    sched.run_enqueue()
    while sched.schedule_one() is not None or sched.run_enqueue():
        pass
    sched.reject_waiting()
    sched.sync_status()


def test_capacity_card_reserve_and_unreserve_are_idempotent() -> None:
    sched, _ = make_scheduler(config=SchedulerConfig.default(), backend=CountingBackend())
    sched.set_node(A100_NODE.copy().gpus(8).info())
    sched.put_object(CARD_QUEUE.copy().name("q").card_quota(json.dumps({"NVIDIA-A100": 4})).obj())
    plugin: CapacityCardPlugin = plugin_of(sched, CapacityCardPlugin)
    pod = POD.copy().name("p").req({GPU: 2}).queue("q").info()
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
    sched, backend = make_scheduler(config=SchedulerConfig.default(), backend=CountingBackend())
    sched.set_node(A100_NODE.copy().gpus(4).info())
    sched.put_object(CARD_QUEUE.copy().name("q").card_quota(json.dumps({"NVIDIA-A100": 6})).obj())
    sched.put_object(MakePodGroup("g").queue("q").min_member(3).obj())
    for i in range(3):
        sched.add_pod(POD.copy().name(f"p{i}").req({GPU: 2}).group("g").card("NVIDIA-A100").info())
    _run(sched)
    plugin: CapacityCardPlugin = plugin_of(sched, CapacityCardPlugin)
    assert backend.bindings == {}
    assert plugin.engine.ledgers["q"].allocated.amount("NVIDIA-A100") == 0
    assert "only 2 of minMember 3" in sched.reasons["ns/p0"]
    assert backend.statuses[("PodGroup", "ns", "g")]["phase"] == "Inqueue"


def test_enqueue_refuses_a_gang_whose_cards_exceed_the_queue() -> None:
    """capacity-card job mode: the pods' card requests (3 x 2) are the job minimum; 6 > 4 stays Pending."""
    sched, backend = make_scheduler(config=SchedulerConfig.default(), backend=CountingBackend())
    sched.set_node(A100_NODE.copy().gpus(8).info())
    sched.put_object(CARD_QUEUE.copy().name("q").card_quota(json.dumps({"NVIDIA-A100": 4})).obj())
    sched.put_object(MakePodGroup("g").queue("q").min_member(3).obj())
    for i in range(3):
        sched.add_pod(POD.copy().name(f"p{i}").req({GPU: 2}).group("g").info())
    _run(sched)
    assert backend.bindings == {}
    assert sched.podgroups.groups["ns/g"].phase == "Pending"
    refusals = [e for e in backend.events if e.obj == "PodGroup/ns/g"]
    assert [e.reason for e in refusals] == ["InsufficientScalarQuota"]  # once, not once per enqueue pass


def test_gang_within_quota_binds_all_members_and_charges_the_queue() -> None:
    sched, backend = make_scheduler(config=SchedulerConfig.default(), backend=CountingBackend())
    sched.set_node(A100_NODE.copy().gpus(8).info())
    sched.put_object(CARD_QUEUE.copy().name("q").card_quota(json.dumps({"NVIDIA-A100": 6})).obj())
    sched.put_object(MakePodGroup("g").queue("q").min_member(3).obj())
    for i in range(3):
        sched.add_pod(POD.copy().name(f"p{i}").req({GPU: 2}).group("g").info())
    _run(sched)
    assert sorted(backend.bindings) == ["ns/p0", "ns/p1", "ns/p2"]
    plugin: CapacityCardPlugin = plugin_of(sched, CapacityCardPlugin)
    assert plugin.engine.ledgers["q"].allocated.amount("NVIDIA-A100") == 6000
    assert backend.statuses[("Queue", "", "q")]["allocated"]["NVIDIA-A100"] == "6"


def test_gpu_quota_single_limit_is_not_retried_on_unrelated_events() -> None:
    sched, _ = make_scheduler(config=SchedulerConfig.default(), backend=CountingBackend())
    sched.set_node(A100_NODE.copy().gpus(8).info())
    sched.put_object(MakeGPUResourceQuota("gq").total(maxWorkers=10).single(maxGPUCount=1).obj())
    sched.add_pod(
        POD.copy()
        .name("wide")
        .req({GPU: 2})
        .annotations({"tensor-fusion.ai/tflops-request": "10", "tensor-fusion.ai/gpu-count": "2"})
        .info()
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
    sched, backend = make_scheduler(config=SchedulerConfig.default(), backend=CountingBackend())
    sched.set_node(A100_NODE.copy().gpus(8).info())
    sched.put_object(MakeGPUResourceQuota("gq").total(maxWorkers=2).single(maxGPUCount=8).obj())
    for i in range(3):
        sched.add_pod(POD.copy().name(f"w{i}").req({GPU: 1}).info())
    _run(sched)
    assert sorted(backend.bindings) == ["ns/w0", "ns/w1"]
    assert "total.maxWorkers" in sched.reasons["ns/w2"]
    assert backend.patches.count(("GPUResourceQuota", "ns", "gq")) == 1
    plugin: GPUQuota = plugin_of(sched, GPUQuota)
    assert plugin.store.usage("ns").gpu_count == 2
    bound = sched.cluster.pods["ns/w0"]
    row = sched.cluster.row_of["a100"]
    assert plugin.reserve(CycleState(), bound, row).is_success  # already charged: no change
    assert plugin.store.usage("ns").gpu_count == 2
    sched.delete_pod("ns/w0")
    assert plugin.store.usage("ns").gpu_count == 1
    plugin.unreserve(CycleState(), bound, row)  # a no-op for a pod no longer charged
    assert plugin.store.usage("ns").gpu_count == 1
