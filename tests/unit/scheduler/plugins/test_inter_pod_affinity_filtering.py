"""InterPodAffinity's PreFilter and Filter (scheduler/plugins/inter_pod_affinity.py over
common/model/placement/pod_affinity.py): kube-scheduler v1.36.4's
``pkg/scheduler/framework/plugins/interpodaffinity/filtering_test.go`` ported case by case, each row
named after its upstream case (``TestRequiredAffinitySingleNode``, ``TestRequiredAffinityMultipleNodes``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuq_k8s.common.model.placement.pod_affinity import (
    AFFINITY_RULES_NOT_MATCH,
    ANTI_AFFINITY_RULES_NOT_MATCH,
    EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
)
from gpuq_k8s.scheduler.plugins.inter_pod_affinity import InterPodAffinity
from tests.testing.placement import (
    PASS,
    REQUIRED,
    SKIP,
    TEAM_NAMESPACES,
    KNode,
    KPod,
    Verdict,
    cluster,
    exists,
    filter_verdicts,
    in_,
    namespace,
    not_in,
    selector,
    unresolvable,
    unschedulable,
)

AFFINITY = unresolvable(AFFINITY_RULES_NOT_MATCH)
ANTI = unschedulable(ANTI_AFFINITY_RULES_NOT_MATCH)
EXISTING = unschedulable(EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH)

SECURITYSCAN = {"service": "securityscan"}
S1 = {"security": "S1"}


def _node1() -> KNode:
    return KNode("node1").labels({"region": "r1", "zone": "z11"})


def _with_terms(
    ns: str, labels: dict[str, str], affinity: list[dict[str, Any]], anti: list[dict[str, Any]]
) -> KPod:
    """kube's ``createPodWithAffinityTerms``."""
    pod = KPod(namespace=ns).labels(labels)
    for term in affinity:
        pod.required("podAffinity", term)
    for term in anti:
        pod.required("podAntiAffinity", term)
    return pod


SERVICE_IN = selector(("service", "In", ["securityscan", "value2"]))
TEAM1 = selector(("team", "In", ["team1"]))


@dataclass
class Single:
    name: str
    pod: KPod
    pods: list[KPod] = field(default_factory=list)
    prefilter: str = "success"
    verdict: Verdict = PASS


