"""kube-scheduler's DefaultPreemption, the pure part (common/model/victim_selection.py), ported from
pkg/scheduler/framework/plugins/defaultpreemption/default_preemption_test.go.

Each case names its upstream test and case. Upstream runs NodeResourcesFit as the filter; here
``fits`` is that rule written out for the one node (requests of the pods left plus the preemptor
within the node's capacity), which is what the scheduler's ``Framework.fits_without`` answers with
the real plugins (tests/unit/scheduler/actions/test_default_preemption_ported.py runs them). Upstream
start times ``epochTime1..6`` are nanoseconds apart; the API writes ``status.startTime`` in seconds,
so here they are seconds apart, in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpuq_k8s.common.model.action_args import CandidateLimits
from gpuq_k8s.common.model.disruption_budget import NO_BUDGETS, Budgets, parse_disruption_budget
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.victim_selection import (
    Candidate,
    Victims,
    best_first,
    candidate_count,
    more_important_first,
    offset,
    pick_one_node,
    select_victims_on_node,
)
from tests.testing.builders import MakePod, MakePodDisruptionBudget

NEG, LOW, MID, HIGH, VERY_HIGH = -100, 0, 100, 1000, 10000
SMALL = {"cpu": "100m", "memory": "100"}
MEDIUM = {"cpu": "200m", "memory": "200"}
LARGE = {"cpu": "300m", "memory": "300"}
VERY_LARGE = {"cpu": "500m", "memory": "500"}
CAPACITY = {"cpu": 500, "memory": 500}  # the upstream nodes: veryLargeRes


def epoch(second: int) -> str:
    return f"1970-01-01T00:00:{second:02d}Z"


def pod(
    name: str,
    prio: int,
    req: dict[str, str] | None = None,
    *,
    labels: dict[str, str] | None = None,
    start: int | None = None,
) -> PodInfo:
    made = MakePod(name, "default").priority(prio).labels(labels or {}).node("n")
    if req:
        made.req(req)
    if start is not None:
        made.started(epoch(start))
    return made.info()


def fits_node(preemptor: PodInfo, on_node: Sequence[PodInfo]):  # type: ignore[no-untyped-def]
    """NodeResourcesFit on one node of ``CAPACITY``: the preemptor fits with ``removed`` gone."""

    def fits(removed: Sequence[PodInfo]) -> bool:
        gone = {p.key for p in removed}
        for resource, capacity in CAPACITY.items():
            used = sum(p.requests.amount(resource) for p in on_node if p.key not in gone)
            if used + preemptor.requests.amount(resource) > capacity:
                return False
        return True

    return fits


def select(preemptor: PodInfo, on_node: Sequence[PodInfo], budgets: Budgets = NO_BUDGETS) -> Victims | None:
    """SelectVictimsOnNode with kube's eligibility (lower priority than the preemptor)."""
    potential = [p for p in on_node if (p.priority or 0) < (preemptor.priority or 0)]
    return select_victims_on_node(potential, fits_node(preemptor, on_node), budgets)


def victims_of(selection: Victims | None) -> list[str]:
    assert selection is not None
    return sorted(p.name for p in selection.pods)


# -- TestDryRunPreemption ---------------------------------------------------------------------------


def test_a_pod_that_fits_on_both_nodes_when_lower_priority_pods_are_preempted() -> None:
    """TestDryRunPreemption "a pod that fits on both nodes when lower priority pods are preempted"."""
    p = pod("p", HIGH, LARGE)
    assert victims_of(select(p, [pod("p1", MID, LARGE)])) == ["p1"]
    assert victims_of(select(p, [pod("p2", MID, LARGE)])) == ["p2"]


def test_other_pods_running_are_higher_priority_no_preemption() -> None:
    """TestDryRunPreemption "a pod that would fit on the nodes, but other pods running are higher
    priority, no preemption would happen" (and no filter run: nothing to remove)."""
    p = pod("p", LOW, LARGE)
    calls: list[int] = []

    def fits(removed: Sequence[PodInfo]) -> bool:
        calls.append(len(removed))
        return True

    assert select_victims_on_node([], fits, NO_BUDGETS) is None
    assert select(p, [pod("p1", MID, LARGE)]) is None
    assert calls == []


