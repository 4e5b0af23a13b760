"""The allocate action's own resource fit (scheduler/actions/allocate.py): Volcano's allocate never
fills a node past its allocatable, whatever plugins the configuration names (allocate.go
``predicateFn`` checks the task's request against the node's idle resources before the predicate
plugins). In gpuq the fit is part of ``predicates``; without an enabled ``predicates`` the allocate
action adds it on its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.testing.volcano_scenarios import bound, pod, simulate, volcano_node, volcano_pod

TWO_CPU_NODE_FOUR_PODS = [
    volcano_node("n1", "2", "4Gi").obj(),
    *(volcano_pod("ns1", f"p{i}", "1", "1Gi").obj() for i in range(4)),
]


@pytest.mark.parametrize(
    "config",
    [
        'actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: priority\n',
        'actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: capacity-card\n',
        'actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: priority\n  - name: predicates\n'
        "    enablePredicate: false\n",
        'actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: priority\n  - name: predicates\n',
    ],
    ids=["priority-only", "capacity-card-only", "predicates-switched-off", "predicates"],
)
def test_a_node_is_never_filled_past_its_allocatable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str
) -> None:
    out = simulate(tmp_path, capsys, TWO_CPU_NODE_FOUR_PODS, config)
    assert bound(out) == {"ns1/p0": "n1", "ns1/p1": "n1"}
    for name in ("p2", "p3"):
        assert pod(out, name)["phase"] == "Pending"
        assert "Insufficient cpu" in pod(out, name)["reason"], pod(out, name)["reason"]