# TestRequiredAffinitySingleNode: one node, node1 {region: r1, zone: z11}; the existing pod of most
# rows is {service: securityscan} on node1.
SINGLE = [
    Single(
        "A pod that has no required pod affinity scheduling rules can schedule onto a node with no existing "
        "pods",
        KPod(),
        prefilter=SKIP,
    ),
    Single(
        "satisfies with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using In operator that "
        "matches the existing pod",
        KPod().labels(S1).pod_affinity("region", in_("service", ["securityscan", "value2"]), REQUIRED),
        [KPod().labels(SECURITYSCAN).node("node1")],
    ),
    Single(
        "satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using not in "
        "operator in labelSelector that matches the existing pod",
        KPod().labels(S1).pod_affinity("region", not_in("service", ["securityscan3", "value3"]), REQUIRED),
        [KPod().labels(SECURITYSCAN).node("node1")],
    ),
    Single(
        "Does not satisfy the PodAffinity with labelSelector because of diff Namespace",
        _with_terms(
            "",
            S1,
            [{"labelSelector": SERVICE_IN, "namespaces": ["DiffNameSpace"], "topologyKey": "region"}],
            [],
        ),
        [KPod(namespace="ns").labels(SECURITYSCAN).node("node1")],
        verdict=AFFINITY,
    ),
    Single(
        "Doesn't satisfy the PodAffinity because of unmatching labelSelector with the existing pod",
        # upstream's topology key is "" here, which the apiserver refuses; "region" keeps the case
        # (the selector matches no pod, on a node that has the key).
        KPod()
        .labels(SECURITYSCAN)
        .pod_affinity("region", in_("service", ["antivirusscan", "value2"]), REQUIRED),
        [KPod().labels(SECURITYSCAN).node("node1")],
        verdict=AFFINITY,
    ),
    Single(
        "satisfies the PodAffinity with different label Operators in multiple "
        "RequiredDuringSchedulingIgnoredDuringExecution ",
        _with_terms(
            "",
            S1,
            [
                {
                    "labelSelector": selector(("service", "Exists", ()), ("wrongkey", "DoesNotExist", ())),
                    "topologyKey": "region",
                },
                {
                    "labelSelector": selector(
                        ("service", "In", ["securityscan"]), ("service", "NotIn", ["WrongValue"])
                    ),
                    "topologyKey": "region",
                },
            ],
            [],
        ),
        [KPod().labels(SECURITYSCAN).node("node1")],
    ),
    Single(
        "The labelSelector requirements(items of matchExpressions) are ANDed, the pod cannot schedule onto "
        "the "
        "node because one of the matchExpression item don't match.",
        _with_terms(
            "",
            S1,
            [
                {
                    "labelSelector": selector(("service", "Exists", ()), ("wrongkey", "DoesNotExist", ())),
                    "topologyKey": "region",
                },
                {
                    "labelSelector": selector(
                        ("service", "In", ["securityscan2"]), ("service", "NotIn", ["WrongValue"])
                    ),
                    "topologyKey": "region",
                },
            ],
            [],
        ),
        [KPod().labels(SECURITYSCAN).node("node1")],
        verdict=AFFINITY,
    ),
    Single(
        "satisfies the PodAffinity and PodAntiAffinity with the existing pod",
        KPod()
        .labels(S1)
        .pod_affinity("region", in_("service", ["securityscan", "value2"]), REQUIRED)
        .pod_anti_affinity("node", in_("service", ["antivirusscan", "value2"]), REQUIRED),
        [KPod().labels(SECURITYSCAN).node("node1")],
    ),
    Single(
        "satisfies the PodAffinity and PodAntiAffinity and PodAntiAffinity symmetry with the existing pod",
        KPod()
        .labels(S1)
        .pod_affinity("region", in_("service", ["securityscan", "value2"]), REQUIRED)
        .pod_anti_affinity("node", in_("service", ["antivirusscan", "value2"]), REQUIRED),
        [
            KPod()
            .node("node1")
            .labels(SECURITYSCAN)
            .pod_anti_affinity("node", in_("service", ["antivirusscan", "value2"]), REQUIRED)
        ],
    ),
    Single(
        "satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the existing pod",
        KPod()
        .labels(S1)
        .pod_affinity("region", in_("service", ["securityscan", "value2"]), REQUIRED)
        .pod_anti_affinity("zone", in_("service", ["securityscan", "value2"]), REQUIRED),
        [KPod().labels(SECURITYSCAN).node("node1")],
        verdict=ANTI,
    ),
    Single(
        "satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy PodAntiAffinity symmetry with the "
        "existing pod",
        KPod()
        .labels(SECURITYSCAN)
        .pod_affinity("region", in_("service", ["securityscan", "value2"]), REQUIRED)
        .pod_anti_affinity("node", in_("service", ["antivirusscan", "value2"]), REQUIRED),
        [
            KPod()
            .labels(SECURITYSCAN)
            .node("node1")
            .pod_anti_affinity("zone", in_("service", ["securityscan", "value2"]), REQUIRED)
        ],
        verdict=EXISTING,
    ),
    Single(
        "pod matches its own Label in PodAffinity and that matches the existing pod Labels",
        KPod()
        .labels(SECURITYSCAN)
        .pod_affinity("region", not_in("service", ["securityscan", "value2"]), REQUIRED),
        [KPod().labels(SECURITYSCAN).node("node2")],
        verdict=AFFINITY,
    ),
    Single(
        "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity "
        "constraints. "
        "doesn't satisfy PodAntiAffinity symmetry with the existing pod",
        KPod().labels(SECURITYSCAN),
        [
            KPod()
            .node("node1")
            .labels(SECURITYSCAN)
            .pod_anti_affinity("zone", in_("service", ["securityscan", "value2"]), REQUIRED)
        ],
        verdict=EXISTING,
    ),
    Single(
        "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity "
        "constraints. "
        "satisfy PodAntiAffinity symmetry with the existing pod",
        KPod().labels(SECURITYSCAN),
        [
            KPod()
            .node("node1")
            .labels(SECURITYSCAN)
            .pod_anti_affinity("zone", not_in("service", ["securityscan", "value2"]), REQUIRED)
        ],
        prefilter=SKIP,
    ),
    Single(
        "satisfies the PodAntiAffinity with existing pod but doesn't satisfy PodAntiAffinity symmetry with "
        "incoming pod",
        KPod()
        .labels(SECURITYSCAN)
        .pod_anti_affinity("region", exists("service"), REQUIRED)
        .pod_anti_affinity("region", exists("security"), REQUIRED),
        [KPod().node("node1").labels(S1).pod_anti_affinity("zone", exists("security"), REQUIRED)],
        verdict=ANTI,
    ),
    Single(
        "PodAntiAffinity symmetry check a1: incoming pod and existing pod partially match each other on "
        "AffinityTerms",
        KPod()
        .labels(SECURITYSCAN)
        .pod_anti_affinity("zone", exists("service"), REQUIRED)
        .pod_anti_affinity("zone", exists("security"), REQUIRED),
        [KPod().node("node1").labels(S1).pod_anti_affinity("zone", exists("security"), REQUIRED)],
        verdict=ANTI,
    ),
    Single(
        "PodAntiAffinity symmetry check a2: incoming pod and existing pod partially match each other on "
        "AffinityTerms",
        KPod().labels(S1).pod_anti_affinity("zone", exists("security"), REQUIRED),
        [
            KPod()
            .node("node1")
            .labels(SECURITYSCAN)
            .pod_anti_affinity("zone", exists("service"), REQUIRED)
            .pod_anti_affinity("zone", exists("security"), REQUIRED)
        ],
        verdict=EXISTING,
    ),
    Single(
        "PodAntiAffinity symmetry check b1: incoming pod and existing pod partially match each other on "
        "AffinityTerms",
        KPod()
        .labels({"abc": "", "xyz": ""})
        .pod_anti_affinity("zone", exists("abc"), REQUIRED)
        .pod_anti_affinity("zone", exists("def"), REQUIRED),
        [
            KPod()
            .node("node1")
            .labels({"def": "", "xyz": ""})
            .pod_anti_affinity("zone", exists("abc"), REQUIRED)
            .pod_anti_affinity("zone", exists("def"), REQUIRED)
        ],
        verdict=ANTI,
    ),
    Single(
        "PodAntiAffinity symmetry check b2: incoming pod and existing pod partially match each other on "
        "AffinityTerms",
        KPod()
        .labels({"def": "", "xyz": ""})
        .pod_anti_affinity("zone", exists("abc"), REQUIRED)
        .pod_anti_affinity("zone", exists("def"), REQUIRED),
        [
            KPod()
            .node("node1")
            .labels({"abc": "", "xyz": ""})
            .pod_anti_affinity("zone", exists("abc"), REQUIRED)
            .pod_anti_affinity("zone", exists("def"), REQUIRED)
        ],
        verdict=ANTI,
    ),
    Single(
        "affinity with NamespaceSelector",
        _with_terms(
            "", S1, [{"labelSelector": SERVICE_IN, "namespaceSelector": TEAM1, "topologyKey": "region"}], []
        ),
        [KPod(namespace="subteam1.team1").labels(SECURITYSCAN).node("node1")],
    ),
    Single(
        "affinity with non-matching NamespaceSelector",
        _with_terms(
            "", S1, [{"labelSelector": SERVICE_IN, "namespaceSelector": TEAM1, "topologyKey": "region"}], []
        ),
        [KPod(namespace="subteam1.team2").labels(SECURITYSCAN).node("node1")],
        verdict=AFFINITY,
    ),
    Single(
        "anti-affinity with matching NamespaceSelector",
        _with_terms(
            "subteam1.team1",
            S1,
            [],
            [{"labelSelector": SERVICE_IN, "namespaceSelector": TEAM1, "topologyKey": "zone"}],
        ),
        [KPod(namespace="subteam2.team1").labels(SECURITYSCAN).node("node1")],
        verdict=ANTI,
    ),
    Single(
        "anti-affinity with matching all NamespaceSelector",
        _with_terms(
            "subteam1.team1",
            S1,
            [],
            [{"labelSelector": SERVICE_IN, "namespaceSelector": {}, "topologyKey": "zone"}],
        ),
        [KPod(namespace="subteam2.team1").labels(SECURITYSCAN).node("node1")],
        verdict=ANTI,
    ),
    Single(
        "anti-affinity with non-matching NamespaceSelector",
        _with_terms(
            "subteam1.team1",
            S1,
            [],
            [{"labelSelector": SERVICE_IN, "namespaceSelector": TEAM1, "topologyKey": "zone"}],
        ),
        [KPod(namespace="subteam1.team2").labels(SECURITYSCAN).node("node1")],
    ),
]


