"""A gang whose minMember pods its quota can never hold at once is never admitted to Permit: each of its
pods is refused in PreFilter as "never" (UnschedulableAndUnresolvable), so the gang holds nothing
while it waits for its quota to change. Before, each pod passed its quota alone and two of three
waited in Permit, holding 8 GPUs (capacity-card's job mode already refused such a gang at enqueue;
ElasticQuota's max and GPUResourceQuota's totals did not)."""

from __future__ import annotations

import pytest

from gpuq_k8s.common.model.gang import least_total
from gpuq_k8s.common.model.outlook import NEVER, outlook_of
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.status import Code
from tests.testing.builders import (
    GPU,
    MakeElasticQuota,
    MakeGPUResourceQuota,
    MakeNode,
    MakePod,
    MakePodGroup,
)
from tests.testing.clock import FakeClock
from tests.testing.config import config_text
from tests.testing.scheduler import make_scheduler

# Without the enqueue action: PreFilter's gang check is what is tested here (with it, capacity-scheduling
# keeps such a gang Pending at enqueue already: test_elastic_enqueue_cycle.py).
NO_ENQUEUE = "allocate, preempt"

GPU_NODE = MakeNode("gpu-1").product("NVIDIA-A100").alloc(cpu="32", memory="256Gi", pods="110", **{GPU: "16"})


def test_least_total_is_the_sum_of_the_smallest_requests() -> None:
    requests = [{GPU: 4000, "cpu": 1000}, {GPU: 1000}, {GPU: 2000, "cpu": 3000}]
    # Per resource on its own (a pod without cpu counts 0): a bound, never more than any 2 pods ask.
    assert least_total(requests, 2) == {GPU: 3000, "cpu": 1000}
    assert least_total(requests, 3) == {GPU: 7000, "cpu": 4000}
    assert least_total([], 2) == {}


def _gang(sched: Scheduler, quota: dict[str, object], size: int = 3, gpus: int = 4) -> None:
    sched.set_node(GPU_NODE.info())
    sched.put_object(quota)
    sched.put_object(MakePodGroup("big", "ml").min_member(size).obj())
    for i in range(size):
        sched.add_pod(MakePod(f"big-{i}", "ml").group("big").req(cpu="1").gpus(gpus).info())


def _run(sched: Scheduler) -> None:
    sched.run_enqueue()
    while sched.schedule_one() is not None or sched.run_enqueue():
        pass


@pytest.mark.parametrize(
    ("plugin", "quota", "expected"),
    [
        (
            "capacity-scheduling",
            MakeElasticQuota("eq", "ml").max({GPU: "8"}).obj(),
            "quota exceeded in ElasticQuota/ml/eq (max) by PodGroup ml/big's 3 pods at once for "
            "nvidia.com/gpu: requested 12, available 8, limit 8 (can never fit under the current quota: "
            "nvidia.com/gpu limit 8 would have to be at least 12)",
        ),
        (
            "gpu-quota",
            MakeGPUResourceQuota("q", "ml").total(maxWorkers=2).obj(),
            "quota exceeded in namespace ml (GPUResourceQuota/ml/q) by PodGroup ml/big's 3 pods at once for "
            "total.maxWorkers: requested 3, available 2, limit 2 (can never fit under the current quota: "
            "total.maxWorkers limit 2 would have to be at least 3)",
        ),
    ],
)
def test_a_gang_its_quota_can_never_hold_holds_nothing(
    plugin: str, quota: dict[str, object], expected: str
) -> None:
    sched, backend = make_scheduler(
        config=config_text("priority, gang", ["predicates", plugin], actions=NO_ENQUEUE)
    )
    _gang(sched, quota)
    _run(sched)
    assert sched.framework.waiting.gangs() == []  # nobody in Permit
    assert sched.cluster.pods == {}  # nothing reserved or assumed
    assert backend.bindings == {}
    for i in range(3):
        message = sched.reasons[f"ml/big-{i}"]
        assert expected in message
        assert outlook_of(message) == NEVER


@pytest.mark.parametrize(
    ("plugin", "quota"),
    [
        ("capacity-scheduling", MakeElasticQuota("eq", "ml").max({GPU: "12"}).obj()),
        ("gpu-quota", MakeGPUResourceQuota("q", "ml").total(maxWorkers=3).obj()),
    ],
)
def test_a_gang_its_quota_can_hold_runs(plugin: str, quota: dict[str, object]) -> None:
    sched, backend = make_scheduler(plugin)
    _gang(sched, quota)
    _run(sched)
    assert sorted(backend.bindings) == ["ml/big-0", "ml/big-1", "ml/big-2"]


def test_the_refusal_is_unresolvable_and_retried_when_the_quota_changes() -> None:
    clock = FakeClock()
    config = config_text("priority, gang", "predicates, capacity-scheduling", actions=NO_ENQUEUE)
    sched, backend = make_scheduler(config=config, clock=clock)
    _gang(sched, MakeElasticQuota("eq", "ml").max({GPU: "8"}).obj())
    sched.run_enqueue()
    attempt = sched.schedule_one()
    assert attempt is not None and attempt.status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "preemption" not in attempt.message  # nothing to evict for a limit itself
    clock.now = 60.0  # past any backoff
    sched.put_object(MakeElasticQuota("eq", "ml").max({GPU: "12"}).obj())  # QUOTA_CHANGED wakes them
    _run(sched)
    assert sorted(backend.bindings) == ["ml/big-0", "ml/big-1", "ml/big-2"]
