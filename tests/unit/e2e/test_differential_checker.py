"""The differential test's checker (tests/e2e/differential/checker.py) catches a bad placement of every
rule kind: each case feeds it a history whose last bind breaks one rule (and the same history with
a placement that keeps it), so the checker's "0 violations" for kube-scheduler and gpuq means
something. Objects are written as the API holds them."""

from __future__ import annotations

import copy
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest

from tests.e2e.differential.checker import Cluster, Unjudgeable, Violation, check, quantity, requests

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
Obj = dict[str, Any]


def node(name: str, zone: str, *, cpu: str = "4", pods: str = "10", **extra: Any) -> Obj:
    allocatable = {
        "cpu": cpu,
        "memory": "8Gi",
        "ephemeral-storage": "10Gi",
        "pods": pods,
        "hugepages-2Mi": "0",
    }
    allocatable.update(extra.pop("allocatable", {}))
    return {
        "metadata": {"name": name, "labels": {HOST: name, ZONE: zone, **extra.pop("labels", {})}},
        "spec": extra.pop("spec", {}),
        "status": {"allocatable": allocatable},
    }


def pod(
    name: str, *, ns: str = "a", cpu: str = "1", labels: dict[str, str] | None = None, **spec: Any
) -> Obj:
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}], **spec},
    }


def on(p: Obj, node_name: str) -> Obj:
    bound = copy.deepcopy(p)
    bound["spec"]["nodeName"] = node_name
    return bound


NODES = [node("n1", "z1"), node("n2", "z1"), node("n3", "z2")]
NAMESPACES = [
    {"metadata": {"name": "a", "labels": {"team": "a"}}},
    {"metadata": {"name": "b", "labels": {"team": "b"}}},
]


def run(history: list[tuple[str, Obj]], **objects: Any) -> list[Violation]:
    cluster = Cluster(nodes=objects.pop("nodes", NODES), namespaces=NAMESPACES, **objects)
    violations, binds = check(cluster, history)
    assert binds == sum(1 for kind, p in history if kind != "DELETED" and p["spec"].get("nodeName"))
    return violations


def binds(*placements: tuple[Obj, str]) -> list[tuple[str, Obj]]:
    return [("MODIFIED", on(p, n)) for p, n in placements]


def rules(violations: list[Violation]) -> list[str]:
    return [v.rule for v in violations]


# -- quantities and requests -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("2", Fraction(2)),
        ("1Gi", Fraction(2**30)),
        ("1e3", Fraction(1000)),
        ("1.5k", Fraction(1500)),
    ],
)
def test_quantity(text: str, value: Fraction) -> None:
    assert quantity(text) == value


def test_requests_follow_kep_753_and_add_overhead() -> None:
    p = pod("p", cpu="1")
    p["spec"]["initContainers"] = [
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
        {"name": "init", "resources": {"requests": {"cpu": "3"}}},
    ]
    p["spec"]["overhead"] = {"cpu": "250m"}
    # max(1 + 0.5, 3 + 0.5) + 0.25
    assert requests(p)["cpu"] == Fraction(15, 4)


# -- one case per rule: (a bad last bind, the good one) --------------------------------------------

Case = Callable[[], tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]]


def resources() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    big = pod("big", cpu="3")
    second = pod("second", cpu="2")
    return binds((big, "n1"), (second, "n1")), binds((big, "n1"), (second, "n2")), {}


def pod_count() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    tiny = [pod(f"t{i}", cpu="10m") for i in range(3)]
    nodes = [node("n1", "z1", pods="2"), node("n2", "z1")]
    bad = binds((tiny[0], "n1"), (tiny[1], "n1"), (tiny[2], "n1"))
    good = binds((tiny[0], "n1"), (tiny[1], "n1"), (tiny[2], "n2"))
    return bad, good, {"nodes": nodes}


