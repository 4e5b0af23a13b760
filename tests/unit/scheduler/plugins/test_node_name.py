"""NodeName (scheduler/plugins/node_name.py). Ported from kube-scheduler v1.36
``framework/plugins/nodename/node_name_test.go`` (TestNodeName), over the plugin's vectorised Filter."""

from __future__ import annotations

import pytest

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.placement.node_name import DOES_NOT_MATCH
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.status import Code
from gpuq_k8s.scheduler.plugins.node_name import NodeName
from tests.testing.builders import MakeNode, MakePod
from tests.testing.scheduler import make_scheduler

# TestNodeName: (name, the pod's spec.nodeName, the node's name, want: fits, else the reason)
CASES = [
    ("no host specified", "", "foo", None),
    ("host matches", "foo", "foo", None),
    ("host doesn't match", "bar", "foo", DOES_NOT_MATCH),
]


@pytest.mark.parametrize(("name", "pod_node", "node", "reason"), CASES, ids=[c[0] for c in CASES])
def test_node_name(name: str, pod_node: str, node: str, reason: str | None) -> None:
    sched, _ = make_scheduler()
    sched.set_node(MakeNode(node).alloc(cpu="1", pods="10").info())
    plugin = sched.framework.plugin(plugin_names.NODE_NAME)
    assert isinstance(plugin, NodeName)
    pod = MakePod("p").info().with_node_name(pod_node)
    state = CycleState()
    pre = plugin.pre_filter(state, pod)
    if not pod_node:
        assert pre.code is Code.SKIP  # nothing to check: the Filter is not run for the pod
        return
    result = plugin.filter(state, pod)
    row = sched.cluster.row_of[node]
    assert bool(result.passed[row]) is (reason is None)
    messages = [message for mask, message in result.reasons() if mask[row]]
    assert messages == ([] if reason is None else [reason])
    # kube: UnschedulableAndUnresolvable (no preemption renames a node).
    assert result.unresolvable is not None and bool(result.unresolvable[row]) is (reason is not None)
