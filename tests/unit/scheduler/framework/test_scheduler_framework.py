"""Framework primitives: Status, the scheduling queue, the kube-style FitError message."""

from __future__ import annotations

import numpy as np
import pytest

from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.failure import fit_error
from gpuq_k8s.scheduler.framework.interfaces import ClusterEvent, FilterOutcome, FilterResult
from gpuq_k8s.scheduler.framework.status import Code, Status
from gpuq_k8s.scheduler.queue import SchedulingQueue
from tests.testing.builders import MakePod
from tests.testing.clock import FakeClock


@pytest.mark.parametrize(
    ("statuses", "code", "reasons"),
    [
        ([], Code.SUCCESS, ()),
        ([Status.success(), Status.skip()], Code.SKIP, ()),
        (
            [Status.unschedulable("a"), Status.unresolvable("b"), Status.unresolvable("c")],
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            ("b", "c"),
        ),
        ([Status.wait("w"), Status.error("boom")], Code.ERROR, ("boom",)),
    ],
)
def test_status_merge_keeps_worst_code_and_its_reasons(
    statuses: list[Status], code: Code, reasons: tuple[str, ...]
) -> None:
    merged = Status.merge(statuses)
    assert merged.code is code
    assert merged.reasons == reasons


def test_status_predicates() -> None:
    assert Status.success().is_success
    assert Status.unschedulable("x").is_rejected
    assert not Status.wait("x").is_rejected
    assert Status.unschedulable("x", plugin="p").with_plugin("q").plugin == "p"


def _key(pod: PodInfo) -> tuple[object, ...]:
    return (-(pod.priority or 0), pod.creation_timestamp, pod.namespace, pod.name)


def test_queue_order_priority_then_time_then_name() -> None:
    """design.md "gpuq simulate": priority high first, then creationTimestamp, then namespace/name."""
    queue = SchedulingQueue(_key, FakeClock())
    first = "2024-01-01T00:00:00Z"
    for pod in [
        MakePod("late").priority(0).created("2024-01-02T00:00:00Z").info(),
        MakePod("b").priority(0).created(first).info(),
        MakePod("a").priority(0).created(first).info(),
        MakePod("high").priority(10).created("2024-01-03T00:00:00Z").info(),
        MakePod("a", "aa").priority(0).created(first).info(),
    ]:
        queue.add(pod)
    order = []
    while (popped := queue.pop()) is not None:
        order.append(popped.key)
    assert order == ["ns/high", "aa/a", "ns/a", "ns/b", "ns/late"]


def test_queue_parks_unschedulable_until_relevant_event_then_backs_off() -> None:
    clock = FakeClock()
    queue = SchedulingQueue(_key, clock, interest={"predicates": frozenset({ClusterEvent.NODE_ADDED})})
    queue.add(MakePod("p").info())
    pod = queue.pop()
    assert pod is not None
    queue.unschedulable(pod, {"predicates"}, "no room")
    assert queue.pop() is None
    assert queue.on_event(ClusterEvent.QUOTA_CHANGED) == 0  # not an event predicates cares about
    assert queue.on_event(ClusterEvent.NODE_ADDED) == 1
    assert queue.pop() is None  # still backing off (1s after the first attempt)
    assert queue.next_backoff() == 1.0
    clock.now = 1.0
    again = queue.pop()
    assert again is not None and again.key == "ns/p"


def test_queue_retries_pods_parked_too_long_without_any_event() -> None:
    """kube-scheduler's leftover flush: a pod parked for max_age is retried even if no event a
    rejecting plugin declared ever comes (a change nobody declared interest in)."""
    clock = FakeClock()
    queue = SchedulingQueue(_key, clock, interest={"predicates": frozenset({ClusterEvent.NODE_ADDED})})
    for name in ("old", "young"):
        queue.add(MakePod(name).info())
    old, young = queue.pop(), queue.pop()
    assert old is not None and young is not None
    queue.unschedulable(old, {"predicates"}, "no room")
    clock.now = 200.0
    queue.unschedulable(young, {"predicates"}, "no room")
    clock.now = 299.0
    assert queue.flush_unschedulable(300.0) == 0
    clock.now = 300.0
    assert queue.flush_unschedulable(300.0) == 1  # only the one parked at 0 s
    popped = queue.pop()
    assert popped is not None and popped.key == "ns/old"
    assert queue.pop() is None
    parked = queue.get("ns/young")
    assert parked is not None and parked.pool == "unschedulable"


@pytest.mark.parametrize(
    ("attempts", "seconds"), [(0, 0.0), (1, 1.0), (2, 2.0), (4, 8.0), (5, 10.0), (30, 10.0)]
)
def test_backoff_is_exponential_and_bounded(attempts: int, seconds: float) -> None:
    assert SchedulingQueue(_key, FakeClock()).backoff_duration(attempts) == seconds


def test_fit_error_counts_first_rejecting_plugin_and_sorts_like_kube_scheduler() -> None:
    n = 5
    gpu = np.array([True, True, True, False, False])
    affinity = np.array([False, False, False, True, True])
    first = FilterResult(~affinity, lambda: [(affinity, "node(s) didn't match Pod's node affinity/selector")])
    second = FilterResult(~gpu, lambda: [(gpu, "Insufficient nvidia.com/gpu")])
    outcome = FilterOutcome(
        np.zeros(n, dtype=np.bool_),
        (("predicates", first, affinity), ("other", second, gpu & ~affinity)),
    )
    assert fit_error(n, outcome, None) == (
        "0/5 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, "
        "3 Insufficient nvidia.com/gpu."
    )
