"""ElasticQuota engine (capacity-scheduling.md; design.md Semantics 4)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuq_k8s.common.model.elastic.ledger import RULE_MAX, RULE_TOTAL_MIN, ElasticQuotaInfos
from gpuq_k8s.common.model.elastic.preemption import (
    VictimScope,
    is_eligible_victim,
    select_victims_on_node,
    victim_scope,
)
from gpuq_k8s.common.model.elastic.quota import ElasticQuota, validate_elastic_quota
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quota_exceeded import QuotaExceeded
from gpuq_k8s.common.model.refusal import Refusal
from gpuq_k8s.common.model.resources import Resources
from tests.testing.builders import Amount, MakeElasticQuota, MakePod
from tests.testing.hostile import OBJECTS, only_gpuq_errors

GPU = "nvidia.com/gpu"


def eq(
    ns: str, min_: Mapping[str, Amount] | None = None, max_: Mapping[str, Amount] | None = None
) -> ElasticQuota:
    """The ElasticQuota of namespace ``ns`` (named after it), parsed."""
    quota = MakeElasticQuota(ns, ns)
    if min_ is not None:
        quota.min(dict(min_))
    if max_ is not None:
        quota.max(dict(max_))
    return ElasticQuota.from_dict(quota.obj())


def rule_of(refusal: Refusal | None) -> str | None:
    """Which PreFilter check refused (``None``: allowed)."""
    return None if refusal is None else refusal.rule


def gpus(n: int) -> dict[str, int]:
    return {GPU: n}


def state(quotas: list[ElasticQuota], pods: list[PodInfo]) -> ElasticQuotaInfos:
    infos = ElasticQuotaInfos()
    for q in quotas:
        infos.upsert(q)
    infos.rebuild(pods)
    return infos


def free_of(allocatable: int, node_pods: list[PodInfo]) -> dict[str, int]:
    used = sum(p.requests.amount(GPU) for p in node_pods)
    return {GPU: allocatable * 1000 - used}


# ------------------------------------------------------------------------------------------------
# The object and the webhook's validation
# ------------------------------------------------------------------------------------------------


def test_from_dict_parses_the_kep_sample() -> None:
    """KEP "Proposal" sample yaml."""
    q = ElasticQuota.from_dict(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": "test", "namespace": "test"},
            "spec": {
                "max": {"cpu": 20, "memory": "40Gi", GPU: 2},
                "min": {"cpu": 10, "memory": "20Gi", GPU: 1},
            },
        }
    )
    assert q.ref == "ElasticQuota/test/test"
    assert q.max == {"cpu": 20000, "memory": 40 * 2**30, GPU: 2000}
    assert q.min == {"cpu": 10000, "memory": 20 * 2**30, GPU: 1000}
    q.validate_spec()


@pytest.mark.parametrize(
    ("spec", "field", "fragment"),
    [
        ({"min": {"cpu": "lots"}}, "spec.min[cpu]", "Kubernetes quantity"),
        ({"max": {"cpu": "-1"}}, "spec.max[cpu]", "non-negative"),
        ({"min": {"cpu": 3}, "max": {"cpu": 2}}, "spec.min[cpu]", "at most spec.max[cpu] = 2"),
        ({"min": ["cpu"]}, "spec.min", "dictionary"),
    ],
)
def test_validation_names_object_field_and_value(spec: dict[str, object], field: str, fragment: str) -> None:
    with pytest.raises(InvalidValue) as err:
        validate_elastic_quota({"metadata": {"name": "q", "namespace": "ns"}, "spec": spec})
    assert err.value.where == "ElasticQuota/ns/q"
    assert err.value.field == field
    assert fragment in str(err.value)


def test_min_above_max_is_fine_for_keys_only_in_min() -> None:
    """Semantics 4: absent from max is unlimited, so min has nothing to exceed."""
    quota = validate_elastic_quota(
        {"metadata": {"name": "q", "namespace": "ns"}, "spec": {"min": {"cpu": 3}}}
    )
    assert quota.min == {"cpu": 3_000} and quota.max == {}


# ------------------------------------------------------------------------------------------------
# State: reserve / unreserve / rebuild / snapshot
# ------------------------------------------------------------------------------------------------


def test_reserve_and_unreserve_are_idempotent_per_pod_key() -> None:
    infos = state([eq("a", max_=gpus(6))], [])
    assert infos.reserve("a", "a/p", Resources(gpus(2000)))
    assert not infos.reserve("a", "a/p", Resources(gpus(2000)))
    assert infos.get("a").used == {GPU: 2000}  # type: ignore[union-attr]
    assert infos.unreserve("a", "a/p")
    assert not infos.unreserve("a", "a/p")
    assert infos.get("a").used.amount(GPU) == 0  # type: ignore[union-attr]
    assert infos.total_used.amount(GPU) == 0


def test_rebuild_counts_bound_non_terminal_pods_only() -> None:
    pods = [
        MakePod("run", "a").req(gpus(2)).node("n1").info(),
        MakePod("pending", "a").req(gpus(1)).info(),
        MakePod("done", "a").req(gpus(4)).node("n1").phase("Succeeded").info(),
        MakePod("other", "b").req(gpus(3)).node("n1").info(),
    ]
    infos = state([eq("a", max_=gpus(10))], pods)
    assert infos.get("a").used == {GPU: 2000}  # type: ignore[union-attr]
    assert infos.total_used == {GPU: 2000}  # b has no quota: not counted


def test_a_quota_created_later_starts_with_its_running_pods() -> None:
    infos = state([], [MakePod("run", "a").req(gpus(2)).node("n1").info()])
    infos.upsert(eq("a", min_=gpus(1), max_=gpus(4)))
    assert infos.get("a").used == {GPU: 2000}  # type: ignore[union-attr]
    infos.upsert(eq("a", min_=gpus(2), max_=gpus(4)))  # update keeps usage, replaces min in the totals
    assert infos.total_min == {GPU: 2000}
    infos.remove("a")
    assert infos.total_min == {} and infos.total_used == {}


def test_snapshot_is_independent_both_ways() -> None:
    live = state([eq("a", max_=gpus(6))], [MakePod("p1", "a").req(gpus(2)).node("n1").info()])
    snap = live.snapshot()
    live.reserve("a", "a/p2", Resources(gpus(1000)))
    snap.unreserve("a", "a/p1")
    assert live.get("a").used == {GPU: 3000}  # type: ignore[union-attr]
    assert snap.get("a").used == {GPU: 0}  # type: ignore[union-attr]
    assert live.reserved("a", "a/p1") is not None and snap.reserved("a", "a/p2") is None


def test_dirty_and_status() -> None:
    infos = state(
        [eq("a", max_=gpus(6))], [MakePod("p1", "a").req({GPU: 2, "cpu": "500m"}).node("n1").info()]
    )
    assert infos.take_dirty() == {"a"}
    assert infos.take_dirty() == set()
    infos.reserve("a", "a/p2", Resources({GPU: 1000}))
    assert infos.take_dirty() == {"a"}
    assert infos.status("a") == {"used": {"cpu": "500m", GPU: "3"}}
    assert infos.used_numbers("a") == {"cpu": 0.5, GPU: 3}


# ------------------------------------------------------------------------------------------------
# PreFilter
# ------------------------------------------------------------------------------------------------


def test_semantics_4_absent_max_is_unlimited_absent_min_is_zero() -> None:
    infos = state([eq("a", min_={"cpu": 1}, max_={"cpu": 2})], [])
    # memory is in neither list: unlimited by max, and no quota guarantees memory, so no pool check.
    assert infos.prefilter("a", Resources.parse({"memory": "1Ti", "cpu": 1})) is None
    # gpu absent from a's min but guaranteed by b: a's share of the guaranteed pool is 0.
    infos.upsert(eq("b", min_=gpus(1)))
    assert infos.prefilter("a", Resources(gpus(1000))) is None
    infos.reserve("b", "b/x", Resources(gpus(1000)))
    assert rule_of(infos.prefilter("a", Resources(gpus(1000)))) == RULE_TOTAL_MIN


def test_explicit_zero_max_forbids() -> None:
    infos = state([eq("a", max_=gpus(0))], [])
    decision = infos.prefilter("a", Resources(gpus(1000)), "Pod/a/p")
    assert rule_of(decision) == RULE_MAX


def test_prefilter_message_names_namespace_resource_amounts() -> None:
    infos = state(
        [eq("qa", min_=gpus(4), max_=gpus(6))],
        [MakePod(f"p{i}", "qa").req(gpus(2)).node("n1").info() for i in range(3)],
    )
    decision = infos.prefilter("qa", Resources(gpus(1000)), "Pod/qa/new")
    assert decision is not None and decision.rule == RULE_MAX
    assert decision.message == (
        "Pod/qa/new: quota exceeded in ElasticQuota/qa/qa (max) for nvidia.com/gpu: "
        "requested 1, available 0, used 6, limit 6"
        " (waits for room: nvidia.com/gpu used 6 would have to drop to 5)"
    )
    assert isinstance(decision.error, QuotaExceeded) and decision.error.resource == GPU


def test_prefilter_ignores_namespaces_without_quota_and_unrequested_resources() -> None:
    over_cpu = MakePod("p", "a").req({"cpu": 2}).node("n1").info()
    infos = state([eq("a", max_={"cpu": 1, GPU: 1})], [over_cpu])  # already over cpu
    assert infos.prefilter("nobody", Resources(gpus(99000))) is None
    assert infos.prefilter("a", Resources(gpus(1000))) is None  # asks no cpu


@pytest.mark.parametrize(
    ("quotas", "used", "pods", "expected"),
    [
        # "pod subjects to ElasticQuota": min 1000 max 2000 used 300: 500 fits, 1800 does not.
        ({"ns1": (1000, 2000)}, {"ns1": 300}, [("ns1", 500), ("ns1", 1800)], [None, "unschedulable"]),
        # "the sum of used is bigger than the sum of min": 1800 + 200 + 500 > 1000 + 1000.
        (
            {"ns1": (1000, 2000), "ns2": (1000, 2000)},
            {"ns1": 1800, "ns2": 200},
            [("ns2", 500)],
            ["unschedulable"],
        ),
        # "without elasticQuotaInfo".
        ({}, {}, [("ns2", 500)], [None]),
        # gpuq's own case: a request over max itself can never fit (upstream: Unschedulable, and
        # preemption is tried in vain), UnschedulableAndUnresolvable with the outlook "never".
        ({"ns1": (1000, 2000)}, {"ns1": 0}, [("ns1", 2500)], ["never"]),
    ],
)
def test_capacity_scheduling_test_go_pre_filter(
    quotas: dict[str, tuple[int, int]],
    used: dict[str, int],
    pods: list[tuple[str, int]],
    expected: list[str | None],
) -> None:
    """scheduler-plugins ``pkg/capacityscheduling/capacity_scheduling_test.go`` TestPreFilter (memory
    in bytes, as upstream's ``memReq``): Success, Unschedulable, or gpuq's unresolvable "never"."""
    infos = state(
        [eq(ns, {"memory": lo}, {"memory": hi}) for ns, (lo, hi) in quotas.items()],
        [
            MakePod(f"{ns}-running", ns).req({"memory": amount}).node("n1").info()
            for ns, amount in used.items()
        ],
    )
    got: list[str | None] = []
    for namespace, memory in pods:
        refusal = infos.prefilter(namespace, Resources({"memory": memory}))
        if refusal is None:
            got.append(None)
        elif refusal.unresolvable:
            assert "can never fit under the current quota" in refusal.message
            got.append("never")
        else:
            got.append("unschedulable")
    assert got == expected


# ------------------------------------------------------------------------------------------------
# Story 1 (KEP "User Stories"): QuotaA min 4 max 6, QuotaB min 6 max 8, 10 GPUs
# ------------------------------------------------------------------------------------------------

STORY1 = [eq("a", gpus(4), gpus(6)), eq("b", gpus(6), gpus(8))]


def test_story_1_step_by_step() -> None:
    """Nodes: n1 has 2 GPUs, n2 5, n3 3 (10 in all)."""
    capacity = {"n1": 2, "n2": 5, "n3": 3}
    # Step 1: A uses 2, B uses 3, both within min.
    pods = [
        MakePod("a1", "a").req(gpus(2)).node("n1").info(),
        MakePod("b1", "b").req(gpus(3)).node("n2").info(),
    ]
    infos = state(STORY1, pods)
    # Step 2: A grows to 4 (its min): no borrowing, allowed.
    assert infos.prefilter("a", Resources(gpus(2000))) is None
    pods.append(MakePod("a2", "a").req(gpus(2)).node("n2").info())
    infos.rebuild(pods)
    # Step 3: A takes 2 more, borrowing from B's unused min; 3 more would pass A's max of 6.
    assert rule_of(infos.prefilter("a", Resources(gpus(3000)))) == RULE_MAX
    assert infos.prefilter("a", Resources(gpus(2000))) is None
    pods.append(MakePod("a3", "a").req(gpus(2)).node("n3").info())
    infos.rebuild(pods)
    assert infos.get("a").used == {GPU: 6000}  # type: ignore[union-attr]
    # Step 4: B asks 3 more: one GPU is left and 9 + 3 > sum(min) 10.
    b2 = MakePod("b2", "b").req(gpus(3)).info()
    assert rule_of(infos.prefilter("b", b2.requests)) == RULE_TOTAL_MIN
    assert victim_scope(b2, infos) is VictimScope.BORROWERS  # 3 + 3 <= min 6
    outcomes = {}
    for node, cap in capacity.items():
        on_node = [p for p in pods if p.node_name == node]
        outcomes[node] = select_victims_on_node(b2, on_node, free_of(cap, on_node), infos)
    assert not outcomes["n1"].ok and not outcomes["n2"].ok  # freeing 2 there leaves B short of 3
    assert [p.name for p in outcomes["n3"].victims] == ["a3"]  # the 2-GPU pod of A plus the free GPU
    # After the preemption: A back to 4, B up to 6.
    pods = [p for p in pods if p.name != "a3"] + [MakePod("b2", "b").req(gpus(3)).node("n3").info()]
    infos.rebuild(pods)
    assert infos.get("a").used.amount(GPU) == 4000  # type: ignore[union-attr]
    assert infos.get("b").used.amount(GPU) == 6000  # type: ignore[union-attr]
    # Step 5: B asks 1 or 2 more: A's pods are all guaranteed now, and B is over its own min.
    for extra in (1, 2):
        b3 = MakePod(f"b3-{extra}", "b").req(gpus(extra)).info()
        assert rule_of(infos.prefilter("b", b3.requests)) == RULE_TOTAL_MIN
        assert victim_scope(b3, infos) is VictimScope.SAME_NAMESPACE
        for node, cap in capacity.items():
            on_node = [p for p in pods if p.node_name == node]
            assert not select_victims_on_node(b3, on_node, free_of(cap, on_node), infos).ok


# ------------------------------------------------------------------------------------------------
# Story 2: QuotaA (3,4), QuotaB (4,6), QuotaC (3,4)
# ------------------------------------------------------------------------------------------------

STORY2 = [eq("a", gpus(3), gpus(4)), eq("b", gpus(4), gpus(6)), eq("c", gpus(3), gpus(4))]


def test_story_2_borrowers_are_preempted_when_reclaiming_min() -> None:
    n1 = [MakePod(f"a{i}", "a").req(gpus(1)).node("n1").info() for i in range(4)] + [
        MakePod("c1", "c").req(gpus(1)).node("n1").info()
    ]
    rest = [
        MakePod("b1", "b").req(gpus(3)).node("n2").info(),
        MakePod("c2", "c").req(gpus(2)).node("n2").info(),
    ]
    infos = state(STORY2, n1 + rest)
    preemptor = MakePod("b-new", "b").req(gpus(1)).info()
    assert rule_of(infos.prefilter("b", preemptor.requests)) == RULE_TOTAL_MIN
    assert victim_scope(preemptor, infos) is VictimScope.BORROWERS
    # A is over min (4 > 3), C is not (3 <= 3): only A's pods are candidates, whatever their priority.
    assert not is_eligible_victim(VictimScope.BORROWERS, preemptor, n1[4], infos)
    selection = select_victims_on_node(preemptor, n1, {GPU: 0}, infos)
    assert selection.ok and len(selection.victims) == 1 and selection.victims[0].namespace == "a"


def test_story_2_over_min_preemptor_takes_its_own_lower_priority_pod() -> None:
    pod_a = MakePod("podA", "b").req(gpus(1)).node("n1").priority(1).info()
    pod_b = MakePod("podB", "b").req(gpus(4)).node("n1").priority(100).info()
    others = [
        MakePod("a1", "a").req(gpus(2)).node("n2").info(),
        MakePod("c1", "c").req(gpus(3)).node("n2").info(),
    ]
    infos = state(STORY2, [pod_a, pod_b, *others])
    pod_c = MakePod("podC", "b").req(gpus(1)).priority(50).info()
    assert rule_of(infos.prefilter("b", pod_c.requests)) == RULE_TOTAL_MIN
    assert victim_scope(pod_c, infos) is VictimScope.SAME_NAMESPACE  # 5 + 1 > min 4
    selection = select_victims_on_node(pod_c, [pod_a, pod_b], {GPU: 0}, infos)
    assert selection.ok and [p.name for p in selection.victims] == ["podA"]


# ------------------------------------------------------------------------------------------------
# Cross-namespace vs single-namespace preemption (KEP "Additional Preemption Details")
# ------------------------------------------------------------------------------------------------


def test_cross_namespace_vs_single_namespace_example() -> None:
    quotas = [
        eq("quota1", {"cpu": 0}, {"cpu": 2}),
        eq("quota2", {"cpu": 0}, {"cpu": 2}),
        eq("quota3", {"cpu": 1}, {"cpu": 2}),
    ]
    infos = state(quotas, [])
    # nginx in quota1 borrows quota3's free min: 0 + 1 <= sum(min) 1.
    nginx1 = MakePod("nginx", "quota1").req({"cpu": 1}).node("n1").info()
    assert infos.prefilter("quota1", nginx1.requests) is None
    infos.reserve_pod(nginx1)
    # High-priority nginx in quota2: over the guaranteed pool, and over its own min (0), so it may
    # only preempt lower-priority pods of quota2 -- there are none, despite its priority.
    nginx2 = MakePod("nginx", "quota2").req({"cpu": 1}).priority(1_000_000).info()
    assert rule_of(infos.prefilter("quota2", nginx2.requests)) == RULE_TOTAL_MIN
    assert victim_scope(nginx2, infos) is VictimScope.SAME_NAMESPACE
    selection = select_victims_on_node(nginx2, [nginx1], {"cpu": 0}, infos)
    assert not selection.ok and "no eligible victims" in selection.reason


# ------------------------------------------------------------------------------------------------
# Known limitation: cross-node preemption is not supported
# ------------------------------------------------------------------------------------------------


def test_cross_node_preemption_limitation() -> None:
    quotas = [eq("quota1", {"cpu": 0}, {"cpu": 2}), eq("quota2", {"cpu": 2}, {"cpu": 2})]
    p1 = MakePod("nginx-1", "quota1").req({"cpu": 1}).node("node1").info()
    p2 = MakePod("nginx-2", "quota1").req({"cpu": 1}).node("node2").info()
    infos = state(quotas, [p1, p2])
    preemptor = MakePod("nginx", "quota2").req({"cpu": 2}).info()
    assert victim_scope(preemptor, infos) is VictimScope.BORROWERS  # 0 + 2 <= min 2
    for victim in (p1, p2):  # each node: 2 cpus, one taken by quota1
        selection = select_victims_on_node(preemptor, [victim], {"cpu": 1000}, infos)
        assert not selection.ok  # the node fits, but used 1 + 2 = 3 > sum(min) 2
        assert "would not make room" in selection.reason


# ------------------------------------------------------------------------------------------------
# preemptionPolicy, namespaces without quota, victim choice
# ------------------------------------------------------------------------------------------------


def test_preemption_policy_never_never_preempts() -> None:
    infos = state(STORY1, [MakePod("a1", "a").req(gpus(6)).node("n1").info()])
    preemptor = MakePod("b1", "b").req(gpus(1)).priority(10**6).preemption_policy("Never").info()
    assert victim_scope(preemptor, infos) is VictimScope.NONE
    selection = select_victims_on_node(
        preemptor, [MakePod("a1", "a").req(gpus(6)).node("n1").info()], {GPU: 0}, infos
    )
    assert not selection.ok and "preemptionPolicy=Never" in selection.reason


def test_namespaces_without_quota_preempt_only_each_other() -> None:
    infos = state([eq("a", gpus(1), gpus(4))], [])
    free_pod = MakePod("p", "x").req(gpus(1)).info()
    low_other = MakePod("low", "y").req(gpus(1)).node("n1").priority(-5).info()
    quota_pod = MakePod("q", "a").req(gpus(1)).node("n1").priority(-5).info()
    assert victim_scope(free_pod, infos) is VictimScope.NO_QUOTA
    assert is_eligible_victim(VictimScope.NO_QUOTA, free_pod, low_other, infos)
    assert not is_eligible_victim(VictimScope.NO_QUOTA, free_pod, quota_pod, infos)
    borrower = MakePod("b", "a2").req(gpus(1)).node("n1").info()
    assert not is_eligible_victim(
        VictimScope.BORROWERS, MakePod("z", "a").req(gpus(1)).node("n1").info(), borrower, infos
    )


def test_fewest_then_lowest_priority_victims() -> None:
    infos = state([eq("a", max_=gpus(100))], [])
    preemptor = MakePod("big", "a").req(gpus(2)).priority(100).info()
    small1 = MakePod("s1", "a").req(gpus(1)).node("n1").priority(1).info()
    small2 = MakePod("s2", "a").req(gpus(1)).node("n1").priority(2).info()
    large_low = MakePod("l3", "a").req(gpus(2)).node("n1").priority(3).info()
    large_high = MakePod("l9", "a").req(gpus(2)).node("n1").priority(9).info()
    node = [small1, small2, large_low, large_high]
    for p in node:
        infos.reserve_pod(p)
    selection = select_victims_on_node(preemptor, node, {GPU: 0}, infos)
    assert [p.name for p in selection.victims] == ["l3"]  # one victim beats two smaller ones


def test_reprieve_fallback_when_search_budget_is_exhausted() -> None:
    infos = state([eq("a", max_=gpus(100))], [])
    node = [MakePod(f"p{i}", "a").req(gpus(1)).node("n1").priority(i).info() for i in range(6)]
    preemptor = MakePod("new", "a").req(gpus(2)).priority(100).info()
    exact = select_victims_on_node(preemptor, node, {GPU: 0}, infos)
    greedy = select_victims_on_node(preemptor, node, {GPU: 0}, infos, search_budget=1)
    assert [p.name for p in exact.victims] == ["p0", "p1"]
    assert [p.name for p in greedy.victims] == ["p0", "p1"]  # most important reprieved first


def test_pod_slots_and_extra_filters_are_respected() -> None:
    infos = state([eq("a", max_=gpus(100))], [])
    node = [
        MakePod("p1", "a").req({"cpu": 1}).node("n1").priority(1).info(),
        MakePod("p2", "a").req({"cpu": 1}).node("n1").priority(2).info(),
    ]
    preemptor = MakePod("new", "a").req({"cpu": 1}).priority(100).info()
    # cpu is free, but the node has no pod slot left: one victim frees one.
    chosen = select_victims_on_node(preemptor, node, {"cpu": 5000, "pods": 0}, infos)
    assert [p.name for p in chosen.victims] == ["p1"]
    # another filter (say, anti-affinity with p2) needs p2 gone.
    chosen = select_victims_on_node(
        preemptor, node, {"cpu": 5000}, infos, fits=lambda gone: any(p.name == "p2" for p in gone)
    )
    assert [p.name for p in chosen.victims] == ["p2"]


@given(
    st.lists(st.tuples(st.integers(1, 4), st.integers(0, 5)), min_size=1, max_size=7),
    st.integers(1, 8),
    st.integers(0, 3),
)
def test_property_victims_make_room_and_are_minimal(
    shape: list[tuple[int, int]], want: int, free: int
) -> None:
    infos = state([eq("a", max_=gpus(1000))], [])
    node = [
        MakePod(f"p{i}", "a").req(gpus(size)).node("n1").priority(prio).info()
        for i, (size, prio) in enumerate(shape)
    ]
    for p in node:
        infos.reserve_pod(p)
    preemptor = MakePod("new", "a").req(gpus(want)).priority(10).info()
    selection = select_victims_on_node(preemptor, node, {GPU: free * 1000}, infos)
    capacity = free + sum(size for size, prio in shape if prio < 10)
    assert selection.ok == (capacity >= want)
    if selection.ok:
        freed = sum(p.requests.amount(GPU) for p in selection.victims) // 1000
        assert free + freed >= want
        # minimal: no single victim can be spared
        for v in selection.victims:
            assert free + freed - v.requests.amount(GPU) // 1000 < want


@pytest.mark.parametrize("value", [True, False])
def test_bool_is_not_a_quantity(value: bool) -> None:
    """pydantic's lax mode used to turn `cpu: true` into 1 core."""
    with pytest.raises(InvalidValue) as info:
        ElasticQuota.from_dict({"metadata": {"name": "q"}, "spec": {"max": {"cpu": value}}})
    assert "spec.max.cpu" in str(info.value) and "ElasticQuota/default/q" in str(info.value)


@settings(max_examples=200, deadline=None)
@given(OBJECTS)
def test_fuzz_from_dict_raises_only_gpuq_errors(obj: dict[str, object]) -> None:
    only_gpuq_errors(validate_elastic_quota, obj)
    only_gpuq_errors(validate_elastic_quota, {"metadata": {"name": "q"}, "spec": obj})
