"""The nomination rules (common/model/nomination.py), with kube-scheduler's own cases where it has
them: ``TestPodEligibleToPreemptOthers`` of
pkg/scheduler/framework/plugins/defaultpreemption/default_preemption_test.go, and the priority rule
of ``addGENominatedPods`` (pkg/scheduler/framework/runtime/framework.go: nominated pods of priority
at least the pod's, other than the pod itself)."""

from __future__ import annotations

import pytest

from gpuq_k8s.common.model.nomination import (
    NOT_ELIGIBLE,
    PREEMPT_NEVER,
    eligible_to_preempt,
    holds_room_for,
    terminating_by_preemption,
)
from gpuq_k8s.common.model.pods import PodInfo
from tests.testing.builders import MakePod

HIGH, MID, LOW = 1000, 100, 10
DISRUPTED = {
    "phase": "Running",
    "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}],
}


def pod(
    name: str, priority: int, node: str = "", *, terminating: bool = False, victim: bool = False
) -> PodInfo:
    made = MakePod(name).uid(name).priority(priority)
    if node:
        made.node(node)
    if terminating:
        made.deleting()
    obj = made.obj()
    if victim:
        obj["status"] = DISRUPTED
    return PodInfo.from_dict(obj)


# -- TestPodEligibleToPreemptOthers --------------------------------------------------------------------


def test_pod_with_nominated_node_whose_node_is_unresolvable_may_preempt_again() -> None:
    """Case "Pod with nominated node": a terminating pod on node1, but node1 is now
    UnschedulableAndUnresolvable for the pod (a taint it does not tolerate): eligible."""
    preemptor = pod("p_with_nominated_node", HIGH)
    on_node = [pod("p1", LOW, "node1", terminating=True, victim=True)]
    assert eligible_to_preempt(preemptor, "node1", on_node, nominated_node_unresolvable=True) is None


def test_pod_without_nominated_node_may_preempt() -> None:
    """Case "Pod without nominated node"."""
    assert eligible_to_preempt(pod("p_without_nominated_node", HIGH), "", []) is None


def test_pod_with_preempt_never_policy_may_not() -> None:
    """Case "Pod with 'PreemptNever' preemption policy"."""
    never = PodInfo.from_dict(MakePod("p").uid("p").priority(HIGH).preemption_policy("Never").obj())
    assert eligible_to_preempt(never, "", []) == PREEMPT_NEVER


def test_preemption_victim_terminating_with_the_disruption_condition_makes_it_wait() -> None:
    """Case "preemption victim pod terminating, as indicated by the dedicated DisruptionTarget
    condition": not eligible (it is not preempted for twice)."""
    on_node = [pod("p1", LOW, "node1", terminating=True, victim=True)]
    why = eligible_to_preempt(pod("p_with_nominated_node", HIGH), "node1", on_node)
    assert why is not None and why.startswith(NOT_ELIGIBLE) and "Pod/ns/p1" in why


def test_non_victim_pods_terminating_do_not() -> None:
    """Case "non-victim Pods terminating": deleting without the DisruptionTarget condition (a user's
    delete) is no preemption of ours: eligible."""
    on_node = [pod("p1", LOW, "node1", terminating=True)]
    assert eligible_to_preempt(pod("p_with_nominated_node", HIGH), "node1", on_node) is None


def test_a_victim_whose_eviction_is_in_flight_counts_as_terminating() -> None:
    """gpuq's addition: between the DELETE and the watch showing it, the scheduler's own record of
    the eviction (``evicting``) says the same as the condition would."""
    victim = pod("p1", LOW, "node1")
    assert not terminating_by_preemption(victim)
    assert terminating_by_preemption(victim, evicting={"ns/p1"})
    why = eligible_to_preempt(pod("p", HIGH), "node1", [victim], evicting={"ns/p1"})
    assert why is not None and why.startswith(NOT_ELIGIBLE)


def test_only_lower_priority_terminating_pods_hold_it_back() -> None:
    """kube-scheduler compares priorities: a terminating victim of equal or higher priority (not one
    this pod preempted) does not make it wait."""
    on_node = [pod("p1", HIGH, "node1", terminating=True, victim=True)]
    assert eligible_to_preempt(pod("p", HIGH), "node1", on_node) is None


# -- addGENominatedPods ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nominated", "scheduled", "holds"),
    [
        (HIGH, LOW, True),  # a lower-priority pod does not take the room
        (MID, MID, True),  # nor one of equal priority
        (LOW, HIGH, False),  # a higher-priority pod does not see it
    ],
)
def test_nominated_pods_hold_room_for_pods_of_lower_or_equal_priority(
    nominated: int, scheduled: int, holds: bool
) -> None:
    assert holds_room_for(pod("nominated", nominated), pod("other", scheduled)) is holds


def test_a_pod_never_holds_room_against_itself() -> None:
    assert not holds_room_for(pod("p", HIGH), pod("p", HIGH))
