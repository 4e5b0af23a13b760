"""Volcano's preempt, reclaim and proportion as Volcano's master runs them (volcano-sh/volcano ed72c7c,
2026-08-20), ported case by case and run through ``gpuq simulate`` with each test's own tier.

- ``pkg/scheduler/actions/preempt/preempt_test.go`` TestPreempt: preemption within a queue when the
  queue's own capability, not node room, blocks a high-priority pod (Volcano #3161 and its follow-ups:
  the victims are taken until Allocatable passes, on one node, and only there); BestEffort preemptors
  (#3335); ``preemptionPolicy: Never`` (#3642).
- ``pkg/scheduler/actions/reclaim/reclaim_test.go`` TestReclaim: the node's idle resources count towards
  what the reclaimer needs and a queue holding less than the reclaimer asks is no longer skipped (2025:
  "fix: remove lessPartly condition in reclaimable fn", "reclaimed resource add node futureIdle
  resource first"); victims of the queue, then the job, that orders last go first.
- ``pkg/scheduler/plugins/proportion/proportion_test.go`` TestAllocate: queue order compares
  ``spec.priority`` before the share.

Each test names its upstream case. As in tests/unit/scheduler/actions/test_volcano_ported.py, every
node allows pods explicitly (Volcano's builders give 10; the BestEffort cases 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.testing.builders import MakeNode, MakePod, MakePodGroup, MakePriorityClass, MakeQueue
from tests.testing.volcano_scenarios import bound, phases, preempted, simulate

HIGH, LOW = MakePriorityClass("high-priority", 100000).obj(), MakePriorityClass("low-priority", 10).obj()
PREEMPTABLE = {"volcano.sh/preemptable": "true"}
NOT_PREEMPTABLE = {"volcano.sh/preemptable": "false"}

# preempt_test.go TestPreempt's tier (its switches; an unset one is on, as Volcano's isEnabled(nil)).
PREEMPT_TIER = """\
actions: "enqueue, allocate, preempt"
tiers:
- plugins:
  - name: conformance
    enablePreemptable: true
  - name: gang
    enablePreemptable: true
    enableJobPipelined: true
    enableJobStarving: true
  - name: priority
    enableTaskOrder: true
    enableJobOrder: true
    enablePreemptable: true
    enableJobPipelined: true
    enableJobStarving: true
  - name: proportion
    enabledOverused: true
    enabledAllocatable: true
    enableQueueOrder: true
- plugins:
  - name: predicates
"""

# reclaim_test.go TestReclaim's tier (the capacity plugin it also lists is not gpuq's).
RECLAIM_TIER = """\
actions: "enqueue, allocate, reclaim"
tiers:
- plugins:
  - name: conformance
    enableReclaimable: true
  - name: gang
    enableReclaimable: true
    enableJobStarving: true
  - name: proportion
    enableReclaimable: true
    enableQueueOrder: true
    enablePreemptive: true
  - name: priority
    enableReclaimable: true
    enableJobOrder: true
    enableTaskOrder: true
- plugins:
  - name: predicates