@pytest.mark.parametrize("case", SINGLE, ids=[c.name for c in SINGLE])
def test_required_affinity_single_node(case: Single) -> None:
    """filtering_test.go TestRequiredAffinitySingleNode."""
    scheduler = cluster([_node1()], case.pods, TEAM_NAMESPACES)
    prefilter, verdicts = filter_verdicts(scheduler, InterPodAffinity, case.pod)
    assert prefilter == case.prefilter
    assert verdicts == {"node1": case.verdict}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PodAffinity fails PreFilter with an invalid affinity label syntax", "{{.bad-value.}}"),
        ("PodAntiAffinity fails PreFilter with an invalid antiaffinity label syntax", "{{.bad-value.}}"),
    ],
)
def test_invalid_label_syntax_fails_prefilter(name: str, value: str) -> None:
    """TestRequiredAffinitySingleNode's two PreFilter failures: a label value the apiserver would refuse
    is an input error naming the pod, the field and the value (kube: UnschedulableAndUnresolvable,
    ``parsing pod: ...``)."""
    pod = (
        KPod("p")
        .labels(SECURITYSCAN)
        .pod_affinity("region", in_("service", [value]), REQUIRED)
        .pod_affinity("node", in_("service", ["antivirusscan", "value2"]), REQUIRED)
    )
    prefilter, _ = filter_verdicts(cluster([_node1()]), InterPodAffinity, pod)
    assert prefilter.startswith(
        "Pod/default/p: spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuring"
    )
    assert "labelSelector.matchExpressions[0].values: invalid value '{{.bad-value.}}'" in prefilter


