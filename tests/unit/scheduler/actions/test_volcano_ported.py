"""Scenarios ported from Volcano's own unit tests (volcano-sh/volcano), run through ``gpuq simulate``.

Each test names the upstream file and test case it comes from. Volcano's tests run one action on a
session; gpuq runs the configured actions continuously, so the outcome compared is the one the
upstream test asserts (evictions counted, pods bound, binding order), with the same objects and the
same plugins and switches. Every node also allows pods (``pods: 110``), which Volcano's builders
leave out because Volcano does not count pods against nodes the way kube-scheduler does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.testing.builders import MakeNode, MakePod, MakePodGroup, MakePriorityClass, MakeQueue
from tests.testing.volcano_scenarios import bound, phases, preempted, scheduled_order, simulate

PRIORITY_CLASSES = [
    MakePriorityClass("high-priority", 100000).obj(),
    MakePriorityClass("low-priority", 10).obj(),
]


def node(name: str, cpu: str, memory: str) -> dict[str, Any]:
    return MakeNode(name).alloc(cpu=cpu, memory=memory, pods="110").obj()


def pod(
    namespace: str,
    name: str,
    group: str,
    *,
    cpu: str = "1",
    memory: str = "1G",
    on: str = "",
    **annotations: str,
) -> MakePod:
    made = MakePod(name, namespace).group(group).annotations(dict(annotations))
    if cpu or memory:
        made.req(cpu=cpu, memory=memory)
    return made.node(on) if on else made


def group(
    namespace: str, name: str, queue: str, min_member: int = 0, priority_class: str = ""
) -> dict[str, Any]:
    made = MakePodGroup(name, namespace).queue(queue).min_member(min_member).phase("Inqueue")
    if priority_class:
        made.spec(priorityClassName=priority_class)
    return made.obj()


def queue(name: str, weight: int = 1) -> dict[str, Any]:
    return MakeQueue(name).weight(weight).obj()


# -- preempt: pkg/scheduler/actions/preempt/preempt_test.go, TestPreempt ------------------------------

PREEMPT_CONF = """\
actions: "enqueue, allocate, preempt"
tiers:
- plugins:
  - name: conformance
    enablePreemptable: true
  - name: gang
    enablePreemptable: true
    enableJobPipelined: true
    enableJobStarving: true
- plugins:
  - name: predicates
"""


def test_preempt_do_not_preempt_if_there_are_enough_idle_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestPreempt "do not preempt if there are enough idle resources"."""
    objects = [
        group("c1", "pg1", "q1", min_member=3),
        pod("c1", "preemptee1", "pg1", on="n1").obj(),
        pod("c1", "preemptee2", "pg1", on="n1").obj(),
        pod("c1", "preemptor1", "pg1").obj(),
        node("n1", "10", "10G"),
        queue("q1"),
    ]
    out = simulate(tmp_path, capsys, objects, PREEMPT_CONF)
    assert preempted(out) == set()
    assert bound(out)["c1/preemptor1"] == "n1"


