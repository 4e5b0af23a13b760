"""InterPodAffinity's PreScore, Score and NormalizeScore (scheduler/plugins/inter_pod_affinity.py):
kube-scheduler v1.36.4's ``pkg/scheduler/framework/plugins/interpodaffinity/scoring_test.go`` ported
case by case (``TestPreferredAffinity``, ``TestPreferredAffinityWithHardPodAffinitySymmetricWeight``),
each row named after its upstream case; scores are the normalised ones, weight 1."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins.inter_pod_affinity import InterPodAffinityScore
from tests.testing.placement import TEAM_NAMESPACES, KNode, KPod, cluster, scores, selector

CHINA = {"region": "China"}
INDIA = {"region": "India"}
AZ1 = {"az": "az1"}
AZ2 = {"az": "az2"}
CHINA_AZ1 = {"region": "China", "az": "az1"}
S1 = {"security": "S1"}
S2 = {"security": "S2"}


def _term(labels: dict[str, Any], key: str, **extra: Any) -> dict[str, Any]:
    return {"labelSelector": labels, "topologyKey": key, **extra}


def _preferred(section: str, *weighted: tuple[int, dict[str, Any]]) -> dict[str, Any]:
    return {
        section: {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "podAffinityTerm": t} for w, t in weighted
            ]
        }
    }


STAY_WITH_S1_IN_REGION = _preferred("podAffinity", (5, _term(selector(("security", "In", ["S1"])), "region")))
STAY_WITH_S2_IN_REGION = _preferred("podAffinity", (6, _term(selector(("security", "In", ["S2"])), "region")))
AFFINITY3 = _preferred(
    "podAffinity",
    (8, _term(selector(("security", "NotIn", ["S1"]), ("security", "In", ["S2"])), "region")),
    (2, _term(selector(("security", "Exists", ()), ("wrongkey", "DoesNotExist", ())), "region")),
)
HARD_AFFINITY = {
    "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            _term(selector(("security", "In", ["S1", "value2"])), "region"),
            _term(selector(("security", "Exists", ()), ("wrongkey", "DoesNotExist", ())), "region"),
        ]
    }
}
AWAY_FROM_S1_IN_AZ = _preferred("podAntiAffinity", (5, _term(selector(("security", "In", ["S1"])), "az")))
AWAY_FROM_S2_IN_AZ = _preferred("podAntiAffinity", (5, _term(selector(("security", "In", ["S2"])), "az")))
STAY_WITH_S1_IN_REGION_AWAY_FROM_S2_IN_AZ = {
    **_preferred("podAffinity", (8, _term(selector(("security", "In", ["S1"])), "region"))),
    **_preferred("podAntiAffinity", (5, _term(selector(("security", "In", ["S2"])), "az"))),
}
_NS_TERM = _term(
    selector(("security", "In", ["S1"])),
    "region",
    namespaces=["subteam2.team2"],
    namespaceSelector=selector(("team", "In", ["team1"])),
)
AFFINITY_NAMESPACE_SELECTOR = _preferred("podAffinity", (5, _NS_TERM))
ANTI_AFFINITY_NAMESPACE_SELECTOR = _preferred("podAntiAffinity", (5, _NS_TERM))


def _pod(labels: dict[str, str] | None = None, affinity: dict[str, Any] | None = None, ns: str = "") -> KPod:
    pod = KPod(namespace=ns).labels(labels or {})
    if affinity is not None:
        pod.obj["spec"]["affinity"] = affinity
    return pod


def _on(
    node: str, labels: dict[str, str] | None = None, affinity: dict[str, Any] | None = None, ns: str = ""
) -> KPod:
    return _pod(labels, affinity, ns).node(node)


def _nodes(*specs: dict[str, str]) -> list[KNode]:
    return [KNode(f"node{i + 1}").labels(labels) for i, labels in enumerate(specs)]


@dataclass
class Case:
    name: str
    pod: KPod
    nodes: list[KNode]
    expected: list[int]
    pods: list[KPod] = field(default_factory=list)


PREFERRED = [
    Case("all nodes are same priority as Affinity is nil", _pod(S1), _nodes(CHINA, INDIA, AZ1), [0, 0, 0]),
    Case(
        "Affinity: pod that matches topology key & pods in nodes will get high score comparing to "
        "otherswhich "
        "doesn't match either pods in nodes or in topology key",
        _pod(S1, STAY_WITH_S1_IN_REGION),
        _nodes(CHINA, INDIA, AZ1),
        [100, 0, 0],
        [_on("node1", S1), _on("node2", S2), _on("node3", S1)],
    ),
    Case(
        "All the nodes that have the same topology key & label value with one of them has an existing pod "
        "that "
        "match the affinity rules, have the same score",
        _pod(None, STAY_WITH_S1_IN_REGION),
        _nodes(CHINA, CHINA_AZ1, INDIA),
        [100, 100, 0],
        [_on("node1", S1)],
    ),
    Case(
        "Affinity: nodes in one region has more matching pods comparing to other region, so the region which "
        "has "
        "more matches will get high score",
        _pod(S1, STAY_WITH_S2_IN_REGION),
        _nodes(CHINA, INDIA, CHINA, CHINA, INDIA),
        [100, 0, 100, 100, 0],
        [_on(n, S2) for n in ("node1", "node1", "node2", "node3", "node4", "node5")],
    ),
    Case(
        "Affinity: different Label operators and values for pod affinity scheduling preference, including "
        "some "
        "match failures ",
        _pod(S1, AFFINITY3),
        _nodes(CHINA, INDIA, AZ1),
        [20, 100, 0],
        [_on("node1", S1), _on("node2", S2), _on("node3", S1)],
    ),
    Case(
        "Affinity symmetry: considered only the preferredDuringSchedulingIgnoredDuringExecution in pod "
        "affinity "
        "symmetry",
        _pod(S2),
        _nodes(CHINA, INDIA, AZ1),
        [0, 100, 0],
        [_on("node1", S1, STAY_WITH_S1_IN_REGION), _on("node2", S2, STAY_WITH_S2_IN_REGION)],
    ),
    Case(
        "Affinity symmetry with namespace selector",
        _pod(S1, ns="subteam1.team1"),
        _nodes(CHINA, INDIA, AZ1),
        [100, 0, 0],
        [_on("node1", S1, AFFINITY_NAMESPACE_SELECTOR), _on("node2", S2, STAY_WITH_S2_IN_REGION)],
    ),
    Case(
        "AntiAffinity symmetry with namespace selector",
        _pod(S1, ns="subteam1.team1"),
        _nodes(CHINA, INDIA, AZ1),
        [0, 100, 100],
        [_on("node1", S1, ANTI_AFFINITY_NAMESPACE_SELECTOR), _on("node2", S2, STAY_WITH_S2_IN_REGION)],
    ),
    Case(
        "Affinity symmetry: considered RequiredDuringSchedulingIgnoredDuringExecution in pod affinity "
        "symmetry",
        _pod(S1),
        _nodes(CHINA, INDIA, AZ1),
        [100, 100, 0],
        [_on("node1", S1, HARD_AFFINITY), _on("node2", S2, HARD_AFFINITY)],
    ),
    Case(
        "Anti Affinity: pod that does not match existing pods in node will get high score ",
        _pod(S1, AWAY_FROM_S1_IN_AZ),
        _nodes(AZ1, CHINA),
        [0, 100],
        [_on("node1", S1), _on("node2", S2)],
    ),
    Case(
        "Anti Affinity: pod that does not match topology key & match the pods in nodes will get higher score "
        "comparing to others ",
        _pod(S1, AWAY_FROM_S1_IN_AZ),
        _nodes(AZ1, CHINA),
        [0, 100],
        [_on("node1", S1), _on("node2", S1)],
    ),
    Case(
        "Anti Affinity: one node has more matching pods comparing to other node, so the node which has more "
        "unmatches will get high score",
        _pod(S1, AWAY_FROM_S1_IN_AZ),
        _nodes(AZ1, INDIA),
        [0, 100],
        [_on("node1", S1), _on("node1", S1), _on("node2", S2)],
    ),
    Case(
        "Anti Affinity symmetry: the existing pods in node which has anti affinity match will get high score",
        _pod(S2),
        _nodes(AZ1, AZ2),
        [0, 100],
        [_on("node1", S1, AWAY_FROM_S2_IN_AZ), _on("node2", S2, AWAY_FROM_S1_IN_AZ)],
    ),
    Case(
        "Affinity and Anti Affinity: considered only preferredDuringSchedulingIgnoredDuringExecution in both "
        "pod "
        "affinity & anti affinity",
        _pod(S1, STAY_WITH_S1_IN_REGION_AWAY_FROM_S2_IN_AZ),
        _nodes(CHINA, AZ1),
        [100, 0],
        [_on("node1", S1), _on("node2", S1)],
    ),
    Case(
        "Affinity and Anti Affinity: considering both affinity and anti-affinity, the pod to schedule and "
        "existing pods have the same labels",
        _pod(S1, STAY_WITH_S1_IN_REGION_AWAY_FROM_S2_IN_AZ),
        _nodes(CHINA_AZ1, INDIA, CHINA, CHINA, INDIA),
        [100, 0, 100, 100, 0],
        [_on(n, S1) for n in ("node1", "node1", "node2", "node3", "node3", "node4", "node5")],
    ),
    Case(
        "Affinity and Anti Affinity and symmetry: considered only "
        "preferredDuringSchedulingIgnoredDuringExecution "
        "in both pod affinity & anti affinity & symmetry",
        _pod(S1, STAY_WITH_S1_IN_REGION_AWAY_FROM_S2_IN_AZ),
        _nodes(CHINA, AZ1, INDIA, AZ2),
        [100, 0, 100, 0],
        [
            _on("node1", S1),
            _on("node2", S2),
            _on("node3", None, STAY_WITH_S1_IN_REGION_AWAY_FROM_S2_IN_AZ),
            _on("node4", None, AWAY_FROM_S1_IN_AZ),
        ],
    ),
    Case(
        "Avoid panic when partial nodes in a topology don't have pods with affinity",
        _pod(S1),
        _nodes(CHINA, CHINA),
        [0, 0],
        [_on("node1", S1), _on("node2", None, STAY_WITH_S1_IN_REGION_AWAY_FROM_S2_IN_AZ)],
    ),
    Case(
        "Affinity with pods matching NamespaceSelector",
        _pod(S1, AFFINITY_NAMESPACE_SELECTOR, "subteam1.team1"),
        _nodes(CHINA, INDIA),
        [100, 0],
        [
            _on("node1", S1, ns="subteam1.team1"),
            _on("node1", S1, ns="subteam1.team1"),
            _on("node1", S1, ns="subteam1.team2"),
            _on("node2", S1, ns="subteam2.team1"),
        ],
    ),
    Case(
        "Affinity with pods matching both NamespaceSelector and Namespaces fields",
        _pod(S1, AFFINITY_NAMESPACE_SELECTOR, "subteam1.team1"),
        _nodes(CHINA, INDIA),
        [100, 0],
        [
            _on("node1", S1, ns="subteam1.team1"),
            _on("node1", S1, ns="subteam1.team1"),
            _on("node1", S1, ns="subteam2.team2"),
            _on("node2", S1, ns="subteam2.team1"),
        ],
    ),
    Case(
        "Affinity with pods matching NamespaceSelector (anti-affinity)",
        _pod(S1, ANTI_AFFINITY_NAMESPACE_SELECTOR, "subteam1.team1"),
        _nodes(CHINA, INDIA),
        [0, 100],
        [
            _on("node1", S1, ns="subteam1.team1"),
            _on("node1", S1, ns="subteam1.team1"),
            _on("node1", S1, ns="subteam1.team2"),
            _on("node2", S1, ns="subteam2.team1"),
        ],
    ),
    Case(
        "Affinity with pods matching both NamespaceSelector and Namespaces fields (anti-affinity)",
        _pod(S1, ANTI_AFFINITY_NAMESPACE_SELECTOR, "subteam1.team1"),
        _nodes(CHINA, INDIA),
        [0, 100],
        [
            _on("node1", S1, ns="subteam1.team1"),
            _on("node1", S1, ns="subteam1.team1"),
            _on("node1", S1, ns="subteam2.team2"),
            _on("node2", S1, ns="subteam2.team1"),
        ],
    ),
    Case(
        "Do not ignore preferred terms of existing pods",
        _pod(S2),
        _nodes(CHINA, INDIA),
        [0, 100],
        [
            _on("node1", S1, STAY_WITH_S1_IN_REGION_AWAY_FROM_S2_IN_AZ),
            _on("node2", S2, STAY_WITH_S2_IN_REGION),
        ],
    ),
    Case("No nodes to score", _pod(S2), [], []),
]


def _names(nodes: list[KNode]) -> list[str]:
    return [n.obj["metadata"]["name"] for n in nodes]


@pytest.mark.parametrize("case", PREFERRED, ids=[c.name for c in PREFERRED])
def test_preferred_affinity(case: Case) -> None:
    """scoring_test.go TestPreferredAffinity (hardPodAffinityWeight 1; the upstream two rows named
    "Affinity with pods matching ..." twice, for affinity then anti-affinity, carry the suffix here)."""
    scheduler = cluster(case.nodes, case.pods, TEAM_NAMESPACES)
    got = scores(scheduler, InterPodAffinityScore, case.pod)
    assert got == dict(zip(_names(case.nodes), case.expected, strict=True))


def test_invalid_preferred_terms_are_reported_and_not_scored() -> None:
    """scoring_test.go TestPreferredAffinity "invalid Affinity fails PreScore" / "invalid AntiAffinity
    fails PreScore": upstream fails the attempt with an Error status. gpuq's PreFilter refuses such a pod
    (the InterPodAffinity filter parses every term), so the scorer meets one only with
    ``predicate.PodAffinityEnable: false``: it then records a Warning naming the field and scores
    nothing for the pod, rather than stop the cycle."""
    for section, key in (("podAffinity", "region"), ("podAntiAffinity", "az")):
        bad = _preferred(section, (8, _term(selector(("security", "In", ["{{.bad-value.}}"])), key)))
        scheduler = cluster(_nodes(CHINA, CHINA), [], TEAM_NAMESPACES)
        assert scores(scheduler, InterPodAffinityScore, _pod(None, bad).name("bad")) == {
            "node1": 0,
            "node2": 0,
        }
        backend = scheduler.backend
        assert isinstance(backend, MemoryBackend)
        warnings = [e for e in backend.events if e.obj == "Pod/default/bad" and e.type == "Warning"]
        assert len(warnings) == 1
        assert f"spec.affinity.{section}" in warnings[0].message
        assert "'{{.bad-value.}}'" in warnings[0].message


HARD_POD_AFFINITY = {
    "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            _term(
                selector(("service", "In", ["S1"])),
                "region",
                namespaces=["default", "subteam2.team2"],
                namespaceSelector=selector(("team", "In", ["team1"])),
            )
        ]
    }
}


@pytest.mark.parametrize(
    ("name", "namespace", "weight", "expected"),
    [
        ("with default weight", "", 1, [100, 100, 0]),
        ("with zero weight", "", 0, [0, 0, 0]),
        ("with no matching namespace", "subteam1.team2", 1, [0, 0, 0]),
        ("with matching NamespaceSelector", "subteam1.team1", 1, [100, 100, 0]),
        ("with matching Namespaces", "subteam2.team2", 1, [100, 100, 0]),
    ],
)
def test_preferred_affinity_with_hard_pod_affinity_symmetric_weight(
    name: str, namespace: str, weight: int, expected: list[int]
) -> None:
    """scoring_test.go TestPreferredAffinityWithHardPodAffinitySymmetricWeight: existing pods' required
    affinity to service=S1 scores the incoming S1 pod by ``podaffinity.hardPodAffinityWeight`` (kube's
    ``""`` namespace is gpuq's ``default``)."""
    nodes = _nodes(CHINA, INDIA, AZ1)
    pods = [_on("node1", None, HARD_POD_AFFINITY), _on("node2", None, HARD_POD_AFFINITY)]
    scheduler = cluster(nodes, pods, TEAM_NAMESPACES, nodeorder={"podaffinity.hardPodAffinityWeight": weight})
    got = scores(scheduler, InterPodAffinityScore, _pod({"service": "S1"}, ns=namespace))
    assert got == dict(zip(_names(nodes), expected, strict=True)), name
