"""The pure placement rules (common/model/placement/pod_affinity.py, topology_spread.py): term parsing
and its errors, the apiserver's matchLabelKeys merge, the system default selector (kube-scheduler's
``plugins/helper/spread_test.go`` TestDefaultSelector ported), the skew and score formulas, no mocks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.placement import pod_affinity, topology_spread
from gpuq_k8s.common.model.placement.label_selector import NOTHING, parse_selector

REQ = pod_affinity.REQUIRED


def _term(**fields: Any) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone", **fields}


# -- pod affinity terms ---------------------------------------------------------------------------------


def test_a_term_without_namespaces_selects_the_pods_own_namespace() -> None:
    """kube's getNamespacesFromPodAffinityTerm: no namespaces and no namespaceSelector: the pod's own;
    a namespaceSelector {} selects every namespace, a null one none besides the listed ones."""
    own = pod_affinity.parse_term(_term(), "team-a", "Pod/team-a/p", "t")
    assert own.namespaces == {"team-a"} and own.namespace_selector == NOTHING
    assert own.matches("team-a", {"app": "web"}, {}) and not own.matches("team-b", {"app": "web"}, {})
    every = pod_affinity.parse_term(_term(namespaceSelector={}), "team-a", "Pod/team-a/p", "t")
    assert every.namespaces == frozenset() and every.any_namespace
    assert every.matches("elsewhere", {"app": "web"}, {})
    listed = pod_affinity.parse_term(_term(namespaces=["x"]), "team-a", "Pod/team-a/p", "t")
    assert listed.namespaces == {"x"}


def test_a_namespace_selector_resolves_into_names_for_the_incoming_pod() -> None:
    """mergeAffinityTermNamespacesIfNotEmpty: the selector is replaced by the names it selects now."""
    term = pod_affinity.parse_term(
        _term(namespaces=["listed"], namespaceSelector={"matchLabels": {"team": "a"}}),
        "own",
        "Pod/own/p",
        "t",
    )
    assert term.matches("team-a-1", {"app": "web"}, {"team": "a"})  # an existing pod's term
    resolved = term.resolved(lambda selector: frozenset({"team-a-1", "team-a-2"}))
    assert (
        resolved.namespaces == {"listed", "team-a-1", "team-a-2"} and resolved.namespace_selector == NOTHING
    )
    assert resolved.matches_resolved("team-a-2", {"app": "web"})
    assert not resolved.matches_resolved("team-b", {"app": "web"})


@pytest.mark.parametrize(
    ("affinity", "field", "expected"),
    [
        ({"podAffinity": {REQ: [{"labelSelector": {}}]}}, f"podAffinity.{REQ}[0].topologyKey", "non-empty"),
        ({"podAffinity": {REQ: [_term(namespaces="a")]}}, f"{REQ}[0].namespaces", "a list"),
        ({"podAffinity": {REQ: [_term(topologykey="z")]}}, f"{REQ}[0].topologykey", "one of"),
        ({"podAntiAffinity": {"required": []}}, "podAntiAffinity.required", REQ),
        (
            {"podAffinity": {pod_affinity.PREFERRED: [{"weight": 0, "podAffinityTerm": _term()}]}},
            "[0].weight",
            "from 1 to 100",
        ),
        ({"podAffinity": []}, "spec.affinity.podAffinity", "a mapping"),
    ],
)
def test_malformed_terms_are_refused_naming_the_pod_and_field(
    affinity: Any, field: str, expected: str
) -> None:
    with pytest.raises(InvalidValue) as err:
        pod_affinity.parse_pod_affinity("ns", affinity, "Pod/ns/p")
    assert err.value.where == "Pod/ns/p"
    assert field in err.value.field and expected in err.value.expected


def test_match_label_keys_are_merged_as_the_apiserver_does() -> None:
    """kube-apiserver's applyMatchLabelKeysAndMismatchLabelKeys: key In (value) / key NotIn (value) for
    each key the pod's labels hold; a key the pod lacks and a null selector are left alone."""
    affinity = {
        "podAntiAffinity": {
            REQ: [_term(matchLabelKeys=["rev", "absent"], mismatchLabelKeys=["tenant"])],
            pod_affinity.PREFERRED: [
                {"weight": 5, "podAffinityTerm": {"topologyKey": "z", "matchLabelKeys": ["rev"]}}
            ],
        }
    }
    merged = pod_affinity.apply_label_keys(affinity, {"app": "web", "rev": "7", "tenant": "t1"})
    term = merged["podAntiAffinity"][REQ][0]
    assert term["labelSelector"]["matchExpressions"] == [
        {"key": "rev", "operator": "In", "values": ["7"]},
        {"key": "tenant", "operator": "NotIn", "values": ["t1"]},
    ]
    assert "labelSelector" not in merged["podAntiAffinity"][pod_affinity.PREFERRED][0]["podAffinityTerm"]
    parsed = pod_affinity.parse_pod_affinity("ns", merged, "Pod/ns/p")
    selector = parsed.anti_required[0].selector
    assert selector.matches({"app": "web", "rev": "7", "tenant": "t2"})
    assert not selector.matches({"app": "web", "rev": "8", "tenant": "t2"})
    assert not selector.matches({"app": "web", "rev": "7", "tenant": "t1"})
    assert affinity["podAntiAffinity"][REQ][0]["labelSelector"] == {
        "matchLabels": {"app": "web"}
    }  # not mutated


