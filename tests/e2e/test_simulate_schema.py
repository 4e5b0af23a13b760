"""simulate's CRD-schema check (scheduler/simulate/schema.py) agrees with the real apiserver: every
document it accepts ``kubectl create --dry-run=server`` (strict field validation, kubectl's default)
accepts, and every document it refuses the apiserver refuses, for the same field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq_k8s.scheduler.simulate.schema import check_custom_resource, load_crds
from tests.e2e.controlplane.harness import Kubectl, dns_label
from tests.testing.builders import MakeElasticQuota, MakeGPUResourceQuota, MakePodGroup, MakeQueue

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example_resources() -> list[dict[str, Any]]:
    crds = load_crds()
    return [
        doc
        for path in sorted(EXAMPLES.rglob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("kind") in crds
    ]


def _with(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return out


GRQ = MakeGPUResourceQuota("q").total(requests={"tflops": "10", "vram": "1Gi"}).obj()
REFUSED = [
    (_with(GRQ, "spec.total.requestz", {"tflops": "1", "vram": "1Gi"}), "spec.total.requestz"),
    (_with(GRQ, "spec.total.requests", {"tflops": "10"}), "spec.total.requests.vram"),
    (_with(GRQ, "spec.total.requests", {"tflops": "-1", "vram": "1Gi"}), "spec.total.requests.tflops"),
    (_with(GRQ, "spec.total.alertThresholdPercent", 101), "spec.total.alertThresholdPercent"),
    (_with(GRQ, "spec.total.maxWorkers", "many"), "spec.total.maxWorkers"),
    (_with(GRQ, "spec.total.maxWorkers", 2**31), "spec.total.maxWorkers"),
    (MakePodGroup("g").spec(minMember="two").obj(), "spec.minMember"),
    (MakePodGroup("g").spec(queeue="q").obj(), "spec.queeue"),
    (MakePodGroup("g").spec(networkTopology={"mode": "medium"}).obj(), "spec.networkTopology.mode"),
    (MakeElasticQuota("eq").max(cpu="lots").obj(), "spec.max"),
    (MakeQueue("q").weight(0).obj(), "spec.weight"),
    (_with(MakeQueue("q").obj(), "spec.reclaimable", "yes"), "spec.reclaimable"),
    (_with(GRQ, "metadata.labelz", {"a": "b"}), "metadata.labelz"),
    (_with(GRQ, "metadata.name", "Q_1"), "metadata.name"),
    (_with(GRQ, "metadata.labels", {"a": "not ok"}), "metadata.labels"),
    (_with(GRQ, "apiVersion", "tensor-fusion.ai/v2"), "tensor-fusion.ai/v2"),
]


def _dry_run(kubectl: Kubectl, obj: dict[str, Any], namespace: str) -> tuple[bool, str]:
    doc = copy.deepcopy(obj)
    if doc["kind"] == "Queue":  # cluster-scoped, and the control plane is shared by the session
        doc["metadata"]["name"] = dns_label(str(doc["metadata"]["name"]))
    else:
        doc["metadata"]["namespace"] = namespace
    result = kubectl(
        "create", "--dry-run=server", "-f", "-", "-o", "json", stdin=json.dumps(doc), check=False
    )
    return result.returncode == 0, result.stderr


def _problems(obj: dict[str, Any]) -> list[str]:
    crd = load_crds()[obj["kind"]]
    return [p.render(obj["kind"]) for p in check_custom_resource(crd, obj)]


def test_what_simulate_accepts_the_apiserver_accepts(kubectl: Kubectl, namespace: str) -> None:
    examples = _example_resources()
    assert len(examples) >= 20
    for obj in examples:
        assert _problems(obj) == []
        accepted, error = _dry_run(kubectl, obj, namespace)
        assert accepted, (obj["metadata"], error)


@pytest.mark.parametrize(("obj", "field"), REFUSED, ids=[field for _, field in REFUSED])
def test_what_simulate_refuses_the_apiserver_refuses(
    kubectl: Kubectl, namespace: str, obj: dict[str, Any], field: str
) -> None:
    problems = _problems(obj)
    assert problems and field in problems[0]
    accepted, error = _dry_run(kubectl, obj, namespace)
    assert not accepted and field.rpartition(".")[2] in error, error
