"""The pod index (scheduler/cluster/pod_index.py): its counts, brought up to date from its journal of
pod changes, always equal a recount of the cluster's pods, whatever the binds, removals, relabels,
deletion marks and node changes in between; the reverse index of existing pods' terms likewise; a
Namespace's labels and its changes are seen."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.placement.label_selector import parse_selector
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.cluster.pod_index import PodIndex, PodMatcher, TermKind
from gpuq_k8s.scheduler.cluster.state import ClusterState

NODES = [f"n{i}" for i in range(6)]
APPS = ("web", "db", "cache")
MATCHERS = (
    PodMatcher(((parse_selector({"matchLabels": {"app": "web"}}, "s"), frozenset({"a"})),)),
    PodMatcher(((parse_selector({"matchLabels": {"app": "web"}}, "s"), None),), live_only=True),
    PodMatcher(((parse_selector({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, "s"), None),)),
    PodMatcher(
        (
            (parse_selector({"matchLabels": {"app": "db"}}, "s"), frozenset({"a", "b"})),
            (
                parse_selector(
                    {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]}, "s"
                ),
                None,
            ),
        )
    ),
)
ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}
        ]
    }
}


def _node(name: str, zone: str = "z1") -> NodeInfo:
    return NodeInfo(name, labels={"kubernetes.io/hostname": name, "zone": zone})


def _pod(
    name: str, namespace: str, node: str, app: str, tier: str, *, deleting: bool = False, anti: bool = False
) -> PodInfo:
    return PodInfo(
        namespace,
        name,
        labels={"app": app, "tier": tier},
        node_name=node,
        phase="Running",
        deleting=deleting,
        affinity=ANTI if anti else {},
    )


def _recount(cluster: ClusterState, matcher: PodMatcher) -> list[int]:
    counts = [0] * cluster.n
    for pod in cluster.pods.values():
        if matcher.matches(pod):
            counts[cluster.pod_row(pod.node_name)] += 1
    return counts


def _anti_rows(cluster: ClusterState) -> dict[frozenset[str], dict[int, int]]:
    """Per distinct term (its pods' namespace: the term's default), the pods carrying it per row."""
    rows: dict[frozenset[str], dict[int, int]] = {}
    for pod in cluster.pods.values():
        if pod.affinity:
            row = cluster.pod_row(pod.node_name)
            of_term = rows.setdefault(frozenset({pod.namespace}), {})
            of_term[row] = of_term.get(row, 0) + 1
    return rows


OPERATION = st.one_of(
    st.tuples(
        st.just("bind"),
        st.integers(0, 19),
        st.sampled_from(("a", "b", "c")),
        st.sampled_from(NODES),
        st.sampled_from(APPS),
        st.sampled_from(("x", "y")),
        st.booleans(),
    ),
    st.tuples(st.just("remove"), st.integers(0, 19)),
    st.tuples(st.just("relabel"), st.integers(0, 19), st.sampled_from(APPS), st.sampled_from(("x", "y"))),
    st.tuples(st.just("deleting"), st.integers(0, 19)),
    st.tuples(st.just("node"), st.sampled_from(NODES), st.sampled_from(("z1", "z2", "gone"))),
    st.tuples(st.just("ask"), st.integers(0, len(MATCHERS) - 1)),
)


@settings(max_examples=60)
@given(st.lists(OPERATION, max_size=60))
def test_counts_equal_a_recount_after_any_changes(operations: list[tuple[Any, ...]]) -> None:
    cluster = ClusterState()
    for name in NODES:
        cluster.set_node(_node(name))
    index = PodIndex(cluster, ObjectStore())
    for op in operations:
        kind = op[0]
        if kind == "bind":
            _, i, namespace, node, app, tier, anti = op
            if node in cluster.row_of:
                cluster.add_pod(_pod(f"p{i}", namespace, node, app, tier, anti=anti))
        elif kind == "remove":
            for namespace in ("a", "b", "c"):
                cluster.remove_pod(f"{namespace}/p{op[1]}")
        elif kind == "relabel":
            for namespace in ("a", "b", "c"):
                pod = cluster.pods.get(f"{namespace}/p{op[1]}")
                if pod is not None:
                    cluster.add_pod(
                        _pod(pod.name, namespace, pod.node_name, op[2], op[3], anti=bool(pod.affinity))
                    )
        elif kind == "deleting":
            for namespace in ("a", "b", "c"):
                pod = cluster.pods.get(f"{namespace}/p{op[1]}")
                if pod is not None:
                    app, tier = pod.labels["app"], pod.labels["tier"]
                    cluster.add_pod(
                        _pod(
                            pod.name,
                            namespace,
                            pod.node_name,
                            app,
                            tier,
                            deleting=True,
                            anti=bool(pod.affinity),
                        )
                    )
        elif kind == "node":
            _, name, zone = op
            if zone == "gone":
                cluster.remove_node(name)
            else:
                cluster.set_node(_node(name, zone))
        else:
            matcher = MATCHERS[op[1]]
            counts, total = index.counts(matcher)
            assert counts.tolist() == _recount(cluster, matcher)
            assert total == sum(counts.tolist())
    for matcher in MATCHERS:
        counts, _ = index.counts(matcher)
        assert counts.tolist() == _recount(cluster, matcher)
    got = {
        entry.term.namespaces: {row: int(c) for row, c in enumerate(entry.rows[: cluster.n]) if c}
        for entry in index.existing_terms(TermKind.REQUIRED_ANTI_AFFINITY)
    }
    assert got == _anti_rows(cluster)
    for entry in index.existing_terms(TermKind.REQUIRED_ANTI_AFFINITY):
        assert entry.total == int(entry.rows.sum())


def test_domain_sums_follow_node_labels() -> None:
    """in_domain sums per row over the rows of the same key value; rows without the key read 0."""
    cluster = ClusterState()
    for name, zone in (("n0", "z1"), ("n1", "z1"), ("n2", "z2")):
        cluster.set_node(_node(name, zone))
    cluster.set_node(NodeInfo("n3", labels={}))
    index = PodIndex(cluster, ObjectStore())
    for i, node in enumerate(("n0", "n0", "n2", "n3")):
        cluster.add_pod(_pod(f"p{i}", "a", node, "web", "x"))
    counts, _ = index.counts(MATCHERS[0])
    at_node, has, positive = index.in_domain(counts, "zone")
    assert at_node.tolist() == [2, 2, 1, 0] and has.tolist() == [True, True, True, False] and positive
    cluster.set_node(_node("n2", "z1"))  # relabelled into z1
    at_node, _, _ = index.in_domain(index.counts(MATCHERS[0])[0], "zone")
    assert at_node.tolist() == [3, 3, 3, 0]
    empty, has, positive = index.in_domain(np.zeros(cluster.n, dtype=np.int64), "rack")
    assert empty.tolist() == [0, 0, 0, 0] and not has.any() and not positive


def _namespace(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def _names(found: Iterable[str]) -> list[str]:
    return sorted(found)


def test_namespace_labels_and_their_changes() -> None:
    objects = ObjectStore()
    objects.put(_namespace("team-a", {"team": "a"}))
    index = PodIndex(ClusterState(), objects)
    team_a = parse_selector({"matchLabels": {"team": "a"}}, "s")
    assert _names(index.namespaces_matching(team_a)) == ["team-a"]
    generation = index.namespace_generation
    objects.put(_namespace("team-b", {"team": "a"}))
    assert index.namespace_generation > generation
    assert _names(index.namespaces_matching(team_a)) == ["team-a", "team-b"]
    objects.put(_namespace("team-a", {"team": "b"}))
    assert _names(index.namespaces_matching(team_a)) == ["team-b"]
    assert index.namespace_labels("team-a") == {"team": "b"}
    objects.delete(kinds.NAMESPACE, "", "team-b")
    assert _names(index.namespaces_matching(team_a)) == []
    assert index.namespace_labels("unknown") == {}


def test_an_existing_pods_unreadable_terms_are_reported_not_indexed() -> None:
    cluster = ClusterState()
    cluster.set_node(_node("n0"))
    index = PodIndex(cluster, ObjectStore())
    bad = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": ""}]}}
    cluster.add_pod(PodInfo("a", "bad", node_name="n0", phase="Running", affinity=bad))
    assert not index.has_existing_terms(TermKind.REQUIRED_ANTI_AFFINITY)
    assert "topologyKey" in index.invalid["a/bad"]
    cluster.remove_pod("a/bad")
    assert index.invalid == {}