def test_required_affinity_first_pod_rule() -> None:
    """satisfyPodAffinity: with no matching pod anywhere, a pod matching its own terms may go to any
    node that has every key; otherwise only to domains holding a matching pod."""
    has = np.array([True, True, False])
    everywhere = np.array([False, False, False])
    assert pod_affinity.required_affinity_passes(has, everywhere, False, True).tolist() == [True, True, False]
    assert pod_affinity.required_affinity_passes(has, everywhere, False, False).tolist() == [False] * 3
    assert pod_affinity.required_affinity_passes(has, np.array([True, False, True]), True, True).tolist() == [
        True,
        False,
        False,
    ]


def test_affinity_scores_normalise_between_min_and_max() -> None:
    raw = np.array([-5, 0, 10, 99], dtype=np.int64)
    candidates = np.array([True, True, True, False])
    assert pod_affinity.normalize_scores(raw, candidates).tolist() == [0, 33, 100, 0]
    assert pod_affinity.normalize_scores(np.array([3, 3]), np.array([True, True])).tolist() == [0, 0]


# -- topology spread --------------------------------------------------------------------------------------


def _constraint(**fields: Any) -> dict[str, Any]:
    return {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", **fields}


def test_spread_defaults_and_match_label_keys() -> None:
    """minDomains 1, nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore; matchLabelKeys AND key=value."""
    (parsed,) = topology_spread.parse_constraints(
        [_constraint(labelSelector={"matchLabels": {"app": "web"}}, matchLabelKeys=["rev", "absent"])],
        {"app": "web", "rev": "3"},
        "Pod/ns/p",
    )
    assert (parsed.min_domains, parsed.node_affinity_policy, parsed.node_taints_policy) == (
        1,
        "Honor",
        "Ignore",
    )
    assert str(parsed.selector) == "app=web,rev=3"


@pytest.mark.parametrize(
    ("raw", "field", "expected"),
    [
        ([_constraint(maxSkew=0)], "[0].maxSkew", "at least 1"),
        ([_constraint(whenUnsatisfiable="Never")], "[0].whenUnsatisfiable", "one of DoNotSchedule"),
        ([_constraint(nodeTaintsPolicy="honor")], "[0].nodeTaintsPolicy", "one of Honor, Ignore"),
        ([_constraint(topologyKey="")], "[0].topologyKey", "non-empty"),
        ([_constraint(), _constraint()], "[1].topologyKey", "one constraint per topologyKey"),
        ([_constraint(whenUnsatisfiable="ScheduleAnyway", minDomains=2)], "[0].minDomains", "unset with"),
        ([_constraint(matchLabelKeys=["a"])], "[0].matchLabelKeys", "unset when labelSelector"),
    ],
)
def test_malformed_constraints_are_refused_at_admission(raw: Any, field: str, expected: str) -> None:
    with pytest.raises(InvalidValue) as err:
        topology_spread.parse_constraints(raw, {}, "Pod/ns/p", admission=True)
    assert err.value.where == "Pod/ns/p"
    assert field in err.value.field and expected in err.value.expected


def test_the_apiservers_spread_merge() -> None:
    raw = [_constraint(labelSelector={"matchLabels": {"app": "web"}}, matchLabelKeys=["rev"])]
    (merged,) = topology_spread.apply_label_keys(raw, {"rev": "9"})
    assert merged["labelSelector"]["matchExpressions"] == [{"key": "rev", "operator": "In", "values": ["9"]}]


POD_LABELS = {"podLabelKey": "podLabelVal"}
SERVICE = {"podLabelKey": "podLabelVal"}


@pytest.mark.parametrize(
    ("name", "services", "owner", "owner_selector", "expected"),
    [
        ("DefaultSelector for default case", [], None, None, ""),
        ("DefaultSelector for no OwnerReference pod case", [SERVICE], None, None, "podLabelKey=podLabelVal"),
        (
            "DefaultSelector for ReplicaSet OwnerReference pod case",
            [SERVICE],
            topology_spread.REPLICA_SET,
            {"matchLabels": {"replicaSetLabelKey": "replicaSetLabelVal"}},
            "podLabelKey=podLabelVal,replicaSetLabelKey=replicaSetLabelVal",
        ),
        (
            "DefaultSelector for ReplicationController OwnerReference pod case",
            [SERVICE],
            topology_spread.REPLICATION_CONTROLLER,
            {"replicationLabelKey": "replicationLabelVal"},
            "podLabelKey=podLabelVal,replicationLabelKey=replicationLabelVal",
        ),
        (
            "DefaultSelector for StatefulSet OwnerReference pod case",
            [SERVICE],
            topology_spread.STATEFUL_SET,
            {"matchLabels": {"statefulSetLabelKey": "statefulSetLabelVal"}},
            "podLabelKey=podLabelVal,statefulSetLabelKey=statefulSetLabelVal",
        ),
        # not upstream: a Service that selects other pods, and one without a selector, add nothing
        ("a Service selecting other pods", [{"app": "other"}, None], None, None, ""),
    ],
)
def test_default_selector(
    name: str, services: list[Any], owner: Any, owner_selector: Any, expected: str
) -> None:
    """helper/spread_test.go TestDefaultSelector."""
    got = topology_spread.default_selector(POD_LABELS, services, owner, owner_selector)
    assert str(got) == expected, name


def test_controller_of_takes_the_controller_reference() -> None:
    refs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "x"},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "controller": True},
    ]
    owner = topology_spread.controller_of(refs)
    assert owner is not None and (owner.api_version, owner.kind, owner.name) == (
        "apps/v1",
        "ReplicaSet",
        "web-1",
    )
    assert topology_spread.controller_of(refs[:1]) is None


