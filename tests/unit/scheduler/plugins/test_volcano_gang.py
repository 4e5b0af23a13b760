"""gang (scheduler/plugins/gang.py): scenarios ported from Volcano's unit tests, run through ``gpuq
simulate``.

- ``pkg/scheduler/actions/allocate/allocate_test.go`` TestAllocate, with its tier (gang, drf,
  proportion, predicates, nodeorder and their switches): a job binds once minMember of its pods
  can be placed, and binds nothing while it cannot.
- ``pkg/scheduler/plugins/gang/gang_test.go`` TestOnSessionCloseConditions: Volcano sets PodGroup
  conditions from gang's session close; gpuq's report has the PodGroup's phase, so "ready job should
  set scheduled" is checked as the PodGroup going Running once allocate binds its pods, and "inqueue
  job with fit errors should set unschedulable" (upstream injects a fit error into the session) as the
  same job on a node with room for one of its two pods: nothing bound, the PodGroup not Running.
- gang's preemptable function (a job keeps minMember) is ported in
  tests/unit/scheduler/actions/test_volcano_ported.py (preempt_test.go "preempt one task of different
  job to fit both jobs on one node").
- ``minTaskMember`` as Volcano's gang enforces it (``job_info.go`` CheckTaskValid, CheckTaskReady):
  TestAllocate "master's min member can not be allocated, break from allocating", and
  ``pkg/scheduler/api/job_info_test.go`` TestParseMinMemberInfoChanged (a PodGroup update replaces the
  per-task minimums).
- A gang that cannot reach its quorum holds its reservations no longer than its Permit timeout
  (``permitWaitingTimeSeconds``) and gives way: the pods its rollback can help are retried at once.

Not ported, because gpuq lacks the feature: gang_test.go "inqueue job blocked by external scheduling
gates" needs scheduling gates; the network-topology (HyperNode) cases of allocate_test.go need
HyperNodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.testing.builders import MakePodGroup, MakeQueue
from tests.testing.designs import ALLOCATE_CONF
from tests.testing.volcano_scenarios import bound, phases, simulate, volcano_node, volcano_pod

# gang_test.go gangTier() (the sub-job switches are Volcano's HyperNode sub-jobs, which gpuq lacks).
GANG_CONF = """\
actions: "enqueue, allocate"
tiers:
- plugins:
  - name: gang
    enableJobReady: true
    enableJobPipelined: true
- plugins:
  - name: predicates
"""


def _group(min_member: int, min_task_member: dict[str, int] | None = None) -> dict[str, Any]:
    made = MakePodGroup("pg1", "c1").queue("c1").min_member(min_member).phase("Inqueue")
    if min_task_member is not None:
        made.spec(minTaskMember=min_task_member)
    return made.obj()


def _roles(*roles: tuple[str, str]) -> list[dict[str, Any]]:
    """Pods of pg1 (1 cpu, 1G) with their task (``volcano.sh/task-spec``) and the node role they need."""
    out = []
    for name, role in roles:
        made = volcano_pod("c1", name, "1", "1G").group("pg1").labels({"volcano.sh/task-spec": role})
        out.append(made.node_selector({"nodeRole": role}).obj())
    return out


def test_allocate_test_go_tasks_not_used_up_continue_until_min_member(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestAllocate "prepredicate failed and tasks are not used up, continue on until min member
    meet": pg1 (minMember 2) has masters p0, p1 (nodeSelector nodeRole=master) and workers p2, p3
    (nodeRole=worker); n1 (master) and n2 (worker) have 1 cpu each. Expected binds: c1/p0 on n1 and
    c1/p2 on n2, exactly two."""
    objects: list[dict[str, Any]] = [MakeQueue("c1").weight(1).obj(), _group(2)]
    for name, role in (("p0", "master"), ("p1", "master"), ("p2", "worker"), ("p3", "worker")):
        made = volcano_pod("c1", name, "1", "1G").group("pg1").labels({"volcano.sh/task-spec": role})
        objects.append(made.node_selector({"nodeRole": role}).obj())
    objects += [
        volcano_node("n1", "1", "2Gi").label("nodeRole", "master").obj(),
        volcano_node("n2", "1", "2Gi").label("nodeRole", "worker").obj(),
    ]
    out = simulate(tmp_path, capsys, objects, ALLOCATE_CONF)
    assert bound(out) == {"c1/p0": "n1", "c1/p2": "n2"}


