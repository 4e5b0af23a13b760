"""``gpuq simulate`` with storage (design.md "gpuq simulate", "Placement rules: volumes"): the worked
example of examples/volumes through the CLI, the PV controller played in memory (claims of Immediate
classes bound before any pod is tried), and storage objects the apiserver would refuse as input
errors naming the object and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuq_k8s.cli import main
from tests.testing.builders import MakeNode, MakePod, MakePV, MakePVC, MakeStorageClass
from tests.testing.paths import REPO_ROOT
from tests.testing.simulate_text import pods_by_name, simulate, simulate_explained

EXAMPLE = str(REPO_ROOT / "examples" / "volumes")


def test_the_volumes_example(capsys: pytest.CaptureFixture[str]) -> None:
    """trainer takes zone b's one static volume; worker-0's claim is provisioned on a1, whose driver
    then may attach nothing more, so worker-1's is provisioned on b1; evaluator finds no volume left
    and orphan no claim, each with kube-scheduler's reason."""
    out = simulate_explained(capsys, "-f", EXAMPLE)
    pods = pods_by_name(out)
    assert {name: (p["phase"], p["node"]) for name, p in pods.items()} == {
        "trainer": ("Bound", "b1"),
        "worker-0": ("Bound", "a1"),
        "worker-1": ("Bound", "b1"),
        "evaluator": ("Pending", None),
        "orphan": ("Pending", None),
    }
    assert pods["worker-1"]["nodes"]["a1"]["filtered"] == "node(s) exceed max volume count"
    assert (
        pods["trainer"]["nodes"]["a1"]["filtered"]
        == "node(s) didn't find available persistent volumes to bind"
    )
    assert pods["evaluator"]["reason"].startswith(
        "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind."
    )
    assert pods["orphan"]["reason"] == '0/2 nodes are available: persistentvolumeclaim "missing" not found.'
    claims = {c["name"]: c for c in out["persistentVolumeClaims"]}
    assert claims["dataset"] == {
        "namespace": "ml",
        "name": "dataset",
        "phase": "Bound",
        "volume": "local-b-0",
        "storageClass": "local",
        "selectedNode": None,
    }
    assert (claims["scratch-0"]["selectedNode"], claims["scratch-0"]["phase"]) == ("a1", "Bound")
    assert (claims["scratch-1"]["selectedNode"], claims["scratch-1"]["phase"]) == ("b1", "Bound")
    assert claims["dataset-2"]["phase"] == "Pending"


def _yaml(*objects: dict[str, Any]) -> str:
    return "\n---\n".join(json.dumps(o) for o in objects)


def test_an_immediate_claim_is_bound_by_the_controller_before_pods_are_tried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _yaml(
        MakeNode("n1").alloc(cpu="4", pods="10").obj(),
        MakeStorageClass("std", "", mode="Immediate").obj(),
        MakePV("pv-small", "std").capacity("1Gi").obj(),
        MakePV("pv-big", "std").capacity("100Gi").obj(),
        MakePVC("data", "ns", "std").request("2Gi").obj(),
        MakePod("p", "ns").req(cpu="1").pvc("data").obj(),
    )
    out = simulate(tmp_path, capsys, text)
    assert pods_by_name(out)["p"]["phase"] == "Bound"
    assert out["persistentVolumeClaims"][0]["volume"] == "pv-big"


@pytest.mark.parametrize(
    ("obj", "line"),
    [
        (
            MakePVC("data", "ml").request("ten").obj(),
            "PersistentVolumeClaim/ml/data: spec.resources.requests.storage: invalid value 'ten'",
        ),
        (
            MakePVC("data", "ml").access_modes("ReadWriteSometimes").obj(),
            "PersistentVolumeClaim/ml/data: spec.accessModes: invalid value ['ReadWriteSometimes']",
        ),
        (
            MakePV("pv")
            .spec(
                nodeAffinity={
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}
                        ]
                    }
                }
            )
            .obj(),
            "PersistentVolume/pv: spec.nodeAffinity.required.nodeSelectorTerms[0]."
            "matchExpressions[0].operator: invalid value 'Near'",
        ),
        (
            MakeStorageClass("sc", "x", mode="Later").obj(),
            "StorageClass/sc: volumeBindingMode: invalid value 'Later': "
            "expected Immediate or WaitForFirstConsumer",
        ),
        (
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSINode",
                "metadata": {"name": "n1"},
                "spec": {"drivers": [{"name": "d", "allocatable": {"count": -1}}]},
            },
            "CSINode/n1: spec.drivers[0].allocatable.count: invalid value -1: "
            "expected a non-negative integer",
        ),
        (
            MakePod("p", "ml").volume({"name": "v", "persistentVolumeClaim": {}}).obj(),
            "Pod/ml/p: spec.volumes[0].persistentVolumeClaim.claimName: invalid value None",
        ),
    ],
    ids=[
        "claim-storage",
        "claim-access-mode",
        "volume-affinity",
        "class-mode",
        "csinode-count",
        "pod-volume",
    ],
)
def test_a_storage_object_the_apiserver_refuses_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], obj: dict[str, Any], line: str
) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(_yaml(MakeNode("n1").alloc(cpu="1").obj(), obj))
    assert main(["simulate", "-f", str(path), "-o", "json"]) == 2
    err = capsys.readouterr().err
    assert line in err, err
    assert "Traceback" not in err


def test_the_table_lists_the_claims(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", EXAMPLE]) == 0
    text = capsys.readouterr().out
    claims = text.split("PersistentVolumeClaims", 1)[1]
    row = next(line for line in claims.splitlines() if "scratch-0" in line)
    assert [cell.strip() for cell in row.strip("│ ").split("│")] == [
        "ml",
        "scratch-0",
        "Bound",
        "pvc-simulated-ml-scratch-0",
        "zonal",
        "a1",
    ]