def test_medium_priority_pod_is_preempted_but_lower_priority_one_stays_as_it_is_small() -> None:
    """TestDryRunPreemption "medium priority pod is preempted, but lower priority one stays as it is
    small"."""
    p = pod("p", HIGH, LARGE)
    assert victims_of(select(p, [pod("p1.1", LOW, SMALL), pod("p1.2", MID, LARGE)])) == ["p1.2"]
    assert victims_of(select(p, [pod("p2", MID, LARGE)])) == ["p2"]


def test_mixed_priority_pods_are_preempted() -> None:
    """TestDryRunPreemption "mixed priority pods are preempted": node2's only pod is not lower."""
    p = pod("p", HIGH, LARGE)
    node1 = [
        pod("p1.1", MID, SMALL),
        pod("p1.2", LOW, SMALL),
        pod("p1.3", MID, MEDIUM),
        pod("p1.4", HIGH, SMALL),
    ]
    assert victims_of(select(p, node1)) == ["p1.2", "p1.3"]
    assert select(p, [pod("p2", HIGH, LARGE)]) is None


def test_mixed_priority_pods_are_preempted_pick_later_start_time_when_priorities_are_equal() -> None:
    """TestDryRunPreemption "mixed priority pods are preempted, pick later StartTime one when
    priorities are equal"."""
    p = pod("p", HIGH, LARGE)
    node1 = [
        pod("p1.1", LOW, SMALL, start=5),
        pod("p1.2", LOW, SMALL, start=4),
        pod("p1.3", MID, MEDIUM, start=3),
        pod("p1.4", HIGH, SMALL, start=2),
    ]
    assert victims_of(select(p, node1)) == ["p1.1", "p1.3"]


def test_get_unschedulable_when_the_filters_reject_the_node() -> None:
    """TestDryRunPreemption "get Unschedulable in the preemption phase when the filter plugins
    filtering the nodes": a node the filters reject even with every victim gone is no candidate."""
    assert select_victims_on_node([pod("p1", MID, LARGE)], lambda removed: False, NO_BUDGETS) is None


FOO = {"app": "foo"}


def budgets(allowed: int, disrupted: tuple[str, ...] = ()) -> Budgets:
    made = MakePodDisruptionBudget("pdb", "default").match_labels(FOO).allowed(allowed, disrupted)
    return Budgets([parse_disruption_budget(made.obj())])


@pytest.mark.parametrize(
    ("case", "on_node", "disrupted", "violations"),
    [
        ("preemption with violation of same pdb", ["p1.1", "p1.2"], (), 1),
        (
            "preemption with violation of the pdb with pod whose eviction was processed, the victim "
            "doesn't belong to DisruptedPods",
            ["p1.1", "p1.2"],
            ("p2",),
            1,
        ),
        (
            "preemption with violation of the pdb with pod whose eviction was processed, the victim "
            "belongs to DisruptedPods",
            ["p1.1", "p1.2"],
            ("p1.2",),
            0,
        ),
        (
            "preemption with violation of the pdb with pod whose eviction was processed, the victim "
            "which belongs to DisruptedPods is treated as 'nonViolating'",
            ["p1.1", "p1.2", "p1.3"],
            ("p1.3",),
            1,
        ),
    ],
)
def test_dry_run_preemption_pdb_cases(
    case: str, on_node: list[str], disrupted: tuple[str, ...], violations: int
) -> None:
    """TestDryRunPreemption's PodDisruptionBudget cases (named by ``case``): one disruption allowed,
    every pod of the node covered and every one a victim of the very large preemptor."""
    p = pod("p", HIGH, VERY_LARGE)
    node = [pod(name, MID, MEDIUM, labels=FOO) for name in on_node]
    selection = select(p, node, budgets(1, disrupted))
    assert victims_of(selection) == on_node, case
    assert selection is not None and selection.violations == violations, case