def test_allocate_test_go_one_job_with_two_pods_on_one_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestAllocate "one Job with two Pods on one node": pg1 (minMember 0), p1 and p2 (1 cpu, 1G) on n1
    (2 cpu, 4Gi). Expected binds: both on n1."""
    objects = [
        MakeQueue("c1").weight(1).obj(),
        _group(0),
        volcano_pod("c1", "p1", "1", "1G").group("pg1").obj(),
        volcano_pod("c1", "p2", "1", "1G").group("pg1").obj(),
        volcano_node("n1", "2", "4Gi").obj(),
    ]
    out = simulate(tmp_path, capsys, objects, ALLOCATE_CONF)
    assert bound(out) == {"c1/p1": "n1", "c1/p2": "n1"}


def _on_session_close_case(node_cpu: str) -> list[dict[str, Any]]:
    """gang_test.go's objects: queue c1, pg1 (c1, minMember 2, Inqueue), pending pods p1 and p2
    (1 cpu, 1G), node n1 (10 cpu, 10G upstream; ``node_cpu`` here)."""
    return [
        MakeQueue("c1").weight(1).obj(),
        _group(2),
        volcano_pod("c1", "p1", "1", "1G").group("pg1").obj(),
        volcano_pod("c1", "p2", "1", "1G").group("pg1").obj(),
        volcano_node("n1", node_cpu, "10G").obj(),
    ]


def test_gang_test_go_ready_job_should_set_scheduled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestOnSessionCloseConditions "ready job should set scheduled", with the job made ready by
    allocate: upstream's p1 and p2 already run on n1 when the session opens; here they are pending and
    n1 has room for both, so gang lets both bind and the PodGroup goes Running. The upstream objects
    as they are (both pods running) are the next test."""
    out = simulate(tmp_path, capsys, _on_session_close_case("10"), GANG_CONF)
    assert {g["name"]: g["phase"] for g in out["podGroups"]} == {"pg1": "Running"}
    assert bound(out) == {"c1/p1": "n1", "c1/p2": "n1"}


def test_gang_test_go_ready_job_already_running_should_set_scheduled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestOnSessionCloseConditions "ready job should set scheduled" with upstream's objects: p1 and p2
    already run on n1 when the scheduler starts. minMember of pg1's pods are bound, so it is Running,
    as gang's session close decides, though gpuq bound none of them."""
    objects = [
        MakeQueue("c1").weight(1).obj(),
        _group(2),
        volcano_pod("c1", "p1", "1", "1G", "n1").group("pg1").obj(),
        volcano_pod("c1", "p2", "1", "1G", "n1").group("pg1").obj(),
        volcano_node("n1", "10", "10G").obj(),
    ]
    out = simulate(tmp_path, capsys, objects, GANG_CONF)
    assert {g["name"]: g["phase"] for g in out["podGroups"]} == {"pg1": "Running"}
    assert bound(out) == {"c1/p1": "n1", "c1/p2": "n1"}


def test_gang_test_go_inqueue_job_with_fit_errors_binds_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestOnSessionCloseConditions "inqueue job with fit errors should set unschedulable", with the
    fit error real: n1 has 1 cpu, room for one of pg1's two pods. A gang that cannot be fully placed
    binds nothing, and its PodGroup does not go Running."""
    out = simulate(tmp_path, capsys, _on_session_close_case("1"), GANG_CONF)
    assert bound(out) == {}
    assert phases(out) == {"c1/p1": "Pending", "c1/p2": "Pending"}
    assert {g["name"]: g["phase"] for g in out["podGroups"]} == {"pg1": "Inqueue"}


def test_allocate_test_go_master_min_member_can_not_be_allocated_break_from_allocating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestAllocate "master's min member can not be allocated, break from allocating": pg1 (minMember
    2, minTaskMember master 2, worker 0): masters p0, p1 (nodeRole=master) and workers p2, p3; n1
    (master) has 1 cpu, n2 (worker) 2. Only one master fits, so the job is not ready although three of
    its pods could be placed: nothing binds (without the per-task minimum, p0, p2 and p3 bound)."""
    objects: list[dict[str, Any]] = [MakeQueue("c1").weight(1).obj(), _group(2, {"master": 2, "worker": 0})]
    objects += _roles(("p0", "master"), ("p1", "master"), ("p2", "worker"), ("p3", "worker"))
    objects += [
        volcano_node("n1", "1", "2Gi").label("nodeRole", "master").obj(),
        volcano_node("n2", "2", "2Gi").label("nodeRole", "worker").obj(),
    ]
    out = simulate(tmp_path, capsys, objects, ALLOCATE_CONF)
    assert bound(out) == {}
    reasons = {p["name"]: p["reason"] for p in out["pods"]}
    assert any("task master has 1 of its minTaskMember 2" in (r or "") for r in reasons.values()), reasons


@pytest.mark.parametrize(("min_member", "runs"), [(3, False), (2, True)])
def test_a_task_without_enough_pods_makes_the_job_invalid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], min_member: int, runs: bool
) -> None:
    """Volcano's gang validJobFn (``CheckTaskValid``): a job whose task has fewer pods than its
    minTaskMember (master 2, one master pod) is not scheduled at all ("Not enough valid pods of each
    task"); with minMember below the sum of the task minimums (2 < 3) the per-task rule does not apply,
    as in Volcano, and the job runs."""
    objects = [
        MakeQueue("c1").weight(1).obj(),
        _group(min_member, {"master": 2, "worker": 1}),
        *_roles(("m0", "master"), ("w0", "worker"), ("w1", "worker")),
        volcano_node("n1", "4", "4Gi").label("nodeRole", "master").obj(),
        volcano_node("n2", "4", "4Gi").label("nodeRole", "worker").obj(),
    ]
    out = simulate(tmp_path, capsys, objects, ALLOCATE_CONF)
    if runs:
        assert bound(out) == {"c1/m0": "n1", "c1/w0": "n2", "c1/w1": "n2"}
        return
    assert bound(out) == {}
    reason = next(p["reason"] for p in out["pods"] if p["name"] == "m0")
    assert (
        "PodGroup c1/pg1 has not enough pods of each task for gang-scheduling: "
        "task master has 1 of its minTaskMember 2"
    ) in reason
