"""nodeorder (common/model/nodeorder.py, scheduler/plugins/nodeorder.py): kube-scheduler 1.36's
scorers against hand-computed values, Volcano's weight arguments, and the cases of Volcano's
``pkg/scheduler/plugins/nodeorder/nodeorder_test.go`` TestNodeOrderPlugin through ``gpuq simulate``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuq_k8s.common.model import nodeorder
from gpuq_k8s.common.model.errors import ConfigError
from tests.testing.builders import MakeNode, MakePod, MakePodGroup, MakeQueue
from tests.testing.config import config_text
from tests.testing.volcano_scenarios import pod, simulate_scenario, volcano_node, volcano_pod

GI = 2**30
I64 = np.int64

# -- the scorers by hand ------------------------------------------------------------------------------


def _a(*values: int) -> np.ndarray:
    return np.array(values, dtype=I64)


def test_least_and_most_requested_by_hand() -> None:
    """A 1-cpu, 1G pod on 2 cpu / 4Gi and 4 cpu / 8Gi empty nodes.

    least: cpu (2000-1000)*100//2000 = 50, memory (4Gi-1e9)*100//4Gi = 76, (50*50 + 76*50)//100 = 63;
    cpu 75, memory 88 -> 81. most: 50 and 1e9*100//4Gi = 23 -> 36; 25 and 11 -> 18."""
    allocatable = (_a(2000, 4000), _a(4 * GI, 8 * GI))
    used = (_a(0, 0), _a(0, 0))
    pod_request = (1000, 10**9)
    assert nodeorder.fit_scores(allocatable, used, pod_request, most=False).tolist() == [63, 81]
    assert nodeorder.fit_scores(allocatable, used, pod_request, most=True).tolist() == [36, 18]


