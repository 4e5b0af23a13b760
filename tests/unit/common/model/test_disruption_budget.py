"""PodDisruptionBudgets as preemption weighs them (common/model/disruption_budget.py); their label
selectors are common/model/placement/label_selector.py's (tested with it).

The split into violating and non-violating pods ports kube-scheduler's ``filterPodsWithPDBViolation``
(pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go); the cases name the
upstream test of default_preemption_test.go whose budgets they reproduce.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuq_k8s.common.model.disruption_budget import (
    Budgets,
    DisruptionBudget,
    derived_disruptions_allowed,
    parse_disruption_budget,
)
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.pods import PodInfo
from tests.testing.builders import MakePod, MakePodDisruptionBudget


def pod(name: str, *, labels: dict[str, str] | None = None, namespace: str = "ns", node: str = "") -> PodInfo:
    made = MakePod(name, namespace).labels(labels or {})
    return (made.node(node) if node else made).info()


def budget(made: MakePodDisruptionBudget) -> DisruptionBudget:
    return parse_disruption_budget(made.obj())


# -- parsing -------------------------------------------------------------------------------------


def test_a_budget_parses_its_selector_bounds_and_status() -> None:
    parsed = budget(
        MakePodDisruptionBudget("web", "shop")
        .match_labels({"app": "web"})
        .min_available("50%")
        .allowed(2, ("w-1",))
    )
    assert (parsed.namespace, parsed.name, parsed.ref) == ("shop", "web", "PodDisruptionBudget/shop/web")
    assert (parsed.min_available, parsed.max_unavailable) == ("50%", None)
    assert (parsed.disruptions_allowed, parsed.disrupted_pods) == (2, frozenset({"w-1"}))
    unprocessed = budget(MakePodDisruptionBudget().match_labels({"app": "web"}).max_unavailable(1))
    assert unprocessed.disruptions_allowed is None  # no status yet: derived (below)


@pytest.mark.parametrize(
    ("made", "field"),
    [
        (MakePodDisruptionBudget().min_available(1).max_unavailable(1), "spec.maxUnavailable"),
        (MakePodDisruptionBudget().min_available(-1), "spec.minAvailable"),
        (MakePodDisruptionBudget().max_unavailable("half"), "spec.maxUnavailable"),
        (MakePodDisruptionBudget().min_available(True), "spec.minAvailable"),
        (MakePodDisruptionBudget().allowed(-1), "status.disruptionsAllowed"),
        (
            MakePodDisruptionBudget().selector({"matchExpressions": [{"key": "a", "operator": "In"}]}),
            "values",
        ),
    ],
)
def test_a_malformed_budget_names_itself_and_the_field(made: MakePodDisruptionBudget, field: str) -> None:
    with pytest.raises(InvalidValue) as caught:
        budget(made)
    assert str(caught.value).startswith("PodDisruptionBudget/ns/pdb: ")
    assert field in str(caught.value)


# -- which pods a budget covers -------------------------------------------------------------------


def test_a_budget_covers_pods_of_its_namespace_its_selector_matches() -> None:
    pdb = budget(MakePodDisruptionBudget("b", "ns").match_labels({"app": "foo"}).allowed(1))
    assert pdb.selects(pod("a", labels={"app": "foo"}))
    assert not pdb.selects(pod("b", labels={"app": "bar"}))
    assert not pdb.selects(pod("c", labels={"app": "foo"}, namespace="other"))
    assert not pdb.selects(pod("d"))  # a pod without labels matches no budget


def test_a_budget_selects_with_match_expressions() -> None:
    expressions = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["foo", "bar"]}]}
    pdb = budget(MakePodDisruptionBudget("b", "ns").selector(expressions).allowed(1))
    assert pdb.selects(pod("a", labels={"app": "bar"}))
    assert not pdb.selects(pod("b", labels={"app": "baz"}))


def test_a_nil_or_empty_selector_covers_nothing_in_preemption() -> None:
    """kube's filterPodsWithPDBViolation: "A PDB with a nil or empty selector matches nothing"."""
    labelled = pod("a", labels={"app": "foo"})
    assert not budget(MakePodDisruptionBudget().selector({}).allowed(0)).selects(labelled)
    assert not budget(MakePodDisruptionBudget().allowed(0)).selects(labelled)


# -- filterPodsWithPDBViolation --------------------------------------------------------------------


def names(pods: list[PodInfo]) -> list[str]:
    return [p.name for p in pods]


FOO = {"app": "foo"}


