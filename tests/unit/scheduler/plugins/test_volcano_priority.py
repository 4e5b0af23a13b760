"""priority (scheduler/plugins/priority.py): the cases of Volcano's
``pkg/scheduler/plugins/priority/priority_test.go`` TestPreempt, run through ``gpuq simulate`` with the
same objects, the same actions (allocate, preempt) and the priority plugin with the same switches.

The scenarios name ``predicates`` in a second tier as well (it has no preemptable function, so it does
not change the victims); without it the allocate action's own resource fit would do the same
(tests/unit/scheduler/actions/test_allocate_resource_fit.py).

Volcano's helper leaves ``pods`` out of a node's allocatable except where the test names it; these
tests give every node the ``pods: 10`` the upstream nodes have."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.testing.builders import MakePod, MakePodGroup, MakePriorityClass, MakeQueue
from tests.testing.config import config_text
from tests.testing.volcano_scenarios import bound, phases, preempted, simulate, volcano_node, volcano_pod

PREEMPTABLE = "volcano.sh/preemptable"


# priority_test.go ``pluginEnableEvict`` / ``pluginDisableEvict``: priority with its job and task order and
# job starving on, its preemptable and reclaimable functions on / off; then predicates.
ORDERS = {"enableTaskOrder": True, "enableJobOrder": True, "enableJobStarving": True}
ENABLE_EVICT = config_text(
    "priority",
    "predicates",
    actions="allocate, preempt",
    switches={"priority": {**ORDERS, "enablePreemptable": True, "enableReclaimable": True}},
)
DISABLE_EVICT = config_text(
    "priority",
    "predicates",
    actions="allocate, preempt",
    switches={"priority": {**ORDERS, "enablePreemptable": False, "enableReclaimable": False}},
)


def _common() -> list[dict[str, Any]]:
    """Priority classes low (100) and high (1000); pg1 (ns1, low) and pg2 (ns2, high), minMember 1,
    Inqueue, both in queue q1 (capability 6 cpu, 6G)."""
    return [
        MakePriorityClass("low-priority", 100).obj(),
        MakePriorityClass("high-priority", 1000).obj(),
        MakePodGroup("pg1", "ns1")
        .queue("q1")
        .min_member(1)
        .phase("Inqueue")
        .spec(priorityClassName="low-priority")
        .obj(),
        MakePodGroup("pg2", "ns2")
        .queue("q1")
        .min_member(1)
        .phase("Inqueue")
        .spec(priorityClassName="high-priority")
        .obj(),
        MakeQueue("q1").weight(1).capability(cpu="6", memory="6G").obj(),
    ]


def _preemptee(name: str, node: str, preemptable: str) -> MakePod:
    """pg1's running 3-cpu, 3G pod ``name`` on ``node`` with ``volcano.sh/preemptable: preemptable``."""
    return volcano_pod("ns1", name, "3", "3G", node).group("pg1").annotations({PREEMPTABLE: preemptable})


def test_priority_test_go_enable_preempt_low_priority(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestPreempt "enable preempt low priority: enablePreemptable:true": node1 (6 cpu, 6G) runs pg1's
    preemptee1 (pod priority unset) and preemptee2 (pod priority 1000), both preemptable; pg2's 3-cpu
    preemptor1 fits nowhere (node2 has 2 cpu). Expected: exactly ns1/preemptee1, the lower-priority task
    of the lower-priority job, evicted; preemptor1 placed on node1."""
    objects = [
        *_common(),
        _preemptee("preemptee1", "node1", "true").obj(),
        _preemptee("preemptee2", "node1", "true").priority(1000).obj(),
        volcano_pod("ns2", "preemptor1", "3", "3G").group("pg2").obj(),
        volcano_node("node1", "6", "6G").obj(),
        volcano_node("node2", "2", "2G").obj(),
    ]
    out = simulate(tmp_path, capsys, objects, ENABLE_EVICT)
    assert preempted(out) == {"ns1/preemptee1"}
    assert bound(out)["ns2/preemptor1"] == "node1"
    assert bound(out)["ns1/preemptee2"] == "node1"


def test_priority_test_go_disable_preempt_low_priority(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestPreempt "disable preempt low priority: enablePreemptable:false": node1 and node2 (3 cpu, 3G
    each) are full with pg1's preemptee1 (preemptable) and preemptee2 (not); with the plugin's
    preemptable function off nothing is evicted and preemptor1 stays pending."""
    objects = [
        *_common(),
        _preemptee("preemptee1", "node1", "true").obj(),
        _preemptee("preemptee2", "node2", "false").obj(),
        volcano_pod("ns2", "preemptor1", "3", "3G").group("pg2").obj(),
        volcano_node("node1", "3", "3G").obj(),
        volcano_node("node2", "3", "3G").obj(),
    ]
    out = simulate(tmp_path, capsys, objects, DISABLE_EVICT)
    assert preempted(out) == set()
    assert phases(out)["ns2/preemptor1"] == "Pending"
    assert bound(out) == {"ns1/preemptee1": "node1", "ns1/preemptee2": "node2"}