def test_requested_over_allocatable() -> None:
    """least: a resource asked beyond the node's scores 0; most: capped at 100."""
    allocatable = (_a(1000), _a(GI))
    used = (_a(900), _a(0))
    assert nodeorder.fit_scores(allocatable, used, (200, GI // 2), most=False).tolist() == [25]  # (0+50)//2
    assert nodeorder.fit_scores(allocatable, used, (200, GI // 2), most=True).tolist() == [75]  # (100+50)//2


def test_pod_without_requests_counts_kube_defaults() -> None:
    """NonZeroRequested: no cpu request counts 100m, no memory request 200Mi."""
    assert nodeorder.pod_nonzero({}) == (100, 200 * 2**20)
    assert nodeorder.pod_nonzero({"cpu": 500, "memory": GI}) == (500, GI)


def test_balanced_allocation_by_hand() -> None:
    """1 cpu / 1Gi on 2 cpu / 2Gi: fractions 0.5, 0.5 -> 100 with the pod, 100 without:
    50 + (50 + 100 - 100) // 2 = 75. On 4 cpu / 2Gi: 0.25, 0.5 -> std 0.125 -> 87; without 100:
    50 + (50 + 87 - 100) / 2 = 50 + 18 = 68."""
    scores = nodeorder.balanced_scores([_a(2000, 4000), _a(2 * GI, 2 * GI)], [_a(0, 0), _a(0, 0)], [1000, GI])
    assert scores.tolist() == [75, 68]


def test_balanced_allocation_three_resources_and_truncation_toward_zero() -> None:
    """cpu 1/1, memory 0/1, gpu 1/1 with the pod: mean 2/3, std sqrt((1/9+4/9+1/9)/3) = 0.4714 ->
    int(52.86) = 52; without the pod (all 0) 100: 50 + (50 + 52 - 100) / 2 = 51. A node where the pod
    unbalances more than 50 points: cpu 1/1, memory 0 -> 50 vs 100: 50 + (50+50-100)/2 = 50."""
    scores = nodeorder.balanced_scores(
        [_a(1000, 1000), _a(GI, GI), _a(1000, 0)], [_a(0, 0), _a(0, 0), _a(0, 0)], [1000, 0, 1000]
    )
    assert scores.tolist() == [51, 50]
    # Go truncates -25 / 2 to -12 (Python would floor to -13): with 20 vs 95, 50 + (50+20-95)/2 = 38.
    fractions = [np.array([0.9]), np.array([0.3])]
    assert nodeorder._balance(fractions, [np.array([True]), np.array([True])]).tolist() == [70]


def test_normalize_and_reverse() -> None:
    """DefaultNormalizeScore over the candidates: 100 * s // max; reversed 100 - that; all 0 -> 0 or 100."""
    scores = _a(3, 1, 0, 9)
    candidates = np.array([True, True, True, False])
    assert nodeorder.normalize(scores, candidates, reverse=False).tolist() == [100, 33, 0, 0]
    assert nodeorder.normalize(scores, candidates, reverse=True).tolist() == [0, 67, 100, 0]
    zeros = _a(0, 0)
    both = np.array([True, True])
    assert nodeorder.normalize(zeros, both, reverse=True).tolist() == [100, 100]
    assert nodeorder.normalize(zeros, both, reverse=False).tolist() == [0, 0]


# -- arguments ----------------------------------------------------------------------------------------


def test_defaults_are_volcanos() -> None:
    """calculateWeight's defaults for the scorers gpuq computes: least 1, most 0, nodeaffinity 2,
    balanced 1, tainttoleration 3, imagelocality 1."""
    args = nodeorder.NodeOrderArgs.parse({})
    assert (args.least_requested, args.most_requested, args.node_affinity) == (1, 0, 2)
    assert (args.balanced_resource, args.taint_toleration, args.image_locality) == (1, 3, 1)


def test_placement_scorer_defaults_are_volcanos() -> None:
    """calculateWeight: podaffinity 2, podtopologyspread 2; hardPodAffinityWeight is kube-scheduler's 1."""
    args = nodeorder.NodeOrderArgs.parse({})
    assert (args.pod_affinity, args.pod_topology_spread, args.hard_pod_affinity) == (2, 2, 1)
    with pytest.raises(ConfigError) as err:
        nodeorder.NodeOrderArgs.parse({"podaffinity.hardPodAffinityWeight": 101})
    assert err.value.field == "podaffinity.hardPodAffinityWeight"


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"leastrequested.weigth": 1}, "leastrequested.weigth"),
        ({"mostrequested.weight": -1}, "mostrequested.weight"),
    ],
)
def test_invalid_arguments_are_refused_by_name(arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        nodeorder.NodeOrderArgs.parse(arguments)
    assert err.value.field == field


# -- nodeorder_test.go TestNodeOrderPlugin, through gpuq simulate -----------------------------------

WEIGHTS = {
    "leastrequested.weight": 0,
    "mostrequested.weight": 0,
    "balancedresource.weight": 0,
    "nodeaffinity.weight": 0,
    "tainttoleration.weight": 0,
    "podaffinity.weight": 0,
    "podtopologyspread.weight": 0,
    "imagelocality.weight": 0,
}


def _weights(**weights: int) -> dict[str, int]:
    """nodeorder's arguments in the test: every weight given, 0 unless set (``leastrequested_weight=1``
    sets ``leastrequested.weight``)."""
    return {**WEIGHTS, **{k.replace("_", "."): v for k, v in weights.items()}}


# The test's tiers: gang, predicates and nodeorder (its arguments given per test).
TIER = "gang, predicates, nodeorder"
ACTIONS = "enqueue, allocate"


def _objects(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    group = MakePodGroup("pg1", "c1").queue("c1").min_member(0).phase("Inqueue").obj()
    return [MakeQueue("c1").weight(1).obj(), group, *extra]


def _node_scores(out: dict[str, Any], name: str) -> dict[str, float]:
    return {n: v["scores"]["nodeorder"] for n, v in pod(out, name)["nodes"].items()}


def _run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], p1: MakePod, nodes: list[MakeNode], **weights: int
) -> tuple[str, dict[str, float]]:
    """Schedule c1/p1 (of pg1) on ``nodes``: where it went, and nodeorder's score of each node."""
    objects = _objects(p1.group("pg1").obj(), *(n.obj() for n in nodes))
    out = simulate_scenario(
        tmp_path,
        capsys,
        config_text(TIER, actions=ACTIONS, arguments={"nodeorder": _weights(**weights)}),
        objects,
    )
    return pod(out, "p1")["node"], _node_scores(out, "p1")