def test_skew_and_minimum() -> None:
    """matchNum + selfMatch - globalMinimum <= maxSkew; the minimum is 0 below minDomains domains."""
    counts = np.array([2, 1, 0, 3], dtype=np.int64)
    assert topology_spread.global_minimum(counts, 1) == 0
    assert topology_spread.global_minimum(np.array([2, 2, 1]), 4) == 0
    assert topology_spread.global_minimum(np.array([2, 2, 1]), 3) == 1
    assert topology_spread.skew_passes(counts, True, 0, 1).tolist() == [False, False, True, False]
    assert topology_spread.skew_passes(counts, False, 0, 1).tolist() == [False, True, True, False]


def test_spread_scores_as_kube_computes_them() -> None:
    """scoreForCount, math.Round, NormalizeScore: counts 2/1/0/3 on hostname, 4 candidate domains
    (weight log 6): 2*1.79 = 3.58 -> 4, 1.79 -> 2, 0, 5.38 -> 5; normalised 100*(5+0-s)//5."""
    weight = topology_spread.topology_normalizing_weight(4)
    raw = topology_spread.round_scores(topology_spread.constraint_scores(np.array([2, 1, 0, 3]), 1, weight))
    assert raw.tolist() == [4, 2, 0, 5]
    candidates = np.ones(4, dtype=np.bool_)
    assert topology_spread.normalize_scores(raw, candidates, ~candidates).tolist() == [20, 60, 100, 0]
    ignored = np.array([False, False, False, True])
    assert topology_spread.normalize_scores(raw, candidates, ignored).tolist() == [0, 50, 100, 0]


def test_a_null_spread_selector_stays_null_through_match_label_keys() -> None:
    (parsed,) = topology_spread.parse_constraints(
        [_constraint(matchLabelKeys=["rev"])], {"rev": "1"}, "Pod/ns/p"
    )
    assert parsed.selector == parse_selector(None, "s")