def ephemeral_storage() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    disk = pod("disk", cpu="100m")
    disk["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "11Gi"
    small = pod("small", cpu="100m")
    small["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "1Gi"
    return binds((disk, "n1")), binds((small, "n1")), {}


def hugepages() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    huge = pod("huge", cpu="100m")
    huge["spec"]["containers"][0]["resources"]["requests"]["hugepages-2Mi"] = "64Mi"
    nodes = [node("n1", "z1"), node("n2", "z1", allocatable={"hugepages-2Mi": "128Mi"})]
    return binds((huge, "n1")), binds((huge, "n2")), {"nodes": nodes}


def overhead() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    kata = pod("kata", cpu="3800m", overhead={"cpu": "250m"})
    plain = pod("plain", cpu="3800m")
    return binds((kata, "n1")), binds((plain, "n1")), {}


def node_affinity() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    term = {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z2"]}]}
    picky = pod(
        "picky",
        affinity={
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        },
    )
    return binds((picky, "n1")), binds((picky, "n3")), {}


def node_selector() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    picky = pod("picky", nodeSelector={HOST: "n2"})
    return binds((picky, "n1")), binds((picky, "n2")), {}


def taints() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    nodes = [
        node("n1", "z1", spec={"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}),
        node("n2", "z1"),
    ]
    plain = pod("plain")
    tolerant = pod("tolerant", tolerations=[{"key": "dedicated", "operator": "Equal", "value": "x"}])
    return binds((plain, "n1")), binds((tolerant, "n1")), {"nodes": nodes}


def unschedulable() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    nodes = [node("n1", "z1", spec={"unschedulable": True}), node("n2", "z1")]
    return binds((pod("p"), "n1")), binds((pod("p"), "n2")), {"nodes": nodes}


def host_ports() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    def web(name: str, ip: str = "", protocol: str = "TCP") -> Obj:
        p = pod(name)
        port: dict[str, Any] = {"containerPort": 80, "hostPort": 8080, "protocol": protocol}
        if ip:
            port["hostIP"] = ip
        p["spec"]["containers"][0]["ports"] = [port]
        return p

    # 0.0.0.0 conflicts with a specific address; UDP does not conflict with TCP.
    bad = binds((web("w1", "10.0.0.1"), "n1"), (web("w2"), "n1"))
    good = binds((web("w1", "10.0.0.1"), "n1"), (web("w2", protocol="UDP"), "n1"))
    return bad, good, {}


def _anti(topology: str, selector: dict[str, Any], **term: Any) -> dict[str, Any]:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": selector, "topologyKey": topology, **term}
            ]
        }
    }


def _affine(topology: str, selector: dict[str, Any], **term: Any) -> dict[str, Any]:
    return {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": selector, "topologyKey": topology, **term}
            ]
        }
    }


def anti_affinity() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    web = {"app": "web"}
    first = pod("w1", labels=web, affinity=_anti(HOST, {"matchLabels": web}))
    second = pod("w2", labels=web, affinity=_anti(HOST, {"matchLabels": web}))
    return binds((first, "n1"), (second, "n1")), binds((first, "n1"), (second, "n2")), {}


def existing_anti_affinity() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    loner = pod("loner", affinity=_anti(ZONE, {"matchLabels": {"app": "noisy"}}))
    noisy = pod("noisy", labels={"app": "noisy"})  # no rule of its own: the loner's repels it
    return binds((loner, "n1"), (noisy, "n2")), binds((loner, "n1"), (noisy, "n3")), {}


def namespace_selector() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    noisy = pod("noisy", ns="a", labels={"app": "noisy"})
    quiet = pod(
        "quiet",
        ns="b",
        affinity=_anti(
            HOST, {"matchLabels": {"app": "noisy"}}, namespaceSelector={"matchLabels": {"team": "a"}}
        ),
    )
    return binds((noisy, "n1"), (quiet, "n1")), binds((noisy, "n1"), (quiet, "n2")), {}


def match_label_keys() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    def web(name: str, rollout: str) -> Obj:
        rule = _anti(HOST, {"matchLabels": {"app": "web"}}, matchLabelKeys=["rollout"])
        return pod(name, labels={"app": "web", "rollout": rollout}, affinity=rule)

    # Same rollout on one node breaks it; another rollout may share the node.
    bad = binds((web("v1a", "v1"), "n1"), (web("v1b", "v1"), "n1"))
    good = binds((web("v1a", "v1"), "n1"), (web("v2a", "v2"), "n1"))
    return bad, good, {}


def affinity() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    cache = pod("cache", labels={"app": "cache"})
    backend = pod("backend", affinity=_affine(ZONE, {"matchLabels": {"app": "cache"}}))
    return binds((cache, "n1"), (backend, "n3")), binds((cache, "n1"), (backend, "n2")), {}


def affinity_first_pod() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    """The first pod of a self-affine group may go anywhere; a pod affine to others that exist may not."""
    group = {"app": "group"}
    first = pod("g1", labels=group, affinity=_affine(ZONE, {"matchLabels": group}))
    stranger = pod("stranger", affinity=_affine(ZONE, {"matchLabels": {"app": "absent"}}))
    return binds((stranger, "n1")), binds((first, "n3")), {}


def spread() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    rule = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "s"}},
        }
    ]
    s = [pod(f"s{i}", labels={"app": "s"}, topologySpreadConstraints=rule) for i in range(3)]
    bad = binds((s[0], "n1"), (s[1], "n2"))  # z1 = 2, z2 = 0
    good = binds((s[0], "n1"), (s[1], "n3"), (s[2], "n2"))
    return bad, good, {}