"""


def _node(name: str, cpu: str, memory: str, pods: str = "10") -> dict[str, Any]:
    return MakeNode(name).alloc(cpu=cpu, memory=memory, pods=pods).obj()


def _pod(
    name: str, group: str, cpu: str = "1", memory: str = "1G", on: str = "", **annotations: str
) -> MakePod:
    made = MakePod(name, "c1").group(group).annotations(dict(annotations))
    if cpu or memory:
        made.req(cpu=cpu, memory=memory)
    return made.node(on) if on else made


def _group(name: str, queue: str, min_member: int, priority_class: str = "") -> dict[str, Any]:
    made = MakePodGroup(name, "c1").queue(queue).min_member(min_member).phase("Inqueue")
    if priority_class:
        made.spec(priorityClassName=priority_class)
    return made.obj()


def _queue(
    name: str, weight: int = 1, capability: Mapping[str, str] | None = None, priority: int = 0
) -> dict[str, Any]:
    made = MakeQueue(name).weight(weight)
    if capability:
        made.capability(dict(capability))
    if priority:
        made.priority(priority)
    return made.obj()


# -- preempt ------------------------------------------------------------------------------------------


def test_preempt_low_priority_job_in_same_queue(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TestPreempt "preempt low priority job in same queue" (#3161): q1's capability (4 cpu) holds
    preemptee1's 3, so the 3-cpu preemptor is not allocatable though n1 has 12 cpu: the low-priority
    job of the same queue is evicted and the preemptor runs."""
    objects = [
        HIGH,
        LOW,
        _group("pg1", "q1", 0, "low-priority"),
        _group("pg2", "q1", 1, "high-priority"),
        _pod("preemptee1", "pg1", "3", "3G", "n1", **PREEMPTABLE).obj(),
        _pod("preemptor1", "pg2", "3", "3G").obj(),
        _node("n1", "12", "12G"),
        _queue("q1", capability={"cpu": "4", "memory": "4G"}),
    ]
    out = simulate(tmp_path, capsys, objects, PREEMPT_TIER)
    assert preempted(out) == {"c1/preemptee1"}
    assert bound(out) == {"c1/preemptor1": "n1"}


def test_preempt_low_priority_job_in_same_queue_allocatable_and_has_enough_resource_dont_preempt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestPreempt "preempt low priority job in same queue: allocatable and has enough resource, don't
    preempt": with a capability of 6 cpu both fit."""
    objects = [
        HIGH,
        LOW,
        _group("pg1", "q1", 1, "low-priority"),
        _group("pg2", "q1", 1, "high-priority"),
        _pod("preemptee1", "pg1", "3", "3G", "n1", **PREEMPTABLE).obj(),
        _pod("preemptor1", "pg2", "3", "3G").obj(),
        _node("n1", "12", "12G"),
        _queue("q1", capability={"cpu": "6", "memory": "6G"}),
    ]
    out = simulate(tmp_path, capsys, objects, PREEMPT_TIER)
    assert preempted(out) == set()
    assert bound(out) == {"c1/preemptee1": "n1", "c1/preemptor1": "n1"}


