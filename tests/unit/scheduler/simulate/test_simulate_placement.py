"""Issue 23 through ``gpuq simulate``: inter-pod anti-affinity and topology spread are honoured, the
loader plays kube-apiserver for manifest pods (matchLabelKeys merged, malformed terms refused naming the
field), and topology spread's system defaults select a Deployment's pods by the ReplicaSet that owns
them (nodeorder's podtopologyspread)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq_k8s.cli import main
from tests.testing.builders import MakeNode, MakePod
from tests.testing.config import config_text
from tests.testing.simulate_text import pods_by_name, simulate
from tests.testing.volcano_scenarios import simulate_scenario

HOST = "kubernetes.io/hostname"


def _nodes(count: int, zones: int = 1) -> list[dict[str, Any]]:
    return [
        MakeNode(f"n{i}")
        .alloc(cpu="16", memory="32Gi", pods="50")
        .label(HOST, f"n{i}")
        .label("zone", f"z{i % zones}")
        .obj()
        for i in range(count)
    ]


def _anti(labels: dict[str, str], **extra: Any) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": HOST, **extra}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_two_pods_with_hostname_anti_affinity_never_share_a_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's first example: two such pods on two nodes land apart; a third waits, saying why."""
    pods = [
        MakePod(f"web-{i}", "ns").req(cpu="1").label("app", "web").spec(affinity=_anti({"app": "web"})).obj()
        for i in range(3)
    ]
    out = pods_by_name(simulate(tmp_path, capsys, yaml.safe_dump_all([*_nodes(2), *pods])))
    assert {out["web-0"]["node"], out["web-1"]["node"]} == {"n0", "n1"}
    assert out["web-2"]["phase"] == "Pending"
    assert "2 node(s) didn't match pod anti-affinity rules" in out["web-2"]["reason"]


def test_do_not_schedule_spread_is_honoured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Six pods spread over three zones with maxSkew 1: two per zone."""
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "x"}},
        }
    ]
    pods = [
        MakePod(f"x-{i}", "ns").req(cpu="1").label("app", "x").spec(topologySpreadConstraints=spread).obj()
        for i in range(6)
    ]
    out = simulate(tmp_path, capsys, yaml.safe_dump_all([*_nodes(6, zones=3), *pods]))
    zones = Counter(f"z{int(p['node'][1:]) % 3}" for p in out["pods"])
    assert zones == {"z0": 2, "z1": 2, "z2": 2}


def test_match_label_keys_are_merged_from_each_pods_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Anti-affinity to app=web with matchLabelKeys [rev]: pods of one revision avoid each other, not
    the pods of the other revision (the apiserver merges ``rev In (<own rev>)`` at creation)."""
    affinity = _anti({"app": "web"}, matchLabelKeys=["rev"])
    pods = [
        MakePod(f"web-{rev}-{i}", "ns")
        .req(cpu="1")
        .label("app", "web")
        .label("rev", rev)
        .spec(affinity=affinity)
        .obj()
        for rev in ("a", "b")
        for i in range(2)
    ]
    out = pods_by_name(simulate(tmp_path, capsys, yaml.safe_dump_all([*_nodes(2), *pods])))
    assert {p["phase"] for p in out.values()} == {"Bound"}
    for rev in ("a", "b"):
        assert out[f"web-{rev}-0"]["node"] != out[f"web-{rev}-1"]["node"]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"affinity": _anti({"app": "{{bad}}"})}, "labelSelector.matchLabels[app]"),
        (
            {
                "affinity": {
                    "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}
                }
            },
            "topologyKey",
        ),
        (
            {
                "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                    {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                ]
            },
            "spec.topologySpreadConstraints[1].topologyKey",
        ),
    ],
)
def test_malformed_placement_terms_are_refused_at_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: dict[str, Any], field: str
) -> None:
    """What kube-apiserver would refuse, simulate refuses: exit 2, one line naming the pod and field."""
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([*_nodes(1), MakePod("p", "ns").req(cpu="1").spec(**spec).obj()]))
    assert main(["simulate", "-f", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert "Pod/ns/p" in err and field in err


def test_system_default_spreading_spreads_a_deployment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """nodeorder with only podtopologyspread weighted: a Deployment's four pods (no constraints of their
    own) spread over the four nodes by the system defaults, selecting them by their ReplicaSet; a bare
    pod, which no controller or Service selects, is not spread (the node name breaks the tie)."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "schedulerName": "gpuq-scheduler",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                },
            },
        },
    }
    bare = [
        MakePod(f"bare-{i}", "ns").scheduler("gpuq-scheduler").req(cpu="1").label("app", "bare").obj()
        for i in range(2)
    ]
    weights = {
        "leastrequested.weight": 0,
        "balancedresource.weight": 0,
        "nodeaffinity.weight": 0,
        "tainttoleration.weight": 0,
        "podaffinity.weight": 0,
        "podtopologyspread.weight": 2,
    }
    config = config_text("priority, gang", ["predicates", "nodeorder"], arguments={"nodeorder": weights})
    out = simulate_scenario(tmp_path, capsys, config, [*_nodes(4), deployment, *bare])
    nodes = {p["name"]: p["node"] for p in out["pods"]}
    assert sorted(nodes[f"web-{i}"] for i in range(4)) == ["n0", "n1", "n2", "n3"]
    assert nodes["bare-0"] == nodes["bare-1"] == "n0"