def test_budget_violating_victims_are_reprieved_first() -> None:
    """SelectVictimsOnNode's order: of two equal pods one of which a budget protects, the unprotected
    one is the victim (the protected one, violating, is given back first)."""
    p = pod("p", HIGH, LARGE)
    node = [pod("guarded", MID, MEDIUM, labels=FOO, start=1), pod("plain", MID, MEDIUM, start=2)]
    selection = select(p, node, budgets(0))
    assert victims_of(selection) == ["plain"]
    assert selection is not None and selection.violations == 0
    # Without the budget the one started later (less important) goes: "plain" again, by start time;
    # with the start times swapped, the budget still decides.
    node = [pod("guarded", MID, MEDIUM, labels=FOO, start=2), pod("plain", MID, MEDIUM, start=1)]
    assert victims_of(select(p, node)) == ["guarded"]
    assert victims_of(select(p, node, budgets(0))) == ["plain"]


def test_victims_are_listed_most_important_first() -> None:
    p = pod("p", HIGH, VERY_LARGE)
    selection = select(p, [pod("a", LOW, SMALL), pod("b", MID, SMALL), pod("c", NEG, SMALL)])
    assert selection is not None and [v.name for v in selection.pods] == ["b", "a", "c"]


# -- MoreImportantPod ----------------------------------------------------------------------------


def test_more_important_first_is_priority_then_earlier_start_and_not_started_last() -> None:
    pods = [
        pod("new", MID),
        pod("late", MID, start=9),
        pod("early", MID, start=1),
        pod("top", HIGH, start=50),
    ]
    assert [p.name for p in more_important_first(pods)] == ["top", "early", "late", "new"]


# -- TestSelectBestCandidate (pickOneNodeForPreemption) ---------------------------------------------


def best_node(preemptor: PodInfo, nodes: dict[str, list[PodInfo]]) -> str:
    found = [
        Candidate(name, selection)
        for name, on_node in nodes.items()
        if (selection := select(preemptor, on_node)) is not None and selection.pods
    ]
    best = pick_one_node(found)
    assert best is not None
    return best.node


def test_a_pod_that_fits_on_both_nodes_picks_either() -> None:
    """TestSelectBestCandidate "a pod that fits on both nodes when lower priority pods are preempted"."""
    p = pod("p", HIGH, LARGE)
    nodes = {"node1": [pod("p1", MID, LARGE, start=0)], "node2": [pod("p2", MID, LARGE, start=0)]}
    assert best_node(p, nodes) in ("node1", "node2")


def test_node_with_min_highest_priority_pod_is_picked() -> None:
    """TestSelectBestCandidate "node with min highest priority pod is picked"."""
    p = pod("p", HIGH, VERY_LARGE)
    nodes = {
        "node1": [pod("p1.1", MID, MEDIUM, start=0), pod("p1.2", MID, LARGE, start=0)],
        "node2": [pod("p2.1", MID, MEDIUM, start=0), pod("p2.2", LOW, MEDIUM, start=0)],
        "node3": [pod("p3.1", LOW, MEDIUM, start=0), pod("p3.2", LOW, MEDIUM, start=0)],
    }
    assert best_node(p, nodes) == "node3"


def test_when_highest_priorities_are_the_same_minimum_sum_of_priorities_is_picked() -> None:
    """TestSelectBestCandidate "when highest priorities are the same, minimum sum of priorities is
    picked"."""
    p = pod("p", HIGH, VERY_LARGE)
    nodes = {
        "node1": [pod("p1.1", MID, MEDIUM, start=0), pod("p1.2", MID, LARGE, start=0)],
        "node2": [pod("p2.1", MID, LARGE, start=0), pod("p2.2", LOW, MEDIUM, start=0)],
        "node3": [pod("p3.1", MID, MEDIUM, start=0), pod("p3.2", MID, MEDIUM, start=0)],
    }
    assert best_node(p, nodes) == "node2"


def test_when_highest_priority_and_sum_are_the_same_minimum_number_of_pods_is_picked() -> None:
    """TestSelectBestCandidate "when highest priority and sum are the same, minimum number of pods is
    picked"."""
    p = pod("p", HIGH, VERY_LARGE)
    nodes = {
        "node1": [
            pod("p1.1", MID, SMALL, start=0),
            pod("p1.2", NEG, SMALL, start=0),
            pod("p1.3", MID, SMALL, start=0),
            pod("p1.4", NEG, SMALL, start=0),
        ],
        "node2": [pod("p2.1", MID, LARGE, start=0), pod("p2.2", NEG, MEDIUM, start=0)],
        "node3": [
            pod("p3.1", MID, MEDIUM, start=0),
            pod("p3.2", NEG, SMALL, start=0),
            pod("p3.3", LOW, SMALL, start=0),
        ],
    }
    assert best_node(p, nodes) == "node2"