def test_split_preemption_with_violation_of_same_pdb() -> None:
    """TestDryRunPreemption "preemption with violation of same pdb": one disruption allowed, two
    covered pods: the second taken is violating."""
    budgets = Budgets([budget(MakePodDisruptionBudget().match_labels(FOO).allowed(1))])
    violating, fine = budgets.split([pod("p1.1", labels=FOO), pod("p1.2", labels=FOO)])
    assert (names(violating), names(fine)) == (["p1.2"], ["p1.1"])
    assert budgets.violations([pod("p1.1", labels=FOO), pod("p1.2", labels=FOO)]) == 1


def test_split_the_victim_not_in_disrupted_pods_still_counts() -> None:
    """TestDryRunPreemption "... the victim doesn't belong to DisruptedPods" (p2 is disrupted)."""
    budgets = Budgets([budget(MakePodDisruptionBudget().match_labels(FOO).allowed(1, ("p2",)))])
    violating, _ = budgets.split([pod("p1.1", labels=FOO), pod("p1.2", labels=FOO)])
    assert names(violating) == ["p1.2"]


def test_split_a_victim_in_disrupted_pods_is_not_counted_again() -> None:
    """TestDryRunPreemption "... the victim belongs to DisruptedPods": no violation."""
    budgets = Budgets([budget(MakePodDisruptionBudget().match_labels(FOO).allowed(1, ("p1.2",)))])
    violating, fine = budgets.split([pod("p1.1", labels=FOO), pod("p1.2", labels=FOO)])
    assert (names(violating), names(fine)) == ([], ["p1.1", "p1.2"])


def test_split_the_disrupted_victim_is_non_violating_the_others_count() -> None:
    """TestDryRunPreemption "... the victim which belongs to DisruptedPods is treated as
    'nonViolating'": of three covered pods with p1.3 disrupted, one is violating."""
    budgets = Budgets([budget(MakePodDisruptionBudget().match_labels(FOO).allowed(1, ("p1.3",)))])
    pods = [pod("p1.1", labels=FOO), pod("p1.2", labels=FOO), pod("p1.3", labels=FOO)]
    violating, fine = budgets.split(pods)
    assert (names(violating), names(fine)) == (["p1.2"], ["p1.1", "p1.3"])


def test_split_a_pod_violates_when_any_of_its_budgets_goes_below_zero() -> None:
    budgets = Budgets(
        [
            budget(MakePodDisruptionBudget("wide").match_labels(FOO).allowed(5)),
            budget(MakePodDisruptionBudget("tight").match_labels({"tier": "db"}).allowed(0)),
        ]
    )
    both = {**FOO, "tier": "db"}
    violating, fine = budgets.split([pod("a", labels=FOO), pod("b", labels=both)])
    assert (names(violating), names(fine)) == (["b"], ["a"])


def test_split_without_budgets_keeps_every_pod_non_violating() -> None:
    pods = [pod("a", labels=FOO)]
    assert Budgets([]).split(pods) == ([], pods)
    assert not Budgets([])


# -- what a budget without status allows (derived as the disruption controller would) ----------------


# Three bound pods the budget covers (healthy) and one pending (expected, not healthy): an integer
# minAvailable expects the pods there are (4), a percentage or maxUnavailable the controller's scale,
# which gpuq takes as the same 4.
@pytest.mark.parametrize(
    ("bound", "allowed"),
    [
        ({"min_available": 2}, 1),  # 3 healthy, 2 must stay
        ({"min_available": 5}, 0),
        ({"min_available": "50%"}, 1),  # ceil(50% of 4) = 2 must stay
        ({"min_available": "60%"}, 0),  # ceil(2.4) = 3 must stay
        ({"max_unavailable": 1}, 0),  # 4 - 1 = 3 must stay, 3 healthy
        ({"max_unavailable": "50%"}, 1),  # 4 - 2 = 2 must stay
        ({}, 3),  # neither bound: every healthy pod may go
    ],
)
def test_derived_disruptions_allowed(bound: dict[str, Any], allowed: int) -> None:
    made = MakePodDisruptionBudget().match_labels(FOO)
    if "min_available" in bound:
        made.min_available(bound["min_available"])
    if "max_unavailable" in bound:
        made.max_unavailable(bound["max_unavailable"])
    pods = [pod(f"b{i}", labels=FOO, node="n1") for i in range(3)] + [pod("pending", labels=FOO)]
    assert derived_disruptions_allowed(budget(made), pods) == allowed


def test_budgets_use_the_status_when_there_is_one_and_derive_otherwise() -> None:
    covered = [pod(f"b{i}", labels=FOO, node="n1") for i in range(3)]
    with_status = budget(MakePodDisruptionBudget("s").match_labels(FOO).min_available(1).allowed(0))
    without = budget(MakePodDisruptionBudget("d").match_labels(FOO).min_available(1))
    allowed = Budgets([with_status, without], covered).allowed()
    assert allowed == {"PodDisruptionBudget/ns/s": 0, "PodDisruptionBudget/ns/d": 2}
