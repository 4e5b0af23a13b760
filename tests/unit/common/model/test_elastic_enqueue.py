"""Job mode under ElasticQuota (common/model/elastic/enqueue.py; design.md Semantics 4, "Enqueue"): a
PodGroup enters its queue only if its namespace's ElasticQuota can hold it, counting what the
namespace's jobs already Inqueue reserve."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from gpuq_k8s.common.model.elastic.enqueue import (
    GATED,
    PARKED,
    TRYING,
    MemberState,
    enqueue_refusal,
    job_demand,
    reserves,
    unbound_part,
)
from gpuq_k8s.common.model.elastic.ledger import RULE_MAX, RULE_TOTAL_MIN, ElasticQuotaInfos
from gpuq_k8s.common.model.elastic.quota import ElasticQuota
from gpuq_k8s.common.model.outlook import NEVER, outlook_of
from gpuq_k8s.common.model.resources import Resources
from tests.testing.builders import MakeElasticQuota

GPU = "nvidia.com/gpu"


def _quota(ns: str, low: int, high: int) -> ElasticQuota:
    return ElasticQuota.from_dict(MakeElasticQuota(ns, ns).min({GPU: str(low)}).max({GPU: str(high)}).obj())


def _infos(used: Mapping[str, int], quotas: Mapping[str, tuple[int, int]]) -> ElasticQuotaInfos:
    """Quotas ``ns -> (min, max)`` GPUs, and ``used`` GPUs charged per namespace (one pod each)."""
    infos = ElasticQuotaInfos()
    for ns, (low, high) in quotas.items():
        infos.upsert(_quota(ns, low, high))
    for ns, count in used.items():
        infos.reserve(ns, f"{ns}/running", Resources({GPU: count * 1000}))
    return infos


TEAMS = {"a": (4, 16), "b": (4, 16)}  # the guaranteed pool: 8 GPUs


@pytest.mark.parametrize(
    ("case", "used", "reserved", "demand", "rule"),
    [
        # within max and within the pool's room
        ("fits the pool", {"a": 4, "b": 2}, {}, 2, None),
        # a's own guarantee is 4: 6 + 4 > 4, and the pool has 2 left of 8
        ("over min, the pool full", {"a": 4, "b": 2}, {}, 4, RULE_TOTAL_MIN),
        # within a's own min: what b borrows (6 > 4) is taken back by preemption
        ("within min, others borrow", {"a": 0, "b": 8}, {}, 4, None),
        # a's Inqueue jobs reserve 2 of its min: 2 + 4 > 4, and the pool (8 used) has no room
        ("own Inqueue jobs count", {"a": 0, "b": 8}, {"a": 2}, 4, RULE_TOTAL_MIN),
        # b's Inqueue jobs take the pool's room: 4 + 2 used, 2 reserved, 2 more > 8
        ("others' Inqueue jobs count in the pool", {"a": 4, "b": 2}, {"b": 2}, 2, RULE_TOTAL_MIN),
        # max: 12 used + 2 reserved + 4 > 16
        ("max with Inqueue jobs", {"a": 12}, {"a": 2}, 4, RULE_MAX),
        ("max itself", {}, {}, 17, RULE_MAX),
    ],
)
def test_enqueue_refusal(
    case: str, used: dict[str, int], reserved: dict[str, int], demand: int, rule: str | None
) -> None:
    infos = _infos(used, TEAMS)
    reservations = {ns: {GPU: n * 1000} for ns, n in reserved.items()}
    refusal = enqueue_refusal(infos, "a", {GPU: demand * 1000}, reservations, "PodGroup a/job")
    assert (None if refusal is None else refusal.rule) == rule, case


def test_a_namespace_without_an_elastic_quota_is_not_checked() -> None:
    infos = _infos({"a": 4, "b": 4}, TEAMS)
    assert enqueue_refusal(infos, "free", {GPU: 100_000}, {}, "PodGroup free/job") is None


def test_a_resource_no_quota_names_is_not_checked() -> None:
    infos = _infos({"a": 4, "b": 4}, TEAMS)
    assert enqueue_refusal(infos, "a", {"cpu": 10**9, GPU: 0}, {}, "PodGroup a/job") is None


def test_the_refusal_names_the_job_quota_resource_and_amounts() -> None:
    infos = _infos({"a": 4, "b": 2}, TEAMS)
    refusal = enqueue_refusal(infos, "a", {GPU: 4000}, {"b": {GPU: 1000}}, "PodGroup a/job")
    assert refusal is not None
    assert refusal.message == (
        "quota exceeded in the sum of all ElasticQuota min (guaranteed pool) by PodGroup a/job with "
        "the jobs already Inqueue for nvidia.com/gpu: requested 4, "
        "available 1, used 7, limit 8 (waits for room: nvidia.com/gpu used 7 would have to drop to 4)"
    )  # "used" counts b's Inqueue job: 6 charged + 1 reserved
    assert not refusal.unresolvable
    never = enqueue_refusal(infos, "a", {GPU: 17_000}, {}, "PodGroup a/job")
    assert never is not None and never.unresolvable and outlook_of(never.message) == NEVER


def test_job_demand_is_min_resources_else_the_least_min_member_pods_ask() -> None:
    pods = [{GPU: 4000, "cpu": 1000}, {GPU: 1000, "pods": 1}, {GPU: 2000}]
    assert job_demand({GPU: 3000, "pods": 2}, pods, 2) == {GPU: 3000}
    assert job_demand(None, pods, 2) == {GPU: 3000, "cpu": 0}
    assert job_demand({}, pods, 5) == {GPU: 7000, "cpu": 1000}  # fewer pods than minMember known yet
    assert job_demand(None, [], 3) == {}


def test_an_inqueue_job_reserves_what_its_pods_do_not_charge_yet() -> None:
    assert unbound_part({GPU: 8000, "cpu": 4000}, [{GPU: 2000}, {GPU: 2000, "cpu": 8000}]) == {GPU: 4000}
    assert unbound_part({GPU: 4000}, [{GPU: 4000}]) == {}
    assert unbound_part({GPU: 4000}, []) == {GPU: 4000}


@pytest.mark.parametrize(
    ("unplaced", "expected"),
    [
        pytest.param([], True, id="no pod yet (or all placed): its pods are on their way"),
        pytest.param([TRYING, TRYING], True, id="not tried yet"),
        pytest.param([PARKED, TRYING], True, id="one parked, one still to be tried"),
        pytest.param([PARKED, PARKED], False, id="every member tried and parked"),
        pytest.param([PARKED], False, id="the one left of a gang whose others are placed, parked"),
        pytest.param([PARKED, GATED], False, id="parked, and one gated (never tried while gated)"),
        pytest.param([GATED, GATED], True, id="only gated: never tried, no verdict on the cluster"),
    ],
)
def test_a_job_reserves_until_every_member_was_tried_and_parked(
    unplaced: list[MemberState], expected: bool
) -> None:
    assert reserves(unplaced) is expected
