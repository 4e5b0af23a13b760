"""The DRA allocator against the structured allocator's shared test table, ported case by case
(``allocatortesting/allocator_testing.go`` of k8s.io/dynamic-resource-allocation v0.36.4; the case
name is the test id) plus gpuq's own cases in the same fixtures (``tests/fixtures/dra``).

Upstream runs its table with every feature on (the ``incubating`` allocator, 1.36's default); cases
that only test a feature switched off (``*-disabled``) do not apply to gpuq, which has them all on,
and list-type attributes are alpha (off) in 1.36. Where gpuq's answer differs on purpose the case
says why (``gpuq:``) and docs/design.md "DRA devices" lists the difference.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuq_k8s.common.model.devices.explain import Unfit
from gpuq_k8s.common.model.devices.search import Allocation, allocate_on_node
from gpuq_k8s.common.model.errors import GpuqError
from tests.testing.dra_cases import (
    Case,
    actual_result,
    build,
    canonical_selector,
    expected_result,
    expected_selector,
    load_cases,
)

CASES = load_cases()


def _key(item: dict[str, Any]) -> str:
    return json.dumps(item, sort_keys=True)


def test_the_table_is_large() -> None:
    names = {case.name for case in CASES}
    assert len(names) == len(CASES), "case names are unique"
    assert len(CASES) >= 100


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_allocator_case(case: Case) -> None:
    raw = case.raw
    if "error" in raw:
        with pytest.raises(GpuqError) as info:
            allocator, claims, node = build(raw)
            allocate_on_node(allocator.plan(claims), node)
        assert raw["error"] in str(info.value)
        return
    allocator, claims, node = build(raw)
    answer = allocate_on_node(allocator.plan(claims), node)
    assert isinstance(answer, Allocation | Unfit)
    if "steps" in raw:  # upstream's expectNumAllocateOneInvocations: the search visits the same states
        assert answer.steps == raw["steps"]
    if "expect" not in raw:
        assert isinstance(answer, Unfit), f"expected no allocation, got {answer}"
        for fragment in raw.get("unfit") or []:
            assert fragment in answer.message, answer.message
        return
    assert isinstance(answer, Allocation), answer.message if isinstance(answer, Unfit) else answer
    assert len(raw["expect"]) == len(claims)
    for expected, claim in zip(raw["expect"], claims, strict=True):
        allocation = answer.claims[claim.key]
        got = sorted(_key(actual_result(r)) for r in allocation.results)
        want = sorted(_key(expected_result(r)) for r in expected["results"])
        assert got == want, f"{claim.key}: {got} != {want}"
        selector = expected_selector(expected.get("nodeSelector", node.name), node.name)
        assert canonical_selector(allocation.node_selector) == canonical_selector(selector)
        assert [dict(c) for c in allocation.config] == (expected.get("config") or [])