def test_preempt_low_priority_job_in_same_queue_but_not_preemptable_false_or_higher_priority(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestPreempt "preempt low priority job in same queue but not pod with preemptable=false or higher
    priority" (#2232): capability 3 cpu, three 1-cpu pods run; of them only preemptee2 may go."""
    objects = [
        HIGH,
        LOW,
        _group("pg1", "q1", 1, "low-priority"),
        _group("pg2", "q1", 1, "high-priority"),
        _pod("preemptee1", "pg1", on="n1", **NOT_PREEMPTABLE).obj(),
        _pod("preemptee2", "pg1", on="n1", **PREEMPTABLE).obj(),
        _pod("preemptee3", "pg1", on="n1", **PREEMPTABLE).priority(100000, "high-priority").obj(),
        _pod("preemptor1", "pg2").obj(),
        _node("n1", "12", "12G"),
        _queue("q1", capability={"cpu": "3", "memory": "3G"}),
    ]
    out = simulate(tmp_path, capsys, objects, PREEMPT_TIER)
    assert preempted(out) == {"c1/preemptee2"}
    assert bound(out)["c1/preemptor1"] == "n1"


def test_un_best_effort_high_priority_pod_preempts_best_effort_low_priority_pod_in_same_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestPreempt "unBestEffort high-priority pod preempt BestEffort low-priority pod in same queue"
    (#3335): n1 takes one pod, held by a BestEffort pod."""
    objects = [
        HIGH,
        LOW,
        _group("pg1", "q1", 0, "low-priority"),
        _group("pg2", "q1", 1, "high-priority"),
        _pod("preemptee1", "pg1", "", "", "n1", **PREEMPTABLE).obj(),
        _pod("preemptor1", "pg2", "3", "3G").obj(),
        _node("n1", "12", "12G", pods="1"),
        _queue("q1", capability={"cpu": "6", "memory": "6G"}),
    ]
    out = simulate(tmp_path, capsys, objects, PREEMPT_TIER)
    assert preempted(out) == {"c1/preemptee1"}
    assert bound(out) == {"c1/preemptor1": "n1"}


def test_best_effort_high_priority_pod_preempts_best_effort_low_priority_pod_in_same_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestPreempt "BestEffort high-priority pod preempt BestEffort low-priority pod in same queue"
    (#3335). proportion calls q1 overused (it deserves nothing: its pods request nothing), which
    keeps allocate away; preempt does not ask that (only Allocatable, which a BestEffort pod passes),
    so the BestEffort preemptor takes the one pod slot (gpuq refused it while the queue was overused)."""
    objects = [
        HIGH,
        LOW,
        _group("pg1", "q1", 0, "low-priority"),
        _group("pg2", "q1", 1, "high-priority"),
        _pod("preemptee1", "pg1", "", "", "n1", **PREEMPTABLE).obj(),
        _pod("preemptor1", "pg2", "", "").obj(),
        _node("n1", "12", "12G", pods="1"),
        _queue("q1", capability={"cpu": "6", "memory": "6G"}),
    ]
    out = simulate(tmp_path, capsys, objects, PREEMPT_TIER)
    assert preempted(out) == {"c1/preemptee1"}
    assert bound(out) == {"c1/preemptor1": "n1"}


def test_preempt_can_not_preempt_resources_when_task_preemption_policy_is_never(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestPreempt "can not preempt resources when task preemption policy is never" (#3642)."""
    objects = [
        HIGH,
        LOW,
        _group("pg1", "q1", 0, "low-priority"),
        _group("pg2", "q1", 1, "high-priority"),
        _pod("preemptee1", "pg1", on="n1", **PREEMPTABLE).obj(),
        _pod("preemptor1", "pg2").preemption_policy("Never").obj(),
        _node("n1", "1", "1Gi", pods="1"),
        _queue("q1"),
    ]
    out = simulate(tmp_path, capsys, objects, PREEMPT_TIER)
    assert preempted(out) == set()
    assert phases(out)["c1/preemptor1"] == "Pending"


def test_rollback_evictions_when_preemptor_exceeds_queue_capacity_after_evicting_victims(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestPreempt "rollback evictions when preemptor exceeds queue capacity after evicting victims":
    the 4-cpu preemptor exceeds q1's capability of 3 even with every victim gone: nothing is evicted."""
    objects = [
        HIGH,
        LOW,
        _group("pg1", "q1", 1, "low-priority"),
        _group("pg2", "q1", 1, "high-priority"),
        _pod("preemptee1", "pg1", on="n1", **PREEMPTABLE).obj(),
        _pod("preemptee2", "pg1", on="n1", **PREEMPTABLE).obj(),
        _pod("preemptor1", "pg2", "4", "4G").obj(),
        _node("n1", "10", "10G"),
        _queue("q1", capability={"cpu": "3", "memory": "3G"}),
    ]
    out = simulate(tmp_path, capsys, objects, PREEMPT_TIER)
    assert preempted(out) == set()
    assert phases(out)["c1/preemptor1"] == "Pending"


def test_only_commit_evictions_on_the_node_where_preemption_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestPreempt "only commit evictions on the node where preemption succeeds": evicting n1's 1-cpu
    victim leaves q1 at 4 + 3 > 6 (its capability); n2's 4-cpu victim brings it to 1 + 3: only that one
    is evicted, and the preemptor goes to n2."""
    objects = [
        HIGH,
        LOW,
        _group("pg1", "q1", 0, "low-priority"),
        _group("pg2", "q1", 1, "high-priority"),
        _group("pg3", "q1", 0, "low-priority"),
        _pod("preemptee1", "pg1", on="n1", **PREEMPTABLE).obj(),
        _pod("preemptee2", "pg3", "4", "4G", "n2", **PREEMPTABLE).obj(),
        _pod("preemptor1", "pg2", "3", "3G").obj(),
        _node("n1", "3", "3G"),
        _node("n2", "4", "4G"),
        _queue("q1", capability={"cpu": "6", "memory": "6G"}),
    ]
    out = simulate(tmp_path, capsys, objects, PREEMPT_TIER)
    assert preempted(out) == {"c1/preemptee2"}
    assert bound(out)["c1/preemptor1"] == "n2"


def test_multi_queue_preemptor_tasks_must_not_be_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestPreempt "multi-queue: preemptorTasks must not be overwritten by intra-job preemption of
    another queue": q2's high-priority job takes the node room of q2's low-priority one."""
    objects = [
        HIGH,
        LOW,
        _group("pg1", "q1", 1),
        _group("pg2", "q2", 0, "low-priority"),
        _group("pg3", "q2", 1, "high-priority"),
        _pod("q1-runner1", "pg1", on="n1").obj(),
        _pod("q2-preemptee1", "pg2", on="n1", **PREEMPTABLE).obj(),
        _pod("q2-preemptor1", "pg3").obj(),
        _node("n1", "2", "2G"),
        _queue("q1"),
        _queue("q2", capability={"cpu": "4", "memory": "4G"}),
    ]
    out = simulate(tmp_path, capsys, objects, PREEMPT_TIER)
    assert preempted(out) == {"c1/q2-preemptee1"}
    assert bound(out)["c1/q2-preemptor1"] == "n1"


# -- reclaim ------------------------------------------------------------------------------------------


def test_reclaim_sort_reclaimees_when_reclaiming_from_overusing_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestReclaim "sort reclaimees when reclaiming from overusing queue": of q1's and q2's preemptable
    pods, the one of the low-priority job (pg2) goes."""
    objects = [
        MakePriorityClass("low-priority", 100).obj(),
        MakePriorityClass("mid-priority", 500).obj(),
        MakePriorityClass("high-priority", 1000).obj(),
        _group("pg1", "q1", 1, "mid-priority"),
        _group("pg2", "q2", 1, "low-priority"),
        _group("pg3", "q3", 1, "high-priority"),
        _pod("preemptee1-1", "pg1", on="n1", **PREEMPTABLE).obj(),
        _pod("preemptee1-2", "pg1", on="n1", **PREEMPTABLE).obj(),
        _pod("preemptee2-1", "pg2", on="n1", **PREEMPTABLE).obj(),
        _pod("preemptee2-2", "pg2", on="n1", **NOT_PREEMPTABLE).obj(),
        _pod("preemptor1", "pg3").obj(),
        _node("n1", "4", "4Gi"),
        _queue("q1"),
        _queue("q2"),
        _queue("q3"),
    ]
    out = simulate(tmp_path, capsys, objects, RECLAIM_TIER)
    assert preempted(out) == {"c1/preemptee2-1"}
    assert bound(out)["c1/preemptor1"] == "n1"


def test_reclaim_sort_reclaimees_from_overusing_queues_with_different_queue_priority(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestReclaim "sort reclaimees when reclaiming from overusing queues with different queue
    priority": q2 has the highest spec.priority (10), q1 5: q1's preemptable pod goes."""
    objects = [
        _group("pg1", "q1", 1),
        _group("pg2", "q2", 1),
        _group("pg3", "q3", 1),
        _pod("preemptee1-1", "pg1", on="n1", **PREEMPTABLE).obj(),
        _pod("preemptee1-2", "pg1", on="n1", **NOT_PREEMPTABLE).obj(),
        _pod("preemptee2-1", "pg2", on="n1", **PREEMPTABLE).obj(),
        _pod("preemptee2-2", "pg2", on="n1", **NOT_PREEMPTABLE).obj(),
        _pod("preemptor1", "pg3").obj(),
        _node("n1", "4", "4Gi"),
        _queue("q1", priority=5),
        _queue("q2", priority=10),
        _queue("q3", priority=1),
    ]
    out = simulate(tmp_path, capsys, objects, RECLAIM_TIER)
    assert preempted(out) == {"c1/preemptee1-1"}


def test_reclaim_can_not_reclaim_when_task_preemption_policy_is_never(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestReclaim "can not reclaim resources when task preemption policy is never" (#3642)."""
    objects = [
        MakePriorityClass("low-priority", 100).obj(),
        MakePriorityClass("high-priority", 1000).obj() | {"preemptionPolicy": "Never"},
        _group("pg1", "q1", 0, "low-priority"),
        _group("pg2", "q2", 0, "high-priority"),
        _pod("preemptee1", "pg1", on="n1", **PREEMPTABLE).obj(),
        _pod("preemptor1", "pg2").preemption_policy("Never").obj(),
        _node("n1", "1", "1Gi", pods="1"),
        _queue("q1", 5),
        _queue("q2", 10),
    ]
    out = simulate(tmp_path, capsys, objects, RECLAIM_TIER)
    assert preempted(out) == set()
    assert phases(out)["c1/preemptor1"] == "Pending"


def test_reclaim_can_not_reclaim_when_queue_is_not_open(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestReclaim "can not reclaim resources when queue is not open(proportion plugin)"."""
    closed = MakeQueue("q2").weight(1).state("Closed").obj()
    objects = [
        MakePriorityClass("low-priority", 100).obj(),
        MakePriorityClass("high-priority", 1000).obj(),
        MakePodGroup("pg1", "c1")
        .queue("q1")
        .min_member(1)
        .phase("Running")
        .spec(priorityClassName="low-priority")
        .obj(),
        _group("pg2", "q2", 1, "high-priority"),
        _pod("preemptee1", "pg1", on="n1", **NOT_PREEMPTABLE).obj(),
        _pod("preemptee2", "pg1", on="n1", **PREEMPTABLE).obj(),
        _pod("preemptee3", "pg1", on="n1", **NOT_PREEMPTABLE).obj(),
        _pod("preemptor1", "pg2").obj(),
        _node("n1", "3", "3Gi"),
        _queue("q1"),
        closed,
    ]
    out = simulate(tmp_path, capsys, objects, RECLAIM_TIER)
    assert preempted(out) == set()
    assert phases(out)["c1/preemptor1"] == "Pending"


def test_reclaim_node_available_resources_should_be_included_in_reclaimed_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestReclaim "Node available resources should be included in reclaimed resources": n1 has 8 cpu
    idle but too little memory; the 2-cpu preemptor needs only 1G of memory back. q1 and q2 hold 1 cpu
    each, less than the 2 it asks: gpuq once skipped such a queue (Volcano's former rule) and evicted
    nobody. Now q1's pod (its queue orders last: spec.priority 1 < 2) goes."""
    objects = [
        MakePriorityClass("mid-priority", 500).obj(),
        MakePodGroup("pg1", "c1")
        .queue("q1")
        .min_member(0)
        .phase("Running")
        .spec(priorityClassName="mid-priority")
        .obj(),
        MakePodGroup("pg2", "c1")
        .queue("q2")
        .min_member(0)
        .phase("Running")
        .spec(priorityClassName="mid-priority")
        .obj(),
        _group("pg3", "q3", 1, "mid-priority"),
        _pod("preemptee1-1", "pg1", on="n1", **PREEMPTABLE).obj(),
        _pod("preemptee2-1", "pg2", on="n1", **PREEMPTABLE).obj(),
        _pod("preemptor1", "pg3", "2", "1G").obj(),
        _node("n1", "10", "2Gi"),
        _queue("q1", priority=1),
        _queue("q2", priority=2),
        _queue("q3", 3),
    ]
    out = simulate(tmp_path, capsys, objects, RECLAIM_TIER)
    assert preempted(out) == {"c1/preemptee1-1"}
    assert bound(out)["c1/preemptor1"] == "n1"


def test_reclaim_succeeds_for_second_task_when_first_has_preemption_policy_never(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestReclaim "Reclaim succeeds for second task when first task has PreemptionPolicy=Never": the
    task that may preempt reclaims victim-pod (pg-victim keeps its minMember of 1)."""
    objects = [
        MakePriorityClass("low-priority", 100).obj(),
        MakePriorityClass("high-priority-no-preempt", 1000).obj() | {"preemptionPolicy": "Never"},
        MakePriorityClass("high-priority-can-preempt", 900).obj(),
        MakePodGroup("pg-victim", "c1")
        .queue("q1")
        .min_member(1)
        .phase("Running")
        .spec(priorityClassName="low-priority")
        .obj(),
        _group("pg-preemptor", "q2", 2, "high-priority-no-preempt"),
        _pod("victim-pod-no", "pg-victim", on="n1", **NOT_PREEMPTABLE).obj(),
        _pod("victim-pod", "pg-victim", on="n1", **PREEMPTABLE).obj(),
        _pod("preemptor-task1-non-preemptable", "pg-preemptor").preemption_policy("Never").obj(),
        _pod("preemptor-task2-preemptable", "pg-preemptor").obj(),
        _node("n1", "2", "2G"),
        _queue("q1"),
        _queue("q2"),
    ]
    out = simulate(tmp_path, capsys, objects, RECLAIM_TIER)
    assert preempted(out) == {"c1/victim-pod"}


def test_reclaim_only_commit_evictions_on_the_node_where_reclaim_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestReclaim "only commit evictions on the node where reclaim succeeds": 8 cpu are idle, enough
    for the 3-cpu preemptor: nobody is evicted."""
    objects = [
        MakePodGroup("pg-victim", "c1").queue("q1").min_member(0).phase("Running").obj(),
        _group("pg-preemptor", "q2", 1),
        _pod("victim-n1", "pg-victim", "2", "2G", "n1", **PREEMPTABLE).obj(),
        _pod("preemptor1", "pg-preemptor", "3", "3G").obj(),
        _node("n1", "10", "10G"),
        _queue("q1", 1),
        _queue("q2", 9),
    ]
    out = simulate(tmp_path, capsys, objects, RECLAIM_TIER)
    assert preempted(out) == set()
    assert bound(out)["c1/preemptor1"] == "n1"


# -- proportion ---------------------------------------------------------------------------------------


def test_proportion_pods_are_assigned_in_the_order_of_queue_priority(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """proportion_test.go TestAllocate "case0: Pods are assigned according to the order of Queue
    Priority in which PGs are placed": n2 has room for one of p2 (q2, priority 1) and p3 (q3,
    priority 10); q3 orders first, whatever the shares."""
    tier = """\
actions: "enqueue, allocate, reclaim"
tiers:
- plugins:
  - name: proportion
    enableQueueOrder: true
- plugins:
  - name: predicates
"""
    capability = {"cpu": "2", "memory": "4Gi"}
    objects = [
        MakePodGroup("pg1", "ns1").queue("q1").min_member(1).phase("Running").obj(),
        MakePodGroup("pg2", "ns1").queue("q2").min_member(1).phase("Inqueue").obj(),
        MakePodGroup("pg3", "ns1").queue("q3").min_member(1).phase("Inqueue").obj(),
        MakePod("p1", "ns1").group("pg1").req(cpu="2", memory="4Gi").node("n1").obj(),
        MakePod("p2", "ns1").group("pg2").req(cpu="2", memory="4Gi").obj(),
        MakePod("p3", "ns1").group("pg3").req(cpu="2", memory="4Gi").obj(),
        _node("n1", "2", "4Gi"),
        _node("n2", "2", "4Gi"),
        _queue("q1", capability=capability, priority=5),
        _queue("q2", capability=capability, priority=1),
        _queue("q3", capability=capability, priority=10),
    ]
    out = simulate(tmp_path, capsys, objects, tier)
    assert bound(out) == {"ns1/p1": "n1", "ns1/p3": "n2"}