# -- TestRequiredAffinityMultipleNodes ------------------------------------------------------------------

CHINA = {"region": "China"}
CHINA_AZ1 = {"region": "China", "az": "az1"}
INDIA = {"region": "India"}


def _nodes(*specs: tuple[str, dict[str, str]]) -> list[KNode]:
    return [KNode(name).labels(labels) for name, labels in specs]


def _abc(zone_b: str = "z1") -> list[KNode]:
    return _nodes(
        ("nodeA", {"region": "r1", "zone": "z1", "hostname": "nodeA"}),
        ("nodeB", {"region": "r1", "zone": zone_b, "hostname": "nodeB"}),
    )


@dataclass
class Multiple:
    name: str
    pod: KPod
    pods: list[KPod]
    nodes: list[KNode]
    verdicts: list[Verdict]
    prefilter: str = "success"


MULTIPLE = [
    Multiple(
        "A pod can be scheduled onto all the nodes that have the same topology key & label value with one of "
        "them has an existing pod that matches the affinity rules",
        KPod().pod_affinity("region", in_("foo", ["bar"]), REQUIRED),
        [KPod("p1").node("node1").labels({"foo": "bar"})],
        _nodes(("node1", CHINA), ("node2", CHINA_AZ1), ("node3", INDIA)),
        [PASS, PASS, AFFINITY],
    ),
    Multiple(
        "The affinity rule is to schedule all of the pods of this collection to the same zone. The first pod "
        "of "
        "the collection should not be blocked from being scheduled onto any node, even there's no existing "
        "pod "
        "that matches the rule anywhere.",
        KPod()
        .labels({"foo": "bar", "service": "securityscan"})
        .pod_affinity("zone", in_("foo", ["bar"]), REQUIRED)
        .pod_affinity("zone", in_("service", ["securityscan"]), REQUIRED),
        [KPod("p1").node("nodeA").labels({"foo": "bar"})],
        _nodes(("nodeA", {"zone": "az1", "hostname": "h1"}), ("nodeB", {"zone": "az2", "hostname": "h2"})),
        [PASS, PASS],
    ),
    Multiple(
        "The first pod of the collection can only be scheduled on nodes labelled with the requested topology "
        "keys",
        KPod()
        .labels({"foo": "bar", "service": "securityscan"})
        .pod_affinity("zone", in_("foo", ["bar"]), REQUIRED)
        .pod_affinity("zone", in_("service", ["securityscan"]), REQUIRED),
        [KPod("p1").node("nodeA").labels({"foo": "bar"})],
        _nodes(
            ("nodeA", {"zoneLabel": "az1", "hostname": "h1"}),
            ("nodeB", {"zoneLabel": "az2", "hostname": "h2"}),
        ),
        [AFFINITY, AFFINITY],
    ),
    Multiple(
        "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the "
        "inter "
        "pod affinity rule. The pod can not be scheduled onto nodeA and nodeB.",
        KPod().pod_anti_affinity("region", in_("foo", ["abc"]), REQUIRED),
        [KPod().node("nodeA").labels({"foo": "abc"})],
        _nodes(
            ("nodeA", {"region": "r1", "hostname": "nodeA"}), ("nodeB", {"region": "r1", "hostname": "nodeB"})
        ),
        [ANTI, ANTI],
    ),
    Multiple(
        "This test ensures that anti-affinity matches a pod when any term of the anti-affinity rule matches "
        "a pod.",
        KPod()
        .pod_anti_affinity("region", in_("foo", ["abc"]), REQUIRED)
        .pod_anti_affinity("zone", in_("service", ["securityscan"]), REQUIRED),
        [KPod().node("nodeA").labels({"foo": "abc", "service": "securityscan"})],
        _nodes(
            ("nodeA", {"region": "r1", "zone": "z1", "hostname": "nodeA"}),
            ("nodeB", {"region": "r1", "zone": "z2", "hostname": "nodeB"}),
        ),
        [ANTI, ANTI],
    ),
    Multiple(
        "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the "
        "inter "
        "pod affinity rule. The pod can not be scheduled onto nodeA and nodeB but can be scheduled onto "
        "nodeC",
        KPod().pod_anti_affinity("region", in_("foo", ["abc"]), REQUIRED),
        [KPod().node("nodeA").labels({"foo": "abc"})],
        _nodes(("nodeA", CHINA), ("nodeB", CHINA_AZ1), ("nodeC", INDIA)),
        [ANTI, ANTI, PASS],
    ),
    Multiple(
        "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the "
        "inter "
        "pod affinity rule. The pod can not be scheduled onto nodeA, nodeB, but can be scheduled onto nodeC "
        "(NodeC has an existing pod that match the inter pod affinity rule but in different namespace)",
        KPod(namespace="NS1")
        .labels({"foo": "123"})
        .pod_anti_affinity("region", in_("foo", ["bar"]), REQUIRED),
        [
            KPod(namespace="NS1").node("nodeA").labels({"foo": "bar"}),
            KPod(namespace="NS2").node("nodeC").pod_anti_affinity("region", in_("foo", ["123"]), REQUIRED),
        ],
        _nodes(("nodeA", CHINA), ("nodeB", CHINA_AZ1), ("nodeC", INDIA)),
        [ANTI, ANTI, PASS],
    ),
    Multiple(
        "Test existing pod's anti-affinity: if an existing pod has a term with invalid topologyKey, "
        "labelSelector "
        "of the term is firstly checked, and then topologyKey of the term is also checked",
        KPod().label("foo", ""),
        [KPod().node("nodeA").pod_anti_affinity("invalid-node-label", exists("foo"), REQUIRED)],
        _abc(),
        [PASS, PASS],
        prefilter=SKIP,
    ),
    Multiple(
        "Test incoming pod's anti-affinity: even if labelSelector matches, we still check if topologyKey "
        "matches",
        KPod().pod_anti_affinity("invalid-node-label", exists("foo"), REQUIRED),
        [KPod().node("nodeA").labels({"foo": ""})],
        _abc(),
        [PASS, PASS],
    ),
    Multiple(
        "Test existing pod's anti-affinity: incoming pod wouldn't considered as a fit as it violates each "
        "existingPod's terms on all nodes",
        KPod().label("foo", "").label("bar", ""),
        [
            KPod().node("nodeA").pod_anti_affinity("zone", exists("foo"), REQUIRED),
            KPod().node("nodeA").pod_anti_affinity("region", exists("bar"), REQUIRED),
        ],
        _abc("z2"),
        [EXISTING, EXISTING],
    ),
    Multiple(
        "Test incoming pod's anti-affinity: incoming pod wouldn't considered as a fit as it at least "
        "violates one "
        "anti-affinity rule of existingPod",
        KPod()
        .pod_anti_affinity("zone", exists("foo"), REQUIRED)
        .pod_anti_affinity("region", exists("bar"), REQUIRED),
        [KPod().node("nodeA").labels({"foo": ""}), KPod().node("nodeB").labels({"bar": ""})],
        _abc("z2"),
        [ANTI, ANTI],
    ),
    Multiple(
        "Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted "
        "as a "
        "single term match - case when one term has invalid topologyKey",
        KPod().label("foo", "").label("bar", ""),
        [
            KPod()
            .node("nodeA")
            .pod_anti_affinity("invalid-node-label", exists("foo"), REQUIRED)
            .pod_anti_affinity("zone", exists("bar"), REQUIRED)
        ],
        _abc("z2"),
        [EXISTING, PASS],
    ),
    Multiple(
        "Test incoming pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted "
        "as a "
        "single term match - case when one term has invalid topologyKey",
        KPod()
        .pod_anti_affinity("invalid-node-label", exists("foo"), REQUIRED)
        .pod_anti_affinity("zone", exists("bar"), REQUIRED),
        [KPod("podA").node("nodeA").labels({"foo": "", "bar": ""})],
        _abc("z2"),
        [ANTI, PASS],
    ),
    Multiple(
        "Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted "
        "as a "
        "single term match - case when all terms have valid topologyKey",
        KPod().label("foo", "").label("bar", ""),
        [
            KPod()
            .node("nodeA")
            .pod_anti_affinity("region", exists("foo"), REQUIRED)
            .pod_anti_affinity("zone", exists("bar"), REQUIRED)
        ],
        _abc("z2"),
        [EXISTING, EXISTING],
    ),
    Multiple(
        "Test incoming pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted "
        "as a "
        "single term match - case when all terms have valid topologyKey",
        KPod()
        .pod_anti_affinity("region", exists("foo"), REQUIRED)
        .pod_anti_affinity("zone", exists("bar"), REQUIRED),
        [KPod().node("nodeA").labels({"foo": "", "bar": ""})],
        _abc("z2"),
        [ANTI, ANTI],
    ),
    Multiple(
        "Test existing pod's anti-affinity: existingPod on nodeA and nodeB has at least one anti-affinity "
        "term "
        "matches incoming pod, so incoming pod can only be scheduled to nodeC",
        KPod().label("foo", "").label("bar", ""),
        [
            KPod()
            .node("nodeA")
            .pod_anti_affinity("zone", exists("foo"), REQUIRED)
            .pod_anti_affinity("zone", exists("labelA"), REQUIRED),
            KPod()
            .node("nodeB")
            .pod_anti_affinity("zone", exists("bar"), REQUIRED)
            .pod_anti_affinity("zone", exists("labelB"), REQUIRED),
        ],
        [*_abc("z2"), KNode("nodeC").labels({"region": "r1", "zone": "z3", "hostname": "nodeC"})],
        [EXISTING, EXISTING, PASS],
    ),
    Multiple(
        "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all "
        "topologyKeys match",
        KPod().pod_affinity("region", exists("foo"), REQUIRED).pod_affinity("zone", exists("bar"), REQUIRED),
        [KPod("pod1").labels({"foo": "", "bar": ""}).node("nodeA")],
        _abc(),
        [PASS, PASS],
    ),
    Multiple(
        "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all "
        "topologyKeys match, and the match logic should be satisfied on the same pod",
        KPod().pod_affinity("region", exists("foo"), REQUIRED).pod_affinity("zone", exists("bar"), REQUIRED),
        [KPod("pod1").node("nodeA").labels({"foo": ""}), KPod("pod2").node("nodeB").labels({"bar": ""})],
        _abc("z2"),
        [AFFINITY, AFFINITY],
    ),
]


@pytest.mark.parametrize("case", MULTIPLE, ids=[c.name for c in MULTIPLE])
def test_required_affinity_multiple_nodes(case: Multiple) -> None:
    """filtering_test.go TestRequiredAffinityMultipleNodes."""
    scheduler = cluster(case.nodes, case.pods, [namespace("NS1", {})])
    prefilter, verdicts = filter_verdicts(scheduler, InterPodAffinity, case.pod)
    assert prefilter == case.prefilter
    assert verdicts == {
        node.obj["metadata"]["name"]: v for node, v in zip(case.nodes, case.verdicts, strict=True)
    }