@pytest.mark.parametrize(
    ("weight", "expected"),
    [
        ("leastrequested_weight", ("n2", {"n1": 63.0, "n2": 81.0})),
        ("mostrequested_weight", ("n1", {"n1": 36.0, "n2": 18.0})),
    ],
    ids=["leastAllocated strategy", "mostAllocated strategy"],
)
def test_nodeorder_test_go_allocated_strategies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], weight: str, expected: tuple[str, dict[str, float]]
) -> None:
    """TestNodeOrderPlugin "leastAllocated strategy" (c1/p1 binds to n2) and "mostAllocated strategy"
    (to n1): a 1-cpu 1G pod, n1 2 cpu / 4Gi, n2 4 cpu / 8Gi."""
    nodes = [volcano_node("n1", "2", "4Gi"), volcano_node("n2", "4", "8Gi")]
    got = _run(tmp_path, capsys, volcano_pod("c1", "p1", "1", "1G"), nodes, **{weight: 1})
    assert got == expected


def test_nodeorder_test_go_balanced_allocation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TestNodeOrderPlugin "balanced allocation prefers balanced node": c1/p1 binds to n1."""
    nodes = [volcano_node("n1", "2", "2Gi"), volcano_node("n2", "4", "2Gi")]
    got = _run(tmp_path, capsys, volcano_pod("c1", "p1", "1", "1Gi"), nodes, balancedresource_weight=10)
    assert got == ("n1", {"n1": 750.0, "n2": 680.0})


def test_nodeorder_test_go_node_affinity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TestNodeOrderPlugin "node affinity prefers labeled node": c1/p1 binds to n1 (zone1)."""
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["zone1"]}]}
    preferred = [{"weight": 100, "preference": term}]
    p1 = volcano_pod("c1", "p1", "1", "1G").spec(
        affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}
    )
    nodes = [
        volcano_node(n, "2", "4Gi").label("zone", zone) for n, zone in (("n1", "zone1"), ("n2", "zone2"))
    ]
    assert _run(tmp_path, capsys, p1, nodes, nodeaffinity_weight=10) == ("n1", {"n1": 1000.0, "n2": 0.0})


@pytest.mark.parametrize(
    ("tolerations", "scores"),
    [
        ([], {"n1": 1000.0, "n2": 0.0}),
        # Not upstream: a pod tolerating key1 has no intolerable taint anywhere, so both score 100.
        ([{"key": "key1", "operator": "Exists", "effect": "PreferNoSchedule"}], {"n1": 1000.0, "n2": 1000.0}),
    ],
    ids=["upstream", "tolerated"],
)
def test_nodeorder_test_go_taint_toleration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tolerations: list[Any], scores: dict[str, float]
) -> None:
    """TestNodeOrderPlugin "taint toleration prefers non-tainted node": c1/p1 binds to n1 (n2 has a
    PreferNoSchedule taint key1=value1)."""
    p1 = volcano_pod("c1", "p1", "1", "1G").spec(tolerations=tolerations)
    nodes = [
        volcano_node("n1", "2", "4Gi"),
        volcano_node("n2", "2", "4Gi").taint("key1", "PreferNoSchedule", "value1"),
    ]
    assert _run(tmp_path, capsys, p1, nodes, tainttoleration_weight=10) == ("n1", scores)


