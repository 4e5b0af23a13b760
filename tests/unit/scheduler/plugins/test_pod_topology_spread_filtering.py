"""PodTopologySpread's PreFilter and Filter (scheduler/plugins/pod_topology_spread.py over
common/model/placement/topology_spread.py): kube-scheduler v1.36.4's
``pkg/scheduler/framework/plugins/podtopologyspread/filtering_test.go`` ``TestSingleConstraint`` and
``TestMultipleConstraints`` ported case by case (status codes per node, as upstream compares them), each
row named after its upstream case. Node inclusion policies are GA (1.33): every row runs with them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpuq_k8s.common.model.placement.topology_spread import CONSTRAINTS_NOT_MATCH, NODE_LABEL_NOT_MATCH
from gpuq_k8s.scheduler.framework.status import Code
from gpuq_k8s.scheduler.plugins.pod_topology_spread import PodTopologySpread
from tests.testing.placement import SKIP, KNode, KPod, cluster, exists, filter_verdicts

DNS = "DoNotSchedule"
FOO = exists("foo")
BAR = exists("bar")
OK, NO, HARD = Code.SUCCESS, Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def _zoned(
    *, foo: tuple[str, ...] = (), taint: tuple[str, ...] = (), without_node: tuple[str, ...] = ()
) -> list[KNode]:
    """node-a, node-b in zone1, node-x, node-y in zone2, each labelled node=<name>."""
    nodes = []
    for name, zone in (("node-a", "zone1"), ("node-b", "zone1"), ("node-x", "zone2"), ("node-y", "zone2")):
        node = KNode(name).label("zone", zone)
        if name not in without_node:
            node.label("node", name)
        if name in foo:
            node.label("foo", "")
        if name in taint:
            node.taint("node.kubernetes.io/unschedulable")
        nodes.append(node)
    return nodes


def _flat(*names: str, foo: tuple[str, ...] = (), taint: tuple[str, ...] = ()) -> list[KNode]:
    nodes = []
    for name in names:
        node = KNode(name).label("node", name)
        if name in foo:
            node.label("foo", "")
        if name in taint:
            node.taint("node.kubernetes.io/unschedulable")
        nodes.append(node)
    return nodes


def _pods(*placements: tuple[str, str], labels: dict[str, str] | None = None) -> list[KPod]:
    return [
        KPod(name).node(node).labels(labels if labels is not None else {"foo": ""})
        for name, node in placements
    ]


P2103 = _pods(
    ("p-a1", "node-a"), ("p-a2", "node-a"), ("p-b1", "node-b"), *((f"p-y{i}", "node-y") for i in (1, 2, 3))
)  # spreads 2/1/0/3 by node, 3/3 by zone
P110_1 = _pods(("p-b1", "node-a"), ("p-b2", "node-b"), ("p-y1", "node-y"))  # 1/1/0/1


def _incoming(*constraints: tuple[int, str, object], **options: object) -> KPod:
    pod = KPod("p").label("foo", "")
    for max_skew, key, labels in constraints:
        pod.spread(max_skew, key, DNS, labels, **options)  # type: ignore[arg-type]
    return pod


@dataclass
class Case:
    name: str
    pod: KPod
    nodes: list[KNode]
    pods: list[KPod]
    codes: dict[str, Code]


def _codes(**codes: Code) -> dict[str, Code]:
    return {name.replace("_", "-"): code for name, code in codes.items()}


ALL4 = ("node_a", "node_b", "node_x", "node_y")

SINGLE = [
    Case("no existing pods", _incoming((1, "zone", FOO)), _zoned(), [], _codes(**dict.fromkeys(ALL4, OK))),
    Case(
        "no existing pods, incoming pod doesn't match itself",
        _incoming((1, "zone", BAR)),
        _zoned(),
        [],
        _codes(**dict.fromkeys(ALL4, OK)),
    ),
    Case(
        "existing pods in a different namespace do not count",
        _incoming((1, "zone", FOO)),
        _zoned(),
        [
            KPod("p-a1", "ns1").node("node-a").label("foo", ""),
            KPod("p-b1", "ns2").node("node-a").label("foo", ""),
            *_pods(("p-x1", "node-x"), ("p-y1", "node-y")),
        ],
        _codes(node_a=OK, node_b=OK, node_x=NO, node_y=NO),
    ),
    Case(
        "existing pods do not match null selector",
        _incoming((1, "zone", None)),
        _zoned(),
        _pods(("p-x1", "node-x"), ("p-y1", "node-y")),
        _codes(**dict.fromkeys(ALL4, OK)),
    ),
    Case(
        "pods spread across zones as 3/3, all nodes fit",
        _incoming((1, "zone", FOO)),
        _zoned(),
        P2103,
        _codes(**dict.fromkeys(ALL4, OK)),
    ),
    Case(
        "pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
        _incoming((1, "zone", FOO)),
        [
            KNode("node-a").label("zone", "zone1").label("node", "node-a"),
            KNode("node-b").label("zon", "zone1").label("node", "node-b"),
            KNode("node-x").label("zone", "zone2").label("node", "node-x"),
            KNode("node-y").label("zone", "zone2").label("node", "node-y"),
        ],
        _pods(("p-a1", "node-a"), ("p-b1", "node-b"), ("p-x1", "node-x"), ("p-y1", "node-y")),
        _codes(node_a=OK, node_b=HARD, node_x=NO, node_y=NO),
    ),
    Case(
        "pod cannot be scheduled as all nodes don't have label 'rack'",
        _incoming((1, "rack", FOO)),
        [
            KNode("node-a").label("zone", "zone1").label("node", "node-a"),
            KNode("node-x").label("zone", "zone2").label("node", "node-x"),
        ],
        [],
        _codes(node_a=HARD, node_x=HARD),
    ),
    Case(
        "pods spread across nodes as 2/1/0/3, only node-x fits",
        _incoming((1, "node", FOO)),
        _zoned(),
        P2103,
        _codes(node_a=NO, node_b=NO, node_x=OK, node_y=NO),
    ),
    Case(
        "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
        _incoming((2, "node", FOO)),
        _zoned(),
        P2103,
        _codes(node_a=NO, node_b=OK, node_x=OK, node_y=NO),
    ),
    Case(
        "pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
        KPod("p").label("bar", "").spread(1, "node", DNS, FOO),
        _zoned(),
        P2103,
        _codes(node_a=NO, node_b=OK, node_x=OK, node_y=NO),
    ),
    Case(
        "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
        KPod("p").label("foo", "").node_affinity_in("node", ["node-a", "node-y"]).spread(1, "node", DNS, FOO),
        _zoned(),
        P2103,
        _codes(node_a=OK, node_b=OK, node_x=OK, node_y=NO),
    ),
    Case(
        "terminating Pods should be excluded",
        _incoming((1, "node", FOO)),
        _flat("node-a", "node-b"),
        [
            KPod("p-a").node("node-a").label("foo", "").terminating(),
            KPod("p-b").node("node-b").label("foo", ""),
        ],
        _codes(node_a=OK, node_b=NO),
    ),
    Case(
        "incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits",
        KPod("p").label("foo", "").node_affinity_not_in("node", ["node-b"]).spread(1, "zone", DNS, FOO),
        _zoned(),
        _pods(("p-b1", "node-b"), ("p-b2", "node-b"), ("p-y1", "node-y")),
        _codes(node_a=OK, node_b=OK, node_x=NO, node_y=NO),
    ),
    Case(
        "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains < minDomains, then the "
        "third node fits",
        _incoming((2, "node", FOO), min_domains=4),
        _flat("node-a", "node-b", "node-c"),
        _pods(
            ("p-a1", "node-a"), ("p-a2", "node-a"), ("p-b1", "node-b"), ("p-b2", "node-b"), ("p-c1", "node-c")
        ),
        _codes(node_a=NO, node_b=NO, node_c=OK),
    ),
    Case(
        "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains > minDomains, then the "
        "all "
        "nodes fit",
        _incoming((2, "node", FOO), min_domains=2),
        _flat("node-a", "node-b", "node-c"),
        _pods(
            ("p-a1", "node-a"), ("p-a2", "node-a"), ("p-b1", "node-b"), ("p-b2", "node-b"), ("p-c1", "node-c")
        ),
        _codes(node_a=OK, node_b=OK, node_c=OK),
    ),
    Case(
        "pods spread across zone as 2/1, maxSkew is 2 and the number of domains < minDomains, then the third "
        "and fourth nodes fit",
        _incoming((2, "zone", FOO), min_domains=3),
        _zoned(),
        _pods(("p-b1", "node-a"), ("p-b2", "node-b"), ("p-y1", "node-y")),
        _codes(node_a=NO, node_b=NO, node_x=OK, node_y=OK),
    ),
    Case(
        "pods spread across zone as 2/1, maxSkew is 2 and the number of domains > minDomains, then the all "
        "nodes fit",
        _incoming((2, "zone", FOO), min_domains=1),
        _zoned(),
        _pods(("p-b1", "node-a"), ("p-b2", "node-b"), ("p-y1", "node-y")),
        _codes(**dict.fromkeys(ALL4, OK)),
    ),
    Case(
        "NodeAffinityPolicy honored with labelSelectors",
        KPod("p").label("foo", "").node_selector({"foo": ""}).spread(1, "node", DNS, FOO),
        _flat("node-a", "node-b", "node-x", "node-y", foo=("node-a", "node-b", "node-x")),
        P110_1,
        _codes(node_a=NO, node_b=NO, node_x=OK, node_y=OK),
    ),
    Case(
        "NodeAffinityPolicy ignored with labelSelectors",
        KPod("p")
        .label("foo", "")
        .node_selector({"foo": ""})
        .spread(1, "node", DNS, FOO, node_affinity_policy="Ignore"),
        _flat("node-a", "node-b", "node-x", "node-y", foo=("node-a", "node-b", "node-x")),
        P110_1,
        _codes(node_a=NO, node_b=NO, node_x=OK, node_y=NO),
    ),
    Case(
        "NodeAffinityPolicy honored with nodeAffinity",
        KPod("p").label("foo", "").node_affinity_in("foo", [""]).spread(1, "node", DNS, FOO),
        _flat("node-a", "node-b", "node-x", "node-y", foo=("node-a", "node-b", "node-x")),
        P110_1,
        _codes(node_a=NO, node_b=NO, node_x=OK, node_y=OK),
    ),
    Case(
        "NodeAffinityPolicy ignored with labelSelectors (nodeAffinity)",
        KPod("p")
        .label("foo", "")
        .node_affinity_in("foo", [""])
        .spread(1, "node", DNS, FOO, node_affinity_policy="Ignore"),
        _flat("node-a", "node-b", "node-x", "node-y", foo=("node-a", "node-b", "node-x")),
        P110_1,
        _codes(node_a=NO, node_b=NO, node_x=OK, node_y=NO),
    ),
    Case(
        "NodeTaintsPolicy honored",
        _incoming((1, "node", FOO), node_taints_policy="Honor"),
        _flat("node-a", "node-b", "node-x", "node-y", foo=("node-a", "node-b", "node-x"), taint=("node-y",)),
        P110_1,
        _codes(node_a=NO, node_b=NO, node_x=OK, node_y=OK),
    ),
    Case(
        "NodeTaintsPolicy ignored",
        _incoming((1, "node", FOO)),
        _flat("node-a", "node-b", "node-x", "node-y", foo=("node-a", "node-b", "node-x"), taint=("node-y",)),
        P110_1,
        _codes(node_a=NO, node_b=NO, node_x=OK, node_y=NO),
    ),
]


def _check(case: Case) -> None:
    prefilter, verdicts = filter_verdicts(cluster(case.nodes, case.pods), PodTopologySpread, case.pod)
    assert prefilter == "success"
    got = {name: verdict.code or OK for name, verdict in verdicts.items()}
    assert got == case.codes
    for verdict in verdicts.values():
        if verdict.code is HARD:
            assert verdict.reason == NODE_LABEL_NOT_MATCH
        elif verdict.code is NO:
            assert verdict.reason == CONSTRAINTS_NOT_MATCH


@pytest.mark.parametrize("case", SINGLE, ids=[c.name for c in SINGLE])
def test_single_constraint(case: Case) -> None:
    """filtering_test.go TestSingleConstraint (the second "NodeAffinityPolicy ignored with
    labelSelectors" row, upstream's with nodeAffinity, carries a suffix here)."""
    _check(case)


MULTIPLE = [
    Case(
        "two Constraints on zone and node, spreads = [3/3, 2/1/0/3]",
        _incoming((1, "zone", FOO), (1, "node", FOO)),
        _zoned(),
        P2103,
        _codes(node_a=NO, node_b=NO, node_x=OK, node_y=NO),
    ),
    Case(
        "two Constraints on zone and node, spreads = [3/4, 2/1/0/4]",
        _incoming((1, "zone", FOO), (1, "node", FOO)),
        _zoned(),
        [*P2103, *_pods(("p-y4", "node-y"))],
        _codes(**dict.fromkeys(ALL4, NO)),
    ),
    Case(
        "Constraints hold different labelSelectors, spreads = [1/0, 1/0/0/1]",
        KPod("p").labels({"foo": "", "bar": ""}).spread(1, "zone", DNS, FOO).spread(1, "node", DNS, BAR),
        _zoned(),
        [*_pods(("p-a1", "node-a")), *_pods(("p-y1", "node-y"), labels={"bar": ""})],
        _codes(node_a=NO, node_b=NO, node_x=OK, node_y=NO),
    ),
    Case(
        "Constraints hold different labelSelectors, spreads = [1/0, 0/0/1/1]",
        KPod("p").labels({"foo": "", "bar": ""}).spread(1, "zone", DNS, FOO).spread(1, "node", DNS, BAR),
        _zoned(),
        [*_pods(("p-a1", "node-a")), *_pods(("p-x1", "node-x"), ("p-y1", "node-y"), labels={"bar": ""})],
        _codes(**dict.fromkeys(ALL4, NO)),
    ),
    Case(
        "Constraints hold different labelSelectors, spreads = [2/3, 1/0/0/1]",
        KPod("p").labels({"foo": "", "bar": ""}).spread(1, "zone", DNS, FOO).spread(1, "node", DNS, BAR),
        _zoned(),
        [
            *_pods(("p-a1", "node-a"), ("p-y1", "node-y"), ("p-y3", "node-y")),
            *_pods(("p-a2", "node-a"), ("p-y2", "node-y"), labels={"foo": "", "bar": ""}),
        ],
        _codes(node_a=NO, node_b=OK, node_x=NO, node_y=NO),
    ),
    Case(
        "Constraints hold different labelSelectors but pod doesn't match itself on 'zone' constraint",
        KPod("p").label("bar", "").spread(1, "zone", DNS, FOO).spread(1, "node", DNS, BAR),
        _zoned(),
        [*_pods(("p-a1", "node-a")), *_pods(("p-x1", "node-x"), ("p-y1", "node-y"), labels={"bar": ""})],
        _codes(node_a=OK, node_b=OK, node_x=NO, node_y=NO),
    ),
    Case(
        "two Constraints on zone and node, absence of label 'node' on node-x, spreads = [1/1, 1/0/0/1]",
        _incoming((1, "zone", FOO), (1, "node", FOO)),
        _zoned(without_node=("node-x",)),
        _pods(("p-a1", "node-a"), ("p-y3", "node-y")),
        _codes(node_a=NO, node_b=OK, node_x=HARD, node_y=NO),
    ),
    Case(
        "two node inclusion Constraints, zone: honor/ignore, node: ignore/ignore",
        KPod("p")
        .label("foo", "")
        .node_selector({"foo": ""})
        .spread(1, "zone", DNS, FOO)
        .spread(1, "node", DNS, FOO, node_affinity_policy="Ignore"),
        _zoned(foo=("node-a", "node-b", "node-x")),
        _pods(("p-a1", "node-a"), ("p-b1", "node-b"), ("p-y1", "node-y")),
        _codes(node_a=NO, node_b=NO, node_x=OK, node_y=NO),
    ),
    Case(
        "two node inclusion Constraints, zone: honor/honor, node: honor/ignore",
        KPod("p")
        .label("foo", "")
        .spread(1, "zone", DNS, FOO, node_taints_policy="Honor")
        .spread(1, "node", DNS, FOO),
        _zoned(foo=("node-a", "node-b", "node-x"), taint=("node-y",)),
        _pods(("p-a1", "node-a"), ("p-b1", "node-b"), ("p-y1", "node-y")),
        _codes(node_a=NO, node_b=NO, node_x=OK, node_y=NO),
    ),
    Case(
        "two node inclusion Constraints, zone: honor/ignore, node: honor/ignore",
        KPod("p")
        .label("foo", "")
        .node_selector({"foo": ""})
        .spread(1, "zone", DNS, FOO)
        .spread(1, "node", DNS, FOO),
        _zoned(foo=("node-a", "node-x", "node-y"), taint=("node-y",)),
        _pods(("p-a1", "node-a"), ("p-b1", "node-b"), ("p-y1", "node-y")),
        _codes(node_a=NO, node_b=OK, node_x=OK, node_y=NO),
    ),
    Case(
        "two node inclusion Constraints, zone: honor/honor, node: ignore/ignore",
        KPod("p")
        .label("foo", "")
        .node_selector({"foo": ""})
        .spread(1, "zone", DNS, FOO, node_taints_policy="Honor")
        .spread(1, "node", DNS, FOO, node_affinity_policy="Ignore"),
        _zoned(foo=("node-a", "node-x", "node-y"), taint=("node-y",)),
        _pods(("p-a1", "node-a"), ("p-b1", "node-b"), ("p-y1", "node-y")),
        _codes(node_a=NO, node_b=NO, node_x=OK, node_y=NO),
    ),
    Case(
        "two Constraints on zone, spreads = [3/3, 2/1]",
        KPod("p").labels({"foo": "", "bar": ""}).spread(1, "zone", DNS, BAR).spread(1, "zone", DNS, FOO),
        _zoned(),
        [
            *_pods(("p-a2", "node-a"), ("p-y1", "node-y"), ("p-y3", "node-y")),
            *_pods(("p-a1", "node-a"), ("p-b1", "node-b"), ("p-y2", "node-y"), labels={"foo": "", "bar": ""}),
        ],
        _codes(node_a=NO, node_b=NO, node_x=OK, node_y=OK),
    ),
    Case(
        "two Constraints on zone, spreads = [3/4, 2/1]",
        KPod("p").labels({"foo": "", "bar": ""}).spread(1, "zone", DNS, BAR).spread(1, "zone", DNS, FOO),
        _zoned(),
        [
            *_pods(("p-a2", "node-a"), ("p-y1", "node-y"), ("p-y3", "node-y"), ("p-y4", "node-y")),
            *_pods(("p-a1", "node-a"), ("p-b1", "node-b"), ("p-y2", "node-y"), labels={"foo": "", "bar": ""}),
        ],
        _codes(**dict.fromkeys(ALL4, NO)),
    ),
]


@pytest.mark.parametrize("case", MULTIPLE, ids=[c.name for c in MULTIPLE])
def test_multiple_constraints(case: Case) -> None:
    """filtering_test.go TestMultipleConstraints. The two "two Constraints on zone" rows hold two
    DoNotSchedule constraints of one key, which kube-apiserver refuses at creation (and ``gpuq simulate``'s
    loader with it, below); the scheduler, like kube-scheduler, takes them."""
    _check(case)


def test_prefilter_skips_a_pod_without_constraints() -> None:
    """filtering_test.go TestPreFilterDisabled's counterpart: nothing to filter, Skip (the system
    defaults are ScheduleAnyway only)."""
    prefilter, verdicts = filter_verdicts(cluster(_zoned()), PodTopologySpread, KPod("p").label("foo", ""))
    assert prefilter == SKIP
    assert set(verdicts) == {"node-a", "node-b", "node-x", "node-y"}