def test_preempt_do_not_preempt_if_job_is_pipelined(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestPreempt "do not preempt if job is pipelined": pg2 already runs its minMember, so it is not
    starving and takes nothing from pg1."""
    objects = [
        group("c1", "pg1", "q1", min_member=1),
        group("c1", "pg2", "q1", min_member=1),
        pod("c1", "preemptee1", "pg1", on="n1").obj(),
        pod("c1", "preemptee2", "pg1", on="n1").obj(),
        pod("c1", "preemptee3", "pg2", on="n1").obj(),
        pod("c1", "preemptor2", "pg2").obj(),
        node("n1", "3", "3G"),
        queue("q1"),
    ]
    out = simulate(tmp_path, capsys, objects, PREEMPT_CONF)
    assert preempted(out) == set()
    assert phases(out)["c1/preemptor2"] == "Pending"


def test_preempt_one_task_of_different_job_to_fit_both_jobs_on_one_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestPreempt "preempt one task of different job to fit both jobs on one node": gang lets pg1
    give up only what it holds beyond minMember (1 of 2)."""
    objects = [
        *PRIORITY_CLASSES,
        group("c1", "pg1", "q1", min_member=1, priority_class="low-priority"),
        group("c1", "pg2", "q1", min_member=1, priority_class="high-priority"),
        pod("c1", "preemptee1", "pg1", on="n1", **{"volcano.sh/preemptable": "true"}).obj(),
        pod("c1", "preemptee2", "pg1", on="n1").obj(),
        pod("c1", "preemptor1", "pg2").obj(),
        pod("c1", "preemptor2", "pg2").obj(),
        node("n1", "2", "2G"),
        queue("q1"),
    ]
    out = simulate(tmp_path, capsys, objects, PREEMPT_CONF)
    assert len(preempted(out)) == 1
    assert phases(out)["c1/preemptee2"] == "Bound" or phases(out)["c1/preemptee1"] == "Bound"
    assert sorted(bound(out)) == sorted({"c1/preemptor1", "c1/preemptee1", "c1/preemptee2"} - preempted(out))


def test_preempt_enough_tasks_to_fit_large_task_of_different_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestPreempt "preempt enough tasks to fit large task of different job": 3 cpu idle, the 5-cpu
    preemptor needs 2 of the 3 running pods gone."""
    preemptable = {"volcano.sh/preemptable": "true"}
    objects = [
        *PRIORITY_CLASSES,
        group("c1", "pg1", "q1", min_member=1, priority_class="low-priority"),
        group("c1", "pg2", "q1", min_member=1, priority_class="high-priority"),
        pod("c1", "preemptee1", "pg1", on="n1", **preemptable).obj(),
        pod("c1", "preemptee2", "pg1", on="n1", **preemptable).obj(),
        pod("c1", "preemptee3", "pg1", on="n1", **preemptable).obj(),
        pod("c1", "preemptor1", "pg2", cpu="5", memory="5G").obj(),
        node("n1", "6", "6G"),
        queue("q1"),
    ]
    out = simulate(tmp_path, capsys, objects, PREEMPT_CONF)
    assert len(preempted(out)) == 2
    assert bound(out)["c1/preemptor1"] == "n1"


# -- reclaim: pkg/scheduler/actions/reclaim/reclaim_test.go, TestReclaim -------------------------------

RECLAIM_CONF = """\
actions: "enqueue, allocate, reclaim"
tiers:
- plugins:
  - name: conformance
    enableReclaimable: true
  - name: gang
    enableReclaimable: true
  - name: proportion
    enableReclaimable: true
- plugins:
  - name: predicates
"""


def _reclaim_objects(**preemptee1: str) -> list[dict[str, Any]]:
    return [
        *PRIORITY_CLASSES,
        group("c1", "pg1", "q1", priority_class="low-priority"),
        group("c1", "pg2", "q2", priority_class="high-priority"),
        pod("c1", "preemptee1", "pg1", on="n1", **preemptee1).obj(),
        pod("c1", "preemptee2", "pg1", on="n1").obj(),
        pod("c1", "preemptee3", "pg1", on="n1").obj(),
        pod("c1", "preemptor1", "pg2").obj(),
        node("n1", "3", "3Gi"),
        queue("q1"),
        queue("q2"),
    ]


def test_reclaim_two_queues_with_one_overusing_resource_should_reclaim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestReclaim "Two Queue with one Queue overusing resource, should reclaim": q1 holds the whole
    node, q2 deserves half of it; exactly one of q1's pods goes and q2's pod runs."""
    out = simulate(tmp_path, capsys, _reclaim_objects(**{"volcano.sh/preemptable": "true"}), RECLAIM_CONF)
    assert len(preempted(out)) == 1
    assert bound(out)["c1/preemptor1"] == "n1"


def test_reclaim_keeps_pods_marked_not_preemptable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestReclaim's case with every pod of q1 marked ``volcano.sh/preemptable: "false"``: nothing to
    take back (Volcano's reclaim skips non-preemptable tasks)."""
    objects = _reclaim_objects(**{"volcano.sh/preemptable": "false"})
    for obj in objects:
        if obj["kind"] == "Pod" and obj["metadata"]["name"] in ("preemptee2", "preemptee3"):
            obj["metadata"]["annotations"]["volcano.sh/preemptable"] = "false"
    out = simulate(tmp_path, capsys, objects, RECLAIM_CONF)
    assert preempted(out) == set()
    assert phases(out)["c1/preemptor1"] == "Pending"


# -- conformance: pkg/scheduler/plugins/conformance/conformance_test.go, TestConformancePlugin ---------

CONFORMANCE_CONF = """\
actions: "enqueue, allocate, preempt"
tiers:
- plugins:
  - name: priority
  - name: conformance
    enablePreemptable: true
- plugins:
  - name: predicates
"""


def test_conformance_plugin_never_evicts_kube_system_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestConformancePlugin "conformance plugin": of a kube-system pod and a test-namespace pod, only
    the latter is a victim. Here both are low-priority pods on the only node, a higher-priority
    preemptor needs one pod's room: the test-namespace pod goes."""
    objects = [
        MakePod("test-pod", "kube-system").req(cpu="1", memory="1Gi").priority(1).node("test-node").obj(),
        MakePod("test-pod", "test-namespace").req(cpu="1", memory="1Gi").priority(1).node("test-node").obj(),
        MakePod("preemptor", "test-namespace").req(cpu="1", memory="1Gi").priority(100).obj(),
        node("test-node", "2", "2Gi"),
    ]
    out = simulate(tmp_path, capsys, objects, CONFORMANCE_CONF)
    assert preempted(out) == {"test-namespace/test-pod"}
    assert bound(out)["test-namespace/preemptor"] == "test-node"


def test_conformance_plugin_never_evicts_critical_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestConformancePlugin's rule for critical pods (system-cluster-critical, system-node-critical):
    a preemptor that needs both pods' room gets neither."""
    objects = [
        MakePriorityClass("system-node-critical", 2000001000).obj(),
        MakePod("critical", "apps").req(cpu="1").priority(1, "system-node-critical").node("n1").obj(),
        MakePod("plain", "apps").req(cpu="1").priority(1).node("n1").obj(),
        MakePod("preemptor", "apps").req(cpu="2").priority(100).obj(),
        node("n1", "2", "2Gi"),
    ]
    out = simulate(tmp_path, capsys, objects, CONFORMANCE_CONF)
    assert preempted(out) == set()
    assert phases(out)["apps/preemptor"] == "Pending"


# -- proportion: pkg/scheduler/actions/allocate/allocate_test.go, TestAllocate ---------------------------

PROPORTION_CONF = """\
actions: "enqueue, allocate"
tiers:
- plugins:
  - name: proportion
    enableQueueOrder: true
    enableReclaimable: true
- plugins:
  - name: predicates
"""


def test_proportion_two_jobs_on_one_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TestAllocate "two Jobs on one node" (proportion's queue order): queues c1 and c2 of equal
    weight share a 2-cpu node, so each gets one of its two pods (the queue with the lower share goes
    next), not c1 both."""
    objects = [
        group("c1", "pg1", "c1"),
        group("c2", "pg2", "c2"),
        pod("c1", "pg1-p-1", "pg1").obj(),
        pod("c1", "pg1-p-2", "pg1").obj(),
        pod("c2", "pg2-p-1", "pg2").obj(),
        pod("c2", "pg2-p-2", "pg2").obj(),
        node("n1", "2", "4G"),
        queue("c1"),
        queue("c2"),
    ]
    out = simulate(tmp_path, capsys, objects, PROPORTION_CONF)
    assert bound(out) == {"c2/pg2-p-1": "n1", "c1/pg1-p-1": "n1"}


def test_proportion_high_priority_queue_should_not_block_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestAllocate "high priority queue should not block others"."""
    objects = [
        group("c1", "pg1", "c1"),
        group("c1", "pg2", "c2"),
        pod("c1", "p1", "pg1", cpu="3").obj(),
        pod("c1", "p2", "pg2", cpu="1").obj(),
        node("n1", "2", "4G"),
        queue("c1"),
        queue("c2"),
    ]
    out = simulate(tmp_path, capsys, objects, PROPORTION_CONF)
    assert bound(out) == {"c1/p2": "n1"}


# -- backfill: pkg/scheduler/actions/backfill/backfill_test.go, TestPickUpPendingTasks ------------------

BACKFILL_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
    enablePreemptable: true
    enableTaskOrder: true
    enableJobOrder: true
- plugins:
  - name: predicates
"""


def _backfill_objects() -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [
        MakePriorityClass("job-priority-1", 1).obj(),
        MakePriorityClass("job-priority-2", 2).obj(),
        group("default", "pg1", "q1", min_member=1, priority_class="job-priority-1"),
        group("default", "pg2", "q1", min_member=1, priority_class="job-priority-2"),
        node("node1", "64", "64Gi"),
        queue("q1"),
    ]
    for job in ("pg1", "pg2"):
        for task in (1, 2, 3, 4):
            objects.append(
                pod("default", f"{job}-besteffort-task-{task}", job, cpu="", memory="").priority(task).obj()
            )
            objects.append(
                pod("default", f"{job}-unbesteffort-task-{task}", job, cpu="500m").priority(task).obj()
            )
    return objects


def test_backfill_pick_up_pending_tasks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TestPickUpPendingTasks "test": backfill takes the pods without requests after allocate placed
    the others, job by job (pg2, the higher job priority, first), each job's by task priority."""
    out = simulate(tmp_path, capsys, _backfill_objects(), BACKFILL_CONF)
    order = scheduled_order(out)
    assert len(order) == 16
    assert all("unbesteffort" in key for key in order[:8])
    assert order[8:] == [
        "default/pg2-besteffort-task-4",
        "default/pg2-besteffort-task-3",
        "default/pg2-besteffort-task-2",
        "default/pg2-besteffort-task-1",
        "default/pg1-besteffort-task-4",
        "default/pg1-besteffort-task-3",
        "default/pg1-besteffort-task-2",
        "default/pg1-besteffort-task-1",
    ]


def test_without_backfill_pods_without_requests_go_in_allocate_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same input without the backfill action: gpuq's allocate places pods without requests in
    their priority order among the others (docs/design.md Semantics 15)."""
    out = simulate(tmp_path, capsys, _backfill_objects(), BACKFILL_CONF.replace(", backfill", ""))
    order = scheduled_order(out)
    assert len(order) == 16
    assert order[:2] == ["default/pg2-besteffort-task-4", "default/pg2-unbesteffort-task-4"]


# -- enqueue: pkg/scheduler/actions/enqueue/enqueue_test.go, TestEnqueue --------------------------------

ENQUEUE_CONF = """\
actions: "enqueue"
tiers:
- plugins:
  - name: proportion
    enableQueueOrder: true
    enableJobEnqueued: true
  - name: gang
    enableJobOrder: true
- plugins:
  - name: predicates
"""


def _pending_group(name: str, queue_name: str, min_member: int, **min_resources: str) -> dict[str, Any]:
    made = MakePodGroup(name, "c1").queue(queue_name).min_member(min_member).phase("Pending")
    if min_resources:
        made.min_resources(**min_resources)
    return made.obj()


def test_enqueue_when_podgroup_status_is_pending(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TestEnqueue "when podgroup status is pending": both PodGroups go Inqueue (and, with only the
    enqueue action configured, no pod is placed)."""
    objects = [
        _pending_group("pg1", "c1", 1),
        _pending_group("pg2", "c2", 1),
        pod("c1", "p1", "pg1", cpu="3").obj(),
        pod("c1", "p2", "pg2", cpu="1").obj(),
        MakeQueue("c1").weight(1).capability(cpu="4", memory="4G").obj(),
        MakeQueue("c2").weight(1).capability(cpu="4", memory="4G").obj(),
        node("n1", "8", "8G"),
    ]
    out = simulate(tmp_path, capsys, objects, ENQUEUE_CONF)
    assert {g["name"]: g["phase"] for g in out["podGroups"]} == {"pg1": "Inqueue", "pg2": "Inqueue"}
    assert bound(out) == {}


def test_enqueue_refused_when_queue_resources_are_less_than_min_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestEnqueue "pggroup cannot enqueue because queue resources are less than podgroup
    MinResources": proportion keeps the PodGroup Pending."""
    objects = [
        _pending_group("pg1", "c1", 1, cpu="8", memory="8G"),
        MakeQueue("c1").weight(1).capability(cpu="1", memory="1G").obj(),
        node("n1", "16", "16G"),
    ]
    out = simulate(tmp_path, capsys, objects, ENQUEUE_CONF)
    assert {g["name"]: g["phase"] for g in out["podGroups"]} == {"pg1": "Pending"}