def _member_scores(out: dict[str, Any], name: str, plugin: str) -> dict[str, float]:
    return {n: v["scores"][plugin] for n, v in pod(out, name)["nodes"].items()}


def test_nodeorder_test_go_inter_pod_affinity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TestNodeOrderPlugin "inter-pod affinity prefers node with matching pod" (podaffinity.weight 10):
    c1/p2 prefers (weight 100) the hostname of a service=s1 pod; p1 (s1) runs on n1, p-noise (s2) on n3:
    p2 binds to n1, which scores 100 x 10, the others 0."""
    preferred = [
        {
            "weight": 100,
            "podAffinityTerm": {
                "labelSelector": {"matchLabels": {"service": "s1"}},
                "topologyKey": "kubernetes.io/hostname",
            },
        }
    ]
    nodes = [volcano_node(n, "2", "4Gi").label("kubernetes.io/hostname", n) for n in ("n1", "n2", "n3")]
    objects = _objects(
        volcano_pod("c1", "p1", "1", "1G", "n1").label("service", "s1").group("pg1").obj(),
        volcano_pod("c1", "p-noise", "1", "1G", "n3").label("service", "s2").group("pg1").obj(),
        volcano_pod("c1", "p2", "1", "1G")
        .spec(affinity={"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}})
        .group("pg1")
        .obj(),
        *(n.obj() for n in nodes),
    )
    config = config_text(TIER, actions=ACTIONS, arguments={"nodeorder": _weights(podaffinity_weight=10)})
    out = simulate_scenario(tmp_path, capsys, config, objects)
    assert pod(out, "p2")["node"] == "n1"
    assert _member_scores(out, "p2", "InterPodAffinity") == {"n1": 1000.0, "n2": 0.0, "n3": 0.0}


def test_nodeorder_test_go_pod_topology_spread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TestNodeOrderPlugin "pod topology spread prefers node to reduce skew" (podtopologyspread.weight
    10): app=foo pods p1, p2 on n1 (zone1), p3 on n2 (zone2); p4 spreads ScheduleAnyway by zone (maxSkew
    1): it binds to n3 (zone3). Scores: round(count x log(3 + 2)) = 3, 2, 0, normalised
    100 x (3 + 0 - s) // 3 = 0, 33, 100, times 10."""
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "foo"}},
        }
    ]
    nodes = [
        volcano_node(n, "4", "4Gi").label("zone", z)
        for n, z in (("n1", "zone1"), ("n2", "zone2"), ("n3", "zone3"))
    ]
    objects = _objects(
        *(
            volcano_pod("c1", name, "1", "1G", node).label("app", "foo").group("pg1").obj()
            for name, node in (("p1", "n1"), ("p2", "n1"), ("p3", "n2"))
        ),
        volcano_pod("c1", "p4", "1", "1G")
        .label("app", "foo")
        .spec(topologySpreadConstraints=spread)
        .group("pg1")
        .obj(),
        *(n.obj() for n in nodes),
    )
    config = config_text(
        TIER, actions=ACTIONS, arguments={"nodeorder": _weights(podtopologyspread_weight=10)}
    )
    out = simulate_scenario(tmp_path, capsys, config, objects)
    assert pod(out, "p4")["node"] == "n3"
    assert _member_scores(out, "p4", "PodTopologySpread") == {"n1": 0.0, "n2": 330.0, "n3": 1000.0}


