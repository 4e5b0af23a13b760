"""Preemption through the scheduler's real framework: kube-scheduler's DefaultPreemption cases ported
from pkg/scheduler/framework/plugins/defaultpreemption/default_preemption_test.go (each case names
its upstream test and case), run by Volcano's preempt action (priority and gang, predicates; the
configuration gpuq gives kube-scheduler's behaviour) and by capacity-scheduling's PostFilter.

Victim selection never knows a placement rule: it asks the framework whether the preemptor passes
PreFilter and Filter with the victims gone (``Framework.fits_without``). Upstream's rule-specific
cases ("pod with anti-affinity is preempted", "preemption to resolve pod topology spread filter
failure") therefore run here with a *test* filter plugin written out in this file, registered as a
member of ``predicates`` the way the real InterPodAffinity and PodTopologySpread plugins are: the
outcome is upstream's, and the preemption code is the same whichever plugin says no.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pytest

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.victim_selection import offset
from gpuq_k8s.scheduler.cycle import Attempt, Scheduler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import FilterPlugin, FilterResult, Handle, Plugin
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.scheduler.plugins.members import predicate
from tests.testing.builders import MakeElasticQuota, MakeNode, MakePod, MakePodDisruptionBudget
from tests.testing.clock import FakeClock
from tests.testing.config import config_text

NEG, LOW, MID, HIGH, VERY_HIGH = -100, 0, 100, 1000, 10000
SMALL = {"cpu": "100m", "memory": "100"}
MEDIUM = {"cpu": "200m", "memory": "200"}
LARGE = {"cpu": "300m", "memory": "300"}
VERY_LARGE = {"cpu": "500m", "memory": "500"}
FOO = {"app": "foo"}

Member = Callable[[Handle], Plugin]


# -- test filter plugins (the rule written out here; the real plugins are the other engineers') ------


class CountingFilter(FilterPlugin):
    """Passes every node and counts its calls (upstream's FakeFilterPlugin.NumFilterCalled)."""

    name = "CountingFilter"
    calls = 0

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        type(self).calls += 1
        return FilterResult.all_pass(self.handle.cluster.n)


class RejectAll(FilterPlugin):
    """Upstream's FalseFilter: no node ever fits."""

    name = "FalseFilter"

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        passed = np.zeros(self.handle.cluster.n, dtype=np.bool_)
        return FilterResult(passed, lambda: [(~passed, "node(s) said no")])


class HostnameAntiAffinity(FilterPlugin):
    """Required pod anti-affinity on the hostname, both ways, for the ``foo`` label (upstream's
    ``PodAntiAffinityExists("foo", "hostname", ...)``): a pod annotated ``anti: foo`` repels pods
    labelled ``foo`` from its node, and is repelled by them."""

    name = "TestAntiAffinity"

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        cluster = self.handle.cluster
        passed = np.ones(cluster.n, dtype=np.bool_)
        for row in range(cluster.n):
            for other in cluster.pods_on[row].values():
                if ("foo" in pod.labels and other.annotations.get("anti") == "foo") or (
                    pod.annotations.get("anti") == "foo" and "foo" in other.labels
                ):
                    passed[row] = False
        return FilterResult(passed, lambda: [(~passed, "node(s) didn't match pod anti-affinity rules")])


class ZoneAndHostSpread(FilterPlugin):
    """Topology spread with maxSkew 1 over ``zone`` and over the hostname, DoNotSchedule, selecting
    pods labelled ``foo`` (upstream's two ``SpreadConstraint(1, ...)``): a node passes when, for each
    key, its domain's matching pods plus one minus the least of any domain is at most 1."""

    name = "TestSpread"

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        cluster = self.handle.cluster
        rows = [r for r in range(cluster.n) if cluster.alive[r]]
        passed = np.zeros(cluster.n, dtype=np.bool_)
        if "foo" not in pod.labels:
            passed[rows] = True
            return FilterResult(passed)
        counts = {row: sum("foo" in p.labels for p in cluster.pods_on[row].values()) for row in rows}

        def domain(row: int, key: str) -> str:
            return cluster.names[row] if key == "hostname" else cluster.node(row).labels[key]

        for row in rows:
            ok = True
            for key in ("zone", "hostname"):
                per: dict[str, int] = {}
                for r in rows:
                    per[domain(r, key)] = per.get(domain(r, key), 0) + counts[r]
                ok = ok and per[domain(row, key)] + 1 - min(per.values()) <= 1
            passed[row] = ok
        return FilterResult(
            passed, lambda: [(~passed, "node(s) didn't match pod topology spread constraints")]
        )


# -- the scheduler ----------------------------------------------------------------------------------


def scheduler(
    *members: Member, capacity_scheduling: bool = False, configurations: str = ""
) -> tuple[Scheduler, MemoryBackend]:
    registry = default_registry()
    for build in members:
        registry.register_member(plugin_names.PREDICATES, predicate(None, build))
    tiers = ["predicates", "capacity-scheduling"] if capacity_scheduling else ["predicates"]
    config = config_text("priority, gang", tiers) + configurations
    backend = MemoryBackend()
    sched = Scheduler(SchedulerConfig.from_yaml(config), registry, backend, clock=FakeClock())
    backend.objects = sched.objects
    return sched, backend


def nodes(sched: Scheduler, *names: str) -> None:
    """Upstream's nodes: veryLargeRes each; ``name/zone`` also labels the zone."""
    for spec in names:
        name, _, zone = spec.partition("/")
        node = MakeNode(name).alloc(cpu="500m", memory="500", pods="110")
        if zone:
            node.label("zone", zone)
        sched.set_node(node.info())


def running(
    sched: Scheduler,
    name: str,
    node: str,
    prio: int,
    req: dict[str, str] | None = None,
    *,
    labels: dict[str, str] | None = None,
    namespace: str = "default",
    anti: bool = False,
    start: int | None = None,
) -> None:
    made = MakePod(name, namespace).node(node).priority(prio).labels(labels or {})
    if req:
        made.req(req)
    if anti:
        made.annotation("anti", "foo")
    if start is not None:
        made.started(f"1970-01-01T00:00:{start:02d}Z")
    sched.add_pod(made.info())


def preempt(
    sched: Scheduler,
    name: str,
    prio: int,
    req: dict[str, str] | None = None,
    *,
    labels: dict[str, str] | None = None,
    namespace: str = "default",
    policy: str = "",
) -> Attempt:
    made = MakePod(name, namespace).priority(prio).labels(labels or {})
    if req:
        made.req(req)
    if policy:
        made.preemption_policy(policy)
    sched.add_pod(made.info())
    attempt = sched.schedule_one()
    assert attempt is not None
    return attempt


def evicted(backend: MemoryBackend) -> list[str]:
    return sorted(key.split("/", 1)[1] for key in backend.evictions)


def budget(sched: Scheduler, allowed: int, namespace: str = "default", name: str = "pdb") -> None:
    sched.put_object(MakePodDisruptionBudget(name, namespace).match_labels(FOO).allowed(allowed).obj())


# -- TestPreempt ---------------------------------------------------------------------------------


def test_basic_preemption_logic() -> None:
    """TestPreempt "basic preemption logic" (and "PreemptionPolicy is nil": the default policy)."""
    sched, backend = scheduler()
    nodes(sched, "node1", "node2", "node3")
    running(sched, "p1.1", "node1", LOW, SMALL)
    running(sched, "p1.2", "node1", LOW, SMALL)
    running(sched, "p2.1", "node2", HIGH, LARGE)
    running(sched, "p3.1", "node3", MID, MEDIUM)
    attempt = preempt(sched, "p", HIGH, VERY_LARGE)
    assert attempt.nominated == "node1"
    assert evicted(backend) == ["p1.1", "p1.2"]


def test_no_preempting_in_pod() -> None:
    """TestPreempt "no preempting in pod": preemptionPolicy Never evicts nobody."""
    sched, backend = scheduler()
    nodes(sched, "node1", "node2", "node3")
    running(sched, "p1.1", "node1", LOW, SMALL)
    running(sched, "p1.2", "node1", LOW, SMALL)
    running(sched, "p2.1", "node2", HIGH, LARGE)
    running(sched, "p3.1", "node3", MID, MEDIUM)
    attempt = preempt(sched, "p", HIGH, VERY_LARGE, policy="Never")
    assert (attempt.nominated, evicted(backend)) == ("", [])


def test_preemption_for_topology_spread_constraints() -> None:
    """TestPreempt "preemption for topology spread constraints": node-b, evicting p-b1."""
    sched, backend = scheduler(ZoneAndHostSpread)
    nodes(sched, "node-a/zone1", "node-b/zone1", "node-x/zone2")
    running(sched, "p-a1", "node-a", HIGH, labels={"foo": ""})
    running(sched, "p-a2", "node-a", HIGH, labels={"foo": ""})
    running(sched, "p-b1", "node-b", LOW, labels={"foo": ""})
    running(sched, "p-x1", "node-x", HIGH, labels={"foo": ""})
    running(sched, "p-x2", "node-x", HIGH, labels={"foo": ""})
    attempt = preempt(sched, "p", HIGH, labels={"foo": ""})
    assert "didn't match pod topology spread constraints" in attempt.message
    assert attempt.nominated == "node-b"
    assert evicted(backend) == ["p-b1"]


# -- TestDryRunPreemption ---------------------------------------------------------------------------


def test_a_pod_that_does_not_fit_on_any_node() -> None:
    """TestDryRunPreemption "a pod that does not fit on any node": the filters reject every node even
    with the victims gone, so no node is a candidate and nobody is evicted."""
    sched, backend = scheduler(RejectAll)
    nodes(sched, "node1", "node2")
    running(sched, "p1", "node1", MID)
    running(sched, "p2", "node2", MID)
    attempt = preempt(sched, "p", HIGH)
    assert (attempt.nominated, evicted(backend)) == ("", [])


def test_pod_with_anti_affinity_is_preempted() -> None:
    """TestDryRunPreemption "pod with anti-affinity is preempted": only the pod whose anti-affinity
    repels the preemptor goes; the mid-priority pod beside it is given back (it fits with it).
    Upstream dry-runs the nodes directly; here the pod is scheduled, so node2's high-priority pod is
    very large (upstream: small), or the preemptor would simply fit there."""
    sched, backend = scheduler(HostnameAntiAffinity)
    nodes(sched, "node1", "node2")
    running(sched, "p1.1", "node1", LOW, SMALL, labels={"foo": ""}, anti=True)
    running(sched, "p1.2", "node1", MID, SMALL)
    running(sched, "p1.3", "node1", HIGH, SMALL)
    running(sched, "p2", "node2", HIGH, VERY_LARGE)
    attempt = preempt(sched, "p", HIGH, SMALL, labels={"foo": ""})
    assert "didn't match pod anti-affinity rules" in attempt.message
    assert (attempt.nominated, evicted(backend)) == ("node1", ["p1.1"])


def test_preemption_to_resolve_pod_topology_spread_filter_failure() -> None:
    """TestDryRunPreemption "preemption to resolve pod topology spread filter failure": node-a's
    candidate evicts pod-a2 only (pod-a1 is given back), node-b's pod-b1; the two tie on every
    criterion and the first node name wins."""
    sched, backend = scheduler(ZoneAndHostSpread)
    nodes(sched, "node-a/zone1", "node-b/zone1", "node-x/zone2")
    running(sched, "pod-a1", "node-a", MID, labels={"foo": ""})
    running(sched, "pod-a2", "node-a", LOW, labels={"foo": ""})
    running(sched, "pod-b1", "node-b", LOW, labels={"foo": ""})
    running(sched, "pod-x1", "node-x", HIGH, labels={"foo": ""})
    running(sched, "pod-x2", "node-x", HIGH, labels={"foo": ""})
    attempt = preempt(sched, "p", HIGH, labels={"foo": ""})
    assert (attempt.nominated, evicted(backend)) == ("node-a", ["pod-a2"])


def test_preemption_with_violation_of_same_pdb() -> None:
    """TestDryRunPreemption "preemption with violation of same pdb": the only candidate violates the
    budget; it is still taken (a budget is preferred, not a guarantee)."""
    sched, backend = scheduler()
    nodes(sched, "node1")
    running(sched, "p1.1", "node1", MID, MEDIUM, labels=FOO)
    running(sched, "p1.2", "node1", MID, MEDIUM, labels=FOO)
    budget(sched, 1)
    attempt = preempt(sched, "p", HIGH, VERY_LARGE)
    assert (attempt.nominated, evicted(backend)) == ("node1", ["p1.1", "p1.2"])


def limits(percentage: int, minimum: int) -> str:
    return (
        "configurations:\n- name: preempt\n  arguments: "
        f"{{minCandidateNodesPercentage: {percentage}, minCandidateNodesAbsolute: {minimum}}}\n"
    )


def preemptor_starting_at(index: int, count: int) -> str:
    """A preemptor name whose search starts at the ``index``-th of ``count`` potential nodes."""
    return next(f"p{i}" for i in range(1000) if offset(MakePod(f"p{i}", "default").info(), count) == index)


def test_all_nodes_are_possible_candidates_but_the_arguments_limit_to_2() -> None:
    """TestDryRunPreemption "all nodes are possible candidates, but DefaultPreemptionArgs limits to 2":
    from upstream's offset (node5, then node1) two candidates are found and the preemption takes one
    of them, though node3's victim has the lowest priority; with kube's defaults (10%, at least 100)
    every node is a candidate and node3 wins. The real filters run only on the candidate chosen (the
    counting member sees one run: the attempt's own Filter stops at the resource fit, every node
    being full)."""

    def cluster(configurations: str) -> tuple[Scheduler, MemoryBackend]:
        sched, backend = scheduler(CountingFilter, configurations=configurations)
        nodes(sched, *(f"node{i}" for i in range(1, 6)))
        for i in range(1, 6):
            running(sched, f"p{i}", f"node{i}", LOW if i == 3 else MID, LARGE)
        return sched, backend

    name = preemptor_starting_at(4, 5)  # upstream's offset 4: node5, then node1
    CountingFilter.calls = 0
    sched, backend = cluster(limits(40, 1))
    attempt = preempt(sched, name, HIGH, LARGE)
    assert (attempt.nominated, evicted(backend)) == ("node1", ["p1"])  # node1 and node5 tie: first name
    assert CountingFilter.calls == 1
    sched, backend = cluster("")
    attempt = preempt(sched, name, HIGH, LARGE)
    assert (attempt.nominated, evicted(backend)) == ("node3", ["p3"])


def test_preemption_looks_past_the_candidate_count_until_a_node_violating_no_budget_is_found() -> None:
    """TestDryRunPreemption "preemption looks past numCandidates until a non-PDB violating node is
    found": from node5 the first two candidates violate the budget, so the walk goes on to node3, and
    node3's victim (violating nothing) is the one evicted."""
    sched, backend = scheduler(configurations=limits(40, 2))
    nodes(sched, *(f"node{i}" for i in range(1, 6)))
    for i in (1, 2, 5):
        running(sched, f"p{i}", f"node{i}", MID, LARGE, labels=FOO)
    for i in (3, 4):
        running(sched, f"p{i}", f"node{i}", MID, LARGE)
    budget(sched, 0)
    name = preemptor_starting_at(4, 5)
    attempt = preempt(sched, name, HIGH, LARGE)
    assert (attempt.nominated, evicted(backend)) == ("node3", ["p3"])


def test_a_node_whose_victims_violate_a_budget_loses_to_one_whose_do_not() -> None:
    """pickOneNodeForPreemption's first criterion through the scheduler: node1's victim is of lower
    priority, but a budget protects it; node2's is evicted."""
    sched, backend = scheduler()
    nodes(sched, "node1", "node2")
    running(sched, "guarded", "node1", LOW, LARGE, labels=FOO)
    running(sched, "plain", "node2", MID, LARGE)
    budget(sched, 0)
    attempt = preempt(sched, "p", HIGH, LARGE)
    assert (attempt.nominated, evicted(backend)) == ("node2", ["plain"])


def test_a_budget_with_room_protects_nothing() -> None:
    sched, backend = scheduler()
    nodes(sched, "node1", "node2")
    running(sched, "guarded", "node1", LOW, LARGE, labels=FOO)
    running(sched, "plain", "node2", MID, LARGE)
    budget(sched, 1)
    attempt = preempt(sched, "p", HIGH, LARGE)
    assert (attempt.nominated, evicted(backend)) == ("node1", ["guarded"])


def test_a_malformed_budget_is_reported_on_itself_and_protects_nothing() -> None:
    sched, backend = scheduler()
    nodes(sched, "node1")
    running(sched, "guarded", "node1", LOW, LARGE, labels=FOO)
    bad = MakePodDisruptionBudget("bad", "default").selector(
        {"matchExpressions": [{"key": "app", "operator": "In"}]}
    )
    sched.put_object(bad.allowed(0).obj())
    warnings = [e for e in backend.events if e.obj == "PodDisruptionBudget/default/bad"]
    assert warnings and warnings[0].type == "Warning"
    assert "spec.selector.matchExpressions[0].values" in warnings[0].message
    attempt = preempt(sched, "p", HIGH, LARGE)
    assert (attempt.nominated, evicted(backend)) == ("node1", ["guarded"])


# -- capacity-scheduling's PostFilter follows the same rules ---------------------------------------


def test_elastic_quota_preemption_never_picks_a_node_the_rules_still_reject() -> None:
    """Namespaces without an ElasticQuota (capacity-scheduling's NoQuota scope: lower-priority pods of
    such namespaces): node1 has the lower-priority victim, but a pod there that may not be evicted
    repels the preemptor; node2's victim is taken instead."""
    sched, backend = scheduler(HostnameAntiAffinity, capacity_scheduling=True)
    sched.put_object(MakeElasticQuota("eq", "quota-ns").min(cpu="1").max(cpu="1").obj())
    nodes(sched, "node1", "node2")
    running(sched, "cheap", "node1", NEG, LARGE)
    running(sched, "repels", "node1", HIGH, SMALL, anti=True)
    running(sched, "dearer", "node2", LOW, LARGE)
    attempt = preempt(sched, "p", MID, LARGE, labels={"foo": ""})
    assert (attempt.nominated, evicted(backend)) == ("node2", ["dearer"])


def test_elastic_quota_preemption_evicts_the_pod_a_rule_needs_gone() -> None:
    """The fewest victims that make room and pass the rules: resources alone would take none on node1
    (it has room), the anti-affinity rule needs ``repels`` gone."""
    sched, backend = scheduler(HostnameAntiAffinity, capacity_scheduling=True)
    nodes(sched, "node1")
    running(sched, "small", "node1", LOW, SMALL)
    running(sched, "repels", "node1", LOW, SMALL, anti=True)
    attempt = preempt(sched, "p", MID, SMALL, labels={"foo": ""})
    assert (attempt.nominated, evicted(backend)) == ("node1", ["repels"])


def test_elastic_quota_preemption_prefers_victims_no_budget_protects() -> None:
    """Within one node: two victims would do, the one a budget protects is spared; across nodes, a
    node whose victims violate no budget wins (``pickOneNodeForPreemption``)."""
    sched, backend = scheduler(capacity_scheduling=True)
    nodes(sched, "node1", "node2")
    running(sched, "guarded", "node1", LOW, MEDIUM, labels=FOO, start=2)
    running(sched, "plain", "node1", LOW, MEDIUM, start=1)
    running(sched, "other", "node2", NEG, LARGE, labels=FOO)
    budget(sched, 0)
    attempt = preempt(sched, "p", MID, LARGE)
    assert (attempt.nominated, evicted(backend)) == ("node1", ["plain"])


@pytest.mark.parametrize("allowed", [0, 1])
def test_elastic_quota_preemption_takes_a_protected_victim_only_when_it_must(allowed: int) -> None:
    sched, backend = scheduler(capacity_scheduling=True)
    nodes(sched, "node1")
    running(sched, "guarded", "node1", LOW, VERY_LARGE, labels=FOO)
    budget(sched, allowed)
    attempt = preempt(sched, "p", MID, LARGE)
    assert (attempt.nominated, evicted(backend)) == ("node1", ["guarded"])


def names(pods: Iterable[PodInfo]) -> list[str]:
    return sorted(p.name for p in pods)
