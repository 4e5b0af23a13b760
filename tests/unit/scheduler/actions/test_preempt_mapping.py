"""How the ``preempt`` action maps onto gpuq's two preemptions (design.md Semantics 4 and 14): with
capacity-scheduling enabled (gpuq's default configuration), its ElasticQuota preemption is the preempt
of every pod it answers for, and Volcano's in-queue preemption never overrides it nor evicts pods of
a namespace an ElasticQuota governs; without it, Volcano's preempt decides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuq_k8s.common.model.config import DEFAULT_CONFIG_YAML
from tests.testing.builders import MakeElasticQuota, MakeNode, MakePod, MakePriorityClass
from tests.testing.volcano_scenarios import bound, phases, preempted, simulate

VOLCANO_ONLY = """\
actions: "enqueue, allocate, preempt"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
"""


def _objects() -> list[dict[str, Any]]:
    """Two low-priority pods of namespace ``guarded`` (ElasticQuota min cpu 2) fill the node; a
    high-priority pod of namespace ``other`` needs all of it. All in Volcano's default queue."""
    return [
        MakePriorityClass("low", 10).obj(),
        MakePriorityClass("high", 1000).obj(),
        MakeNode("n1").alloc(cpu="2", memory="8Gi", pods="110").obj(),
        MakeElasticQuota("eq", "guarded").min(cpu="2").max(cpu="4").obj(),
        MakePod("g1", "guarded").req(cpu="1").priority(10, "low").node("n1").obj(),
        MakePod("g2", "guarded").req(cpu="1").priority(10, "low").node("n1").obj(),
        MakePod("p", "other").req(cpu="2").priority(1000, "high").obj(),
    ]


def test_with_capacity_scheduling_its_answer_is_the_preempt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = simulate(tmp_path, capsys, _objects(), DEFAULT_CONFIG_YAML)
    assert preempted(out) == set()
    assert phases(out)["other/p"] == "Pending"
    reason = next(p["reason"] for p in out["pods"] if p["name"] == "p")
    assert "no eligible victims" in reason


def test_without_capacity_scheduling_volcanos_preempt_decides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = simulate(tmp_path, capsys, _objects(), VOLCANO_ONLY)
    assert preempted(out) == {"guarded/g1", "guarded/g2"}
    assert bound(out)["other/p"] == "n1"