def test_sum_of_adjusted_priorities_is_considered() -> None:
    """TestSelectBestCandidate "sum of adjusted priorities is considered" (MaxInt32+1 added to each
    priority, so fewer negative-priority victims do not lose to more of them)."""
    p = pod("p", HIGH, VERY_LARGE)
    nodes = {
        "node1": [
            pod("p1.1", MID, SMALL, start=0),
            pod("p1.2", NEG, SMALL, start=0),
            pod("p1.3", NEG, SMALL, start=0),
        ],
        "node2": [pod("p2.1", MID, LARGE, start=0), pod("p2.2", NEG, MEDIUM, start=0)],
        "node3": [
            pod("p3.1", MID, MEDIUM, start=0),
            pod("p3.2", NEG, SMALL, start=0),
            pod("p3.3", LOW, SMALL, start=0),
        ],
    }
    assert best_node(p, nodes) == "node2"


def test_non_overlapping_lowest_high_priority_sum_priorities_and_number_of_pods() -> None:
    """TestSelectBestCandidate "non-overlapping lowest high priority, sum priorities, and number of pods"."""
    p = pod("p", VERY_HIGH, VERY_LARGE)
    nodes = {
        "node1": [
            pod("p1.1", MID, SMALL, start=0),
            pod("p1.2", LOW, SMALL, start=0),
            pod("p1.3", LOW, SMALL, start=0),
        ],
        "node2": [pod("p2.1", HIGH, LARGE, start=0)],
        "node3": [
            pod("p3.1", MID, MEDIUM, start=0),
            pod("p3.2", LOW, SMALL, start=0),
            pod("p3.3", LOW, SMALL, start=0),
            pod("p3.4", LOW, MEDIUM, start=0),
        ],
        "node4": [
            pod("p4.1", MID, MEDIUM, start=0),
            pod("p4.2", MID, SMALL, start=0),
            pod("p4.3", MID, SMALL, start=0),
            pod("p4.4", NEG, SMALL, start=0),
        ],
    }
    assert best_node(p, nodes) == "node1"


def test_same_priority_same_number_of_victims_different_start_time_for_each_nodes_pod() -> None:
    """TestSelectBestCandidate "same priority, same number of victims, different start time for each
    node's pod"."""
    p = pod("p", HIGH, VERY_LARGE)
    nodes = {
        "node1": [pod("p1.1", MID, MEDIUM, start=2), pod("p1.2", MID, MEDIUM, start=2)],
        "node2": [pod("p2.1", MID, MEDIUM, start=3), pod("p2.2", MID, MEDIUM, start=3)],
        "node3": [pod("p3.1", MID, MEDIUM, start=1), pod("p3.2", MID, MEDIUM, start=1)],
    }
    assert best_node(p, nodes) == "node2"


def test_same_priority_same_number_of_victims_different_start_time_for_all_pods() -> None:
    """TestSelectBestCandidate "same priority, same number of victims, different start time for all pods"."""
    p = pod("p", HIGH, VERY_LARGE)
    nodes = {
        "node1": [pod("p1.1", MID, MEDIUM, start=4), pod("p1.2", MID, MEDIUM, start=2)],
        "node2": [pod("p2.1", MID, MEDIUM, start=5), pod("p2.2", MID, MEDIUM, start=1)],
        "node3": [pod("p3.1", MID, MEDIUM, start=3), pod("p3.2", MID, MEDIUM, start=6)],
    }
    assert best_node(p, nodes) == "node3"