def spread_min_domains() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    rule = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "minDomains": 3,
            "labelSelector": {"matchLabels": {"app": "s"}},
        }
    ]
    s = [pod(f"s{i}", labels={"app": "s"}, topologySpreadConstraints=rule) for i in range(3)]
    # Two zones < minDomains 3: the global minimum is 0, so no zone may hold more than one.
    bad = binds((s[0], "n1"), (s[1], "n3"), (s[2], "n2"))
    good = binds((s[0], "n1"), (s[1], "n3"))
    return bad, good, {}


PV_ZONE2: Obj = {
    "metadata": {"name": "pv-z2", "labels": {ZONE: "z2"}},
    "spec": {
        "nodeAffinity": {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z2"]}]}
                ]
            }
        },
        "claimRef": {"namespace": "a", "name": "data"},
    },
}


def _pvc(
    name: str, volume: str = "", modes: tuple[str, ...] = ("ReadWriteOnce",), phase: str = "Bound"
) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "a"},
        "spec": {"volumeName": volume, "accessModes": list(modes)},
        "status": {"phase": phase},
    }


def _with_claim(p: Obj, claim: str) -> Obj:
    p["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]
    return p


def pv_node_affinity() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    user = _with_claim(pod("user"), "data")
    pv = copy.deepcopy(PV_ZONE2)
    del pv["metadata"]["labels"]  # the node affinity alone
    return binds((user, "n1")), binds((user, "n3")), {"pvcs": [_pvc("data", "pv-z2")], "pvs": [pv]}


def volume_zone() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    user = _with_claim(pod("user"), "data")
    pv = copy.deepcopy(PV_ZONE2)
    del pv["spec"]["nodeAffinity"]  # the zone label alone
    return binds((user, "n1")), binds((user, "n3")), {"pvcs": [_pvc("data", "pv-z2")], "pvs": [pv]}


def unbound_claim() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    missing = _with_claim(pod("missing"), "nope")
    return binds((missing, "n3")), [], {"pvcs": [], "pvs": []}


def read_write_once_pod() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    first, second = _with_claim(pod("first"), "solo"), _with_claim(pod("second"), "solo")
    claim = _pvc("solo", "pv-z2", modes=("ReadWriteOncePod",))
    pv = copy.deepcopy(PV_ZONE2)
    bad = binds((first, "n3"), (second, "n3"))
    good = [*binds((first, "n3")), ("DELETED", on(first, "n3")), *binds((second, "n3"))]
    return bad, good, {"pvcs": [claim], "pvs": [pv]}


def volume_limits() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    pvs = [
        {
            "metadata": {"name": f"pv{i}"},
            "spec": {"csi": {"driver": "csi.example.com", "volumeHandle": f"h{i}"}},
        }
        for i in range(2)
    ]
    pvcs = [_pvc(f"c{i}", f"pv{i}") for i in range(2)]
    users = [_with_claim(pod(f"u{i}"), f"c{i}") for i in range(2)]
    csinodes = [
        {
            "metadata": {"name": n},
            "spec": {"drivers": [{"name": "csi.example.com", "nodeID": n, "allocatable": {"count": 1}}]},
        }
        for n in ("n1", "n2")
    ]
    bad = binds((users[0], "n1"), (users[1], "n1"))
    good = binds((users[0], "n1"), (users[1], "n2"))
    return bad, good, {"pvcs": pvcs, "pvs": pvs, "csinodes": csinodes}


def scheduling_gates() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    gated = pod("gated", schedulingGates=[{"name": "example.com/wait"}])
    released = pod("gated")
    return binds((gated, "n1")), binds((released, "n1")), {}


def resource_claims() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    user = pod("dra", resourceClaims=[{"name": "gpu", "resourceClaimName": "gpu-claim"}])
    pending: Obj = {"metadata": {"name": "gpu-claim", "namespace": "a"}, "spec": {}, "status": {}}
    return binds((user, "n1")), [], {"claims": [pending]}


def resource_claims_allocated() -> tuple[list[tuple[str, Obj]], list[tuple[str, Obj]], dict[str, Any]]:
    user = pod("dra", resourceClaims=[{"name": "gpu", "resourceClaimName": "gpu-claim"}])
    allocated = {
        "metadata": {"name": "gpu-claim", "namespace": "a"},
        "spec": {},
        "status": {
            "allocation": {"devices": {"results": []}},
            "reservedFor": [{"resource": "pods", "name": "dra", "uid": "uid-a-dra"}],
        },
    }
    return [], binds((user, "n1")), {"claims": [allocated]}


CASES: dict[str, tuple[Case, str]] = {
    "resources": (resources, "NodeResourcesFit"),
    "pod count": (pod_count, "NodeResourcesFit"),
    "ephemeral storage": (ephemeral_storage, "NodeResourcesFit"),
    "hugepages": (hugepages, "NodeResourcesFit"),
    "overhead": (overhead, "NodeResourcesFit"),
    "node affinity": (node_affinity, "NodeAffinity"),
    "node selector": (node_selector, "NodeAffinity"),
    "taints": (taints, "TaintToleration"),
    "unschedulable": (unschedulable, "NodeUnschedulable"),
    "host ports": (host_ports, "NodePorts"),
    "anti-affinity": (anti_affinity, "InterPodAffinity"),
    "existing pods' anti-affinity": (existing_anti_affinity, "InterPodAffinity"),
    "namespaceSelector": (namespace_selector, "InterPodAffinity"),
    "matchLabelKeys": (match_label_keys, "InterPodAffinity"),
    "affinity": (affinity, "InterPodAffinity"),
    "affinity first pod": (affinity_first_pod, "InterPodAffinity"),
    "spread": (spread, "PodTopologySpread"),
    "spread minDomains": (spread_min_domains, "PodTopologySpread"),
    "PV node affinity": (pv_node_affinity, "VolumeBinding"),
    "volume zone": (volume_zone, "VolumeZone"),
    "missing claim": (unbound_claim, "VolumeBinding"),
    "ReadWriteOncePod": (read_write_once_pod, "VolumeRestrictions"),
    "CSINode limits": (volume_limits, "NodeVolumeLimits"),
    "scheduling gates": (scheduling_gates, "SchedulingGates"),
    "resource claims": (resource_claims, "DynamicResources"),
    "resource claims allocated": (resource_claims_allocated, ""),
}


@pytest.mark.parametrize("case", sorted(CASES), ids=str)
def test_the_checker_catches_a_bad_placement_of_every_rule(case: str) -> None:
    build, rule = CASES[case]
    bad, good, objects = build()
    if rule:
        found = run(bad, **copy.deepcopy(objects))
        assert found and set(rules(found)) == {rule}, found
        last = bad[-1][1]
        # The last bind breaks it (the order-dependent rules, judged on the final placement, may also
        # name the pods it shares the offending domain with).
        assert f"{last['metadata']['namespace']}/{last['metadata']['name']}" in {v.pod for v in found}
    assert run(good, **copy.deepcopy(objects)) == []


def test_a_victim_deleted_before_the_preemptor_binds_makes_room() -> None:
    victim, preemptor = pod("victim", cpu="3"), pod("preemptor", cpu="3")
    history = [*binds((victim, "n1")), ("DELETED", on(victim, "n1")), *binds((preemptor, "n1"))]
    assert run(history) == []


def test_a_preemptor_bound_before_its_victim_is_gone_overcommits() -> None:
    victim, preemptor = pod("victim", cpu="3"), pod("preemptor", cpu="3")
    history = [*binds((victim, "n1"), (preemptor, "n1")), ("DELETED", on(victim, "n1"))]
    assert rules(run(history)) == ["NodeResourcesFit"]


def test_a_pod_the_final_placement_rules_count_must_not_be_deleted() -> None:
    """Required affinity is judged on the final placement, which says nothing when its target was
    deleted after the bind: the checker refuses to judge rather than pass or fail it."""
    cache = pod("cache", labels={"app": "cache"})
    backend = pod("backend", affinity=_affine(ZONE, {"matchLabels": {"app": "cache"}}))
    history = [*binds((cache, "n1"), (backend, "n2")), ("DELETED", on(cache, "n1"))]
    with pytest.raises(Unjudgeable, match="a/cache was deleted"):
        run(history)


def test_binds_landing_out_of_decision_order_keep_a_valid_spread() -> None:
    """A scheduler decides s0 (z1), s1 (z2), s2 (z1) in turn, but s2's bind lands first: judged at its
    moment s2 would look like a skew of 1 over an empty z2 and z1 alone; the final placement, 2 and 1,
    is within maxSkew 1 and no violation."""
    rule = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "s"}},
        }
    ]
    s = [pod(f"s{i}", labels={"app": "s"}, topologySpreadConstraints=rule) for i in range(3)]
    assert run(binds((s[2], "n2"), (s[0], "n1"), (s[1], "n3"))) == []


def test_a_self_affine_group_split_over_domains_is_caught() -> None:
    group = {"app": "group"}
    members = [pod(f"g{i}", labels=group, affinity=_affine(ZONE, {"matchLabels": group})) for i in range(4)]
    split = run(binds((members[0], "n1"), (members[1], "n2"), (members[2], "n3"), (members[3], "n3")))
    assert set(rules(split)) == {"InterPodAffinity"}
    assert run(binds((members[0], "n1"), (members[1], "n2"), (members[2], "n1"))) == []


def test_a_pod_recreated_under_its_name_is_a_new_pod() -> None:
    first = pod("p", cpu="3")
    again = copy.deepcopy(first)
    again["metadata"]["uid"] = "another"
    history = [*binds((first, "n1")), ("DELETED", on(first, "n1")), *binds((again, "n1"))]
    assert run(history) == []