def test_default_weights_score_least_balanced_and_taints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``- name: nodeorder`` without arguments: least 1 + balanced 1 + tainttoleration 3 (no
    preference: nodeaffinity skipped). 2 cpu / 4Gi node, 1 cpu / 1G pod: 63 + balanced + 300."""
    objects = _objects(
        volcano_pod("c1", "p1", "1", "1Gi").group("pg1").obj(), volcano_node("n1", "2", "4Gi").obj()
    )
    config = 'actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: predicates\n  - name: nodeorder\n'
    out = simulate_scenario(tmp_path, capsys, config, objects)
    # least: cpu 50, memory 75 -> 62; balanced: 0.5 vs 0.25 -> std 0.125 -> 87, without 100 -> 68.
    assert _node_scores(out, "p1") == {"n1": 62.0 + 68.0 + 300.0}


def test_nonzero_requests_of_bound_pods_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A bound pod without requests counts 100m and 200Mi on its node for least/most requested."""
    objects = _objects(
        volcano_pod("c1", "p1", "1", "1Gi").group("pg1").obj(),
        volcano_node("n1", "2", "4Gi").obj(),
        MakePod("bare", "c1").node("n1").obj(),  # no requests at all
    )
    out = simulate_scenario(
        tmp_path,
        capsys,
        config_text(TIER, actions=ACTIONS, arguments={"nodeorder": _weights(leastrequested_weight=1)}),
        objects,
    )
    # cpu (2000 - 100 - 1000)*100//2000 = 45; memory (4Gi - 200Mi - 1Gi)*100//4Gi = 70; (45+70)//2 = 57.
    assert _node_scores(out, "p1") == {"n1": 57.0}


def test_few_rows_forms_give_the_same_values() -> None:
    """The row cache mixes the vectorised and the plain-Python forms: they must agree exactly."""
    rng = np.random.default_rng(11)
    rows = 300
    caps = [rng.integers(0, 8000, rows), rng.integers(0, 64 * GI, rows), rng.integers(0, 8, rows) * 1000]
    used = [(c * rng.random(rows) * 1.1).astype(I64) for c in caps]
    caps = [c.astype(I64) for c in caps]
    masked = [c.copy() for c in caps]
    masked[0][::50] = 0  # nodes without cpu: the masked form of every kernel
    for capacities in (caps, masked):
        _same_values(capacities, used, rows)


def _same_values(caps: list[np.ndarray], used: list[np.ndarray], rows: int) -> None:
    for asked in ([500, GI], [0, 2 * GI], [1000, GI, 1000]):
        n = len(asked)
        vectorised = nodeorder.balanced_scores(caps[:n], used[:n], asked).tolist()
        few = [
            nodeorder.balanced_score_one([c[r] for c in caps[:n]], [u[r] for u in used[:n]], asked)
            for r in range(rows)
        ]
        assert few == vectorised
        for most in (False, True):
            fit = nodeorder.fit_scores(
                (caps[0], caps[1]), (used[0], used[1]), (asked[0], asked[1]), most=most
            )
            one = [
                nodeorder.fit_score_one(
                    (caps[0][r], caps[1][r]), (used[0][r], used[1][r]), asked[:2], most=most
                )
                for r in range(rows)
            ]
            assert one == fit.tolist()


def test_malformed_preference_warns_once_and_is_not_scored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A preferred term with an unknown operator (a pod that predates validation): the pod is placed
    by the other scorers, its preference is not scored, and one Warning event names the field."""
    bad = [{"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "Near"}]}}]
    p1 = volcano_pod("c1", "p1", "1", "1G").spec(
        affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": bad}}
    )
    nodes = [volcano_node("n1", "2", "4Gi"), volcano_node("n2", "4", "8Gi")]
    objects = _objects(p1.group("pg1").obj(), *(n.obj() for n in nodes))
    out = simulate_scenario(
        tmp_path,
        capsys,
        config_text(
            TIER,
            actions=ACTIONS,
            arguments={"nodeorder": _weights(leastrequested_weight=1, nodeaffinity_weight=10)},
        ),
        objects,
    )
    assert pod(out, "p1")["node"] == "n2"
    warnings = [e for e in out["events"] if e["object"] == "Pod/c1/p1" and e["reason"] == "InvalidAnnotation"]
    assert len(warnings) == 1
    assert "matchExpressions[0].operator" in warnings[0]["message"]