def test_different_priority_same_number_of_victims_different_start_time_for_all_pods() -> None:
    """TestSelectBestCandidate "different priority, same number of victims, different start time for
    all pods"."""
    p = pod("p", HIGH, VERY_LARGE)
    nodes = {
        "node1": [pod("p1.1", LOW, MEDIUM, start=4), pod("p1.2", MID, MEDIUM, start=2)],
        "node2": [pod("p2.1", MID, MEDIUM, start=6), pod("p2.2", LOW, MEDIUM, start=1)],
        "node3": [pod("p3.1", LOW, MEDIUM, start=3), pod("p3.2", MID, MEDIUM, start=5)],
    }
    assert best_node(p, nodes) == "node2"


def test_fewest_budget_violations_come_first() -> None:
    """pickOneNodeForPreemption's first criterion: a node whose victims violate fewer budgets wins over
    one with lower-priority victims."""
    violating = Candidate("a", Victims((pod("x", NEG, SMALL),), violations=1))
    clean = Candidate("b", Victims((pod("y", MID, SMALL),), violations=0))
    best = pick_one_node([violating, clean])
    assert best is not None and best.node == "b"
    assert pick_one_node([]) is None


# -- GetOffsetAndNumCandidates --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "limits", "count"),
    [
        (5, CandidateLimits(40, 1), 2),  # "... DefaultPreemptionArgs limits to 2"
        (5, CandidateLimits(), 5),  # at least 100, never more than there are
        (5000, CandidateLimits(), 100),  # 10% is 500; Volcano's maximum, 100
        (5000, CandidateLimits(10, 100, None), 500),  # kube's own: 10%
        (5000, CandidateLimits(10, 1, 50), 50),
        (50, CandidateLimits(0, 3), 3),
    ],
)
def test_candidate_count(nodes: int, limits: CandidateLimits, count: int) -> None:
    assert candidate_count(nodes, limits) == count


def test_candidate_limits_of_the_preempt_arguments() -> None:
    assert CandidateLimits.of({}) == CandidateLimits(10, 100, 100)
    given = {
        "minCandidateNodesPercentage": 40,
        "minCandidateNodesAbsolute": 2,
        "maxCandidateNodesAbsolute": 7,
    }
    assert CandidateLimits.of(given) == CandidateLimits(40, 2, 7)


def test_the_offset_is_the_pods_own_and_within_the_nodes() -> None:
    a, b = MakePod("a", "ns").info(), MakePod("b", "ns").info()
    assert offset(a, 7) == offset(a, 7)
    assert {offset(MakePod(f"p{i}", "ns").info(), 7) for i in range(50)} == set(range(7))  # spread
    assert 0 <= offset(b, 7) < 7 and offset(a, 0) == 0


# -- best_first: cheap candidates verified best first -----------------------------------------------


def test_best_first_verifies_the_best_cheap_candidate_and_re_ranks_a_rejected_one() -> None:
    """a ranks first on its room, but the real filters reject its victims and need a more important
    one too: re-chosen, it ranks behind b, which is verified and wins; c is never asked."""
    a = Candidate("a", Victims((pod("a1", LOW),)))
    b = Candidate("b", Victims((pod("b1", MID),)))
    c = Candidate("c", Victims((pod("c1", HIGH),)))
    asked: list[str] = []

    def verify(candidate: Candidate) -> Candidate | None:
        asked.append(candidate.node)
        if candidate.node == "a" and len(candidate.victims.pods) == 1:
            return Candidate("a", Victims((pod("a1", LOW), pod("a2", HIGH))))
        return candidate

    best = best_first([c, b, a], verify)
    assert best is not None and best.node == "b"
    assert asked == ["a", "b"]


def test_best_first_drops_a_node_the_filters_reject_whatever_is_evicted() -> None:
    a = Candidate("a", Victims((pod("a1", LOW),)))
    b = Candidate("b", Victims((pod("b1", MID),)))
    best = best_first([a, b], lambda c: None if c.node == "a" else c)
    assert best is not None and best.node == "b"
    assert best_first([a], lambda c: None) is None


def test_best_first_takes_a_re_chosen_candidate_that_still_ranks_first() -> None:
    a = Candidate("a", Victims((pod("a1", LOW),)))
    b = Candidate("b", Victims((pod("b1", HIGH),)))
    again = Candidate("a", Victims((pod("a1", LOW), pod("a2", LOW))))
    best = best_first([a, b], lambda c: again if c is a else c)
    assert best is again
