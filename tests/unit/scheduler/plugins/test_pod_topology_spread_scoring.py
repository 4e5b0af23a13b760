"""PodTopologySpread's PreScore, Score and NormalizeScore (scheduler/plugins/pod_topology_spread.py):
kube-scheduler v1.36.4's ``pkg/scheduler/framework/plugins/podtopologyspread/scoring_test.go``
``TestPodTopologySpreadScore`` ported case by case (``defaultingType: System``, as Volcano's nodeorder
builds the plugin), each row named after its upstream case; scores are the normalised ones, weight 1.
``nodes`` are the candidates (kube's filtered nodes), ``failed`` the other nodes of the cluster."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuq_k8s.scheduler.plugins.pod_topology_spread import PodTopologySpreadScore
from tests.testing.placement import KNode, KPod, cluster, exists, scores, selector

SA = "ScheduleAnyway"
HOST = "kubernetes.io/hostname"
FOO = exists("foo")
BAR = exists("bar")


def _host(*names: str) -> list[KNode]:
    return [KNode(n).label(HOST, n) for n in names]


def _zone_host(*specs: tuple[str, str]) -> list[KNode]:
    return [KNode(n).label("zone", z).label(HOST, n) for n, z in specs]


def _by_node(*names: str, foo: tuple[str, ...] = (), taint: tuple[str, ...] = ()) -> list[KNode]:
    nodes = []
    for name in names:
        node = KNode(name).label("node", name)
        if name in foo:
            node.label("foo", "")
        if name in taint:
            node.taint("node.kubernetes.io/unschedulable")
        nodes.append(node)
    return nodes


def _pods(*placements: str, labels: dict[str, str] | None = None) -> list[KPod]:
    """``p-a1@node-a`` style placements, each a pod labelled foo (or ``labels``)."""
    out = []
    for placement in placements:
        name, _, node = placement.partition("@")
        out.append(KPod(name).node(node).labels(labels if labels is not None else {"foo": ""}))
    return out


def _spread(pod: KPod, *constraints: tuple[int, str, Any], **options: Any) -> KPod:
    for max_skew, key, labels in constraints:
        pod.spread(max_skew, key, SA, labels, **options)
    return pod


def _p(*labels: str) -> KPod:
    return KPod("p").labels(dict.fromkeys(labels, ""))


ZONES4 = (("node-a", "zone1"), ("node-b", "zone1"), ("node-x", "zone2"), ("node-y", "zone2"))
A4 = ("p-a1@node-a", "p-a2@node-a", "p-a3@node-a", "p-a4@node-a")


@dataclass
class Case:
    name: str
    pod: KPod
    nodes: list[KNode]
    expected: list[int]
    pods: list[KPod] = field(default_factory=list)
    failed: list[KNode] = field(default_factory=list)
    objects: list[dict[str, Any]] = field(default_factory=list)


CASES = [
    Case(
        "one constraint on node, no existing pods",
        _spread(_p("foo"), (1, HOST, FOO)),
        _host("node-a", "node-b"),
        [100, 100],
    ),
    Case(
        "one constraint on node, only one node is candidate",
        _spread(_p("foo"), (1, HOST, FOO)),
        _host("node-a"),
        [100],
        _pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b"),
        _host("node-b"),
    ),
    Case(
        "one constraint on node, all nodes have the same number of matching pods",
        _spread(_p("foo"), (1, HOST, FOO)),
        _host("node-a", "node-b"),
        [100, 100],
        _pods("p-a1@node-a", "p-b1@node-b"),
    ),
    Case(
        "one constraint on node, all 4 nodes are candidates",
        _spread(_p("foo"), (1, HOST, FOO)),
        _host("node-a", "node-b", "node-c", "node-d"),
        [20, 60, 100, 0],
        _pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-d1@node-d", "p-d2@node-d", "p-d3@node-d"),
    ),
    Case(
        "one constraint on node, null selector",
        _spread(_p("foo"), (1, HOST, None)),
        _host("node-a", "node-b", "node-c", "node-d"),
        [100, 100, 100, 100],
        _pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-d1@node-d", "p-d2@node-d", "p-d3@node-d"),
    ),
    Case(
        "one constraint on node, all 4 nodes are candidates, maxSkew=2",
        _spread(_p("foo"), (2, HOST, FOO)),
        _host("node-a", "node-b", "node-c", "node-d"),
        [33, 66, 100, 16],
        _pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-d1@node-d", "p-d2@node-d", "p-d3@node-d"),
    ),
    Case(
        "one constraint on node, all 4 nodes are candidates, maxSkew=3",
        _spread(_p("foo"), (3, HOST, FOO)),
        _host("node-a", "node-b", "node-c", "node-d"),
        [44, 66, 77, 100],
        _pods(*A4, "p-b1@node-b", "p-b2@node-b", "p-b3@node-b", "p-c1@node-c", "p-c2@node-c", "p-d1@node-d"),
    ),
    Case(
        "system defaulting, nodes don't have zone, pods match service",
        _p("foo"),
        _host("node-a", "node-b", "node-c", "node-d"),
        [44, 66, 77, 100],
        _pods(*A4, "p-b1@node-b", "p-b2@node-b", "p-b3@node-b", "p-c1@node-c", "p-c2@node-c", "p-d1@node-d"),
        objects=[
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "svc", "namespace": "default"},
                "spec": {"selector": {"foo": ""}},
            }
        ],
    ),
    Case(
        "one constraint on node, 3 out of 4 nodes are candidates",
        _spread(_p("foo"), (1, HOST, FOO)),
        _host("node-a", "node-b", "node-x"),
        [33, 83, 100],
        _pods(*A4, "p-b1@node-b", "p-b2@node-b", "p-x1@node-x", "p-y1@node-y", "p-y2@node-y", "p-y3@node-y"),
        _host("node-y"),
    ),
    Case(
        "one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match topology key",
        _spread(_p("foo"), (1, HOST, FOO)),
        [
            KNode("node-a").label(HOST, "node-a"),
            KNode("node-b").label("n", "node-b"),
            KNode("node-x").label(HOST, "node-x"),
        ],
        [16, 0, 100],
        _pods(*A4, "p-b1@node-b", "p-b2@node-b", "p-x1@node-x", "p-y1@node-y", "p-y2@node-y", "p-y3@node-y"),
        _host("node-y"),
    ),
    Case(
        "one constraint on zone, 3 out of 4 nodes are candidates",
        _spread(_p("foo"), (1, "zone", FOO)),
        _zone_host(*ZONES4[:3]),
        [75, 75, 100],
        _pods(*A4, "p-b1@node-b", "p-b2@node-b", "p-x1@node-x", "p-y1@node-y", "p-y2@node-y", "p-y3@node-y"),
        _zone_host(ZONES4[3]),
    ),
    Case(
        "two Constraints on zone and node, 2 out of 4 nodes are candidates",
        _spread(_p("foo"), (1, "zone", FOO), (1, HOST, FOO)),
        _zone_host(ZONES4[0], ZONES4[2]),
        [100, 63],
        _pods(
            "p-a1@node-a",
            "p-a2@node-a",
            "p-b1@node-b",
            "p-x1@node-x",
            "p-x2@node-x",
            "p-y1@node-y",
            "p-y2@node-y",
            "p-y3@node-y",
            "p-y4@node-y",
        ),
        _zone_host(ZONES4[1], ZONES4[3]),
    ),
    Case(
        "two Constraints on zone, 2 out of 4 nodes are candidates",
        _spread(_p("foo", "bar"), (1, "zone", FOO), (1, "zone", BAR)),
        [KNode("node-a").label("zone", "zone1"), KNode("node-x").label("zone", "zone2")],
        [85, 100],
        [
            *_pods("p-a2@node-a", "p-y1@node-y", "p-y3@node-y"),
            *_pods("p-a1@node-a", "p-b1@node-b", "p-y2@node-y", labels={"foo": "", "bar": ""}),
        ],
        [KNode("node-b").label("zone", "zone1"), KNode("node-y").label("zone", "zone2")],
    ),
    Case(
        "two Constraints on zone and node, with different labelSelectors",
        _spread(_p("foo", "bar"), (1, "zone", FOO), (1, HOST, BAR)),
        _zone_host(*ZONES4),
        [60, 20, 100, 60],
        [
            *_pods("p-a1@node-a", "p-y1@node-y"),
            *_pods("p-b1@node-b", labels={"foo": "", "bar": ""}),
            *_pods("p-y2@node-y", labels={"bar": ""}),
        ],
    ),
    Case(
        "two Constraints on zone and node, with different labelSelectors, some nodes have 0 pods",
        _spread(_p("foo", "bar"), (1, "zone", FOO), (1, HOST, BAR)),
        _zone_host(*ZONES4),
        [100, 60, 40, 0],
        [
            *_pods("p-b1@node-b", labels={"bar": ""}),
            *_pods("p-x1@node-x"),
            *_pods("p-y1@node-y", labels={"foo": "", "bar": ""}),
        ],
    ),
    Case(
        "two Constraints on zone and node, with different labelSelectors, 3 out of 4 nodes are candidates",
        _spread(_p("foo", "bar"), (1, "zone", FOO), (1, HOST, BAR)),
        _zone_host(*ZONES4[:3]),
        [50, 25, 100],
        [
            *_pods("p-a1@node-a", "p-y1@node-y"),
            *_pods("p-b1@node-b", labels={"foo": "", "bar": ""}),
            *_pods("p-y2@node-y", labels={"bar": ""}),
        ],
        _zone_host(ZONES4[3]),
    ),
    Case(
        "existing pods in a different namespace do not count",
        _spread(_p("foo"), (1, HOST, FOO)),
        _host("node-a", "node-b"),
        [100, 33],
        [
            KPod("p-a1", "ns1").node("node-a").label("foo", ""),
            *_pods("p-a2@node-a", "p-b1@node-b", "p-b2@node-b"),
        ],
    ),
    Case(
        "terminating Pods should be excluded",
        _spread(_p("foo"), (1, HOST, FOO)),
        _host("node-a", "node-b"),
        [100, 0],
        [KPod("p-a").node("node-a").label("foo", "").terminating(), *_pods("p-b@node-b")],
    ),
    Case(
        "minDomains has no effect when ScheduleAnyway",
        _spread(_p("foo"), (2, "node", FOO), min_domains=10),
        _by_node("node-a", "node-b", "node-c"),
        [75, 75, 100],
        _pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-b2@node-b", "p-c1@node-c"),
    ),
    Case(
        "NodeAffinityPolicy honoed with labelSelectors",
        _spread(_p("foo").node_selector({"foo": ""}), (1, "node", FOO)),
        _by_node("node-a", "node-b", "node-c", foo=("node-a", "node-b")),
        [0, 33, 100],
        _pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-c1@node-c"),
    ),
    Case(
        "NodeAffinityPolicy ignored with labelSelectors",
        _spread(_p("foo").node_selector({"foo": ""}), (1, "node", FOO), node_affinity_policy="Ignore"),
        _by_node("node-a", "node-b", "node-c", foo=("node-a", "node-b")),
        [66, 100, 100],
        _pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-c1@node-c"),
    ),
    Case(
        "NodeAffinityPolicy honoed with nodeAffinity",
        _spread(_p("foo").node_affinity_in("foo", [""]), (1, "node", FOO)),
        _by_node("node-a", "node-b", "node-c", foo=("node-a", "node-b")),
        [0, 33, 100],
        _pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-c1@node-c"),
    ),
    Case(
        "NodeAffinityPolicy ignored with nodeAffinity",
        _spread(_p("foo").node_affinity_in("foo", [""]), (1, "node", FOO), node_affinity_policy="Ignore"),
        _by_node("node-a", "node-b", "node-c", foo=("node-a", "node-b")),
        [66, 100, 100],
        _pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-c1@node-c"),
    ),
    Case(
        "NodeTaintsPolicy honored",
        _spread(_p("foo"), (1, "node", FOO), node_taints_policy="Honor"),
        _by_node("node-a", "node-b", "node-c", taint=("node-c",)),
        [0, 33, 100],
        _pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-c1@node-c"),
    ),
    Case(
        "NodeTaintsPolicy ignored",
        _spread(_p("foo"), (1, "node", FOO)),
        _by_node("node-a", "node-b", "node-c", taint=("node-c",)),
        [66, 100, 100],
        _pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-c1@node-c"),
    ),
    Case(
        "matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
        _p("foo", "bar")
        .spread(1, "zone", SA, selector(), match_label_keys=["foo"])
        .spread(1, HOST, SA, selector(), match_label_keys=["bar"]),
        _zone_host(("node-a", "zone1"), ("node-b", "zone1"), ("node-c", "zone2"), ("node-d", "zone2")),
        [60, 20, 60, 100],
        [
            *_pods("p-a1@node-a", "p-y1@node-c"),
            *_pods("p-b1@node-b", labels={"foo": "", "bar": ""}),
            *_pods("p-y2@node-c", labels={"bar": ""}),
        ],
    ),
    Case(
        "matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
        _p("foo", "bar", "baz").spread(1, "zone", SA, FOO).spread(1, HOST, SA, BAR, match_label_keys=["baz"]),
        _zone_host(("node-a", "zone1"), ("node-b", "zone1"), ("node-c", "zone2"), ("node-d", "zone2")),
        [60, 20, 60, 100],
        [
            *_pods("p-a1@node-a", "p-c1@node-c"),
            *_pods("p-b1@node-b", labels={"foo": "", "bar": "", "baz": ""}),
            *_pods("p-c2@node-c", labels={"bar": ""}),
            *_pods("p-d3@node-c", labels={"bar": "", "baz": ""}),
        ],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_pod_topology_spread_score(case: Case) -> None:
    """scoring_test.go TestPodTopologySpreadScore (its row "matchLabelKeys ignored when feature gate
    disabled" is left out: the gate is on in 1.36, as gpuq has it)."""
    scheduler = cluster([*case.nodes, *case.failed], case.pods, case.objects)
    names = [n.obj["metadata"]["name"] for n in case.nodes]
    got = scores(scheduler, PodTopologySpreadScore, case.pod, names)
    assert got == dict(zip(names, case.expected, strict=True))


def test_pre_score_skips_a_pod_without_constraints_or_owners() -> None:
    """scoring_test.go TestPreScoreSkip's cases: no ScheduleAnyway constraint (only DoNotSchedule
    ones), or no constraint and nothing (no Service, no controller) to select its peers by: Skip."""
    nodes = _zone_host(*ZONES4)
    only_hard = _p("foo").spread(1, "zone", "DoNotSchedule", FOO)
    for pod in (only_hard, _p("foo")):
        scheduler = cluster(nodes)
        plugin = next(p for p in scheduler.framework.plugins if isinstance(p, PodTopologySpreadScore))
        constraints, _ = plugin.constraints(pod.info())
        assert constraints == ()
