"""simulate's field check of built-in kinds (scheduler/simulate/core_schema.py) is the apiserver's: the
committed field tree is what the harness's kube-apiserver serves (regenerate it with ``python -m
tests.e2e.core_schema`` after a version bump), and every object it refuses ``kubectl create
--dry-run=server`` (strict field validation, kubectl's default) refuses for the same field, every one it
accepts the apiserver accepts."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq_k8s.scheduler.simulate.core_schema import SCHEMA_FILE, load_core_schema
from tests.e2e.controlplane.harness import Kubectl
from tests.e2e.core_schema import from_control_plane

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "labels": {"app": "a"}},
    "spec": {"schedulerName": "gpuq-scheduler", "containers": [{"name": "c", "image": "busybox"}]},
}
DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "d"},
    "spec": {
        "selector": {"matchLabels": {"app": "a"}},
        "template": {"metadata": {"labels": {"app": "a"}}, "spec": copy.deepcopy(POD["spec"])},
    },
}


def _with(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node: Any = out
    for key in parents:
        node = node[int(key)] if key.isdigit() else node.setdefault(key, {})
    node[last] = value
    return out


REFUSED = [
    (_with(POD, "spec.schedulerNmae", "gpuq-scheduler"), "spec.schedulerNmae"),
    (_with(POD, "spec.containers.0.resourcez", {}), "spec.containers[0].resourcez"),
    (_with(POD, "metadata.labelz", {"a": "b"}), "metadata.labelz"),
    (_with(POD, "spec.nodeSelector", ["a"]), "spec.nodeSelector"),
    (_with(POD, "spec.priority", "high"), "spec.priority"),
    (_with(DEPLOYMENT, "spec.replica", 2), "spec.replica"),
    (_with(DEPLOYMENT, "spec.template.spec.schedulerNmae", "x"), "spec.template.spec.schedulerNmae"),
    (_with(DEPLOYMENT, "spec.replicas", "2"), "spec.replicas"),
]
ACCEPTED = [
    _with(POD, "spec.hostUsers", False),
    _with(POD, "spec.resources", {"requests": {"cpu": 1}}),
    _with(POD, "spec.containers.0.resources", {"requests": {"cpu": "500m", "memory": 1073741824}}),
    _with(DEPLOYMENT, "spec.strategy", {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}}),
]


def _dry_run(kubectl: Kubectl, obj: dict[str, Any], namespace: str) -> tuple[bool, str]:
    doc = _with(obj, "metadata.namespace", namespace)
    result = kubectl(
        "create", "--dry-run=server", "-f", "-", "-o", "json", stdin=json.dumps(doc), check=False
    )
    return result.returncode == 0, result.stderr


def _problems(obj: dict[str, Any]) -> list[str]:
    found = load_core_schema().check(obj, obj["apiVersion"])
    assert found is not None
    return [p.path for p in found]


def test_the_committed_field_tree_is_what_the_apiserver_serves(kubectl: Kubectl) -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == from_control_plane(kubectl), (
        "scheduler/simulate/core_schema.json is out of date: python -m tests.e2e.core_schema"
    )


@pytest.mark.parametrize(("obj", "field"), REFUSED, ids=[field for _, field in REFUSED])
def test_what_simulate_refuses_the_apiserver_refuses(
    kubectl: Kubectl, namespace: str, obj: dict[str, Any], field: str
) -> None:
    assert _problems(obj) == [field]
    accepted, error = _dry_run(kubectl, obj, namespace)
    assert not accepted
    assert field.rpartition(".")[2].partition("[")[0] in error, error


def test_what_simulate_accepts_the_apiserver_accepts(kubectl: Kubectl, namespace: str) -> None:
    examples = [
        doc
        for path in sorted(EXAMPLES.rglob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict)
        and doc.get("kind") in ("Pod", "Deployment", "StatefulSet", "Job", "ReplicaSet")
        and doc.get("apiVersion") in ("v1", "apps/v1", "batch/v1")
        and not (doc.get("spec") or {}).get("nodeName")  # a bound pod's node need not exist here
    ]
    assert len(examples) >= 30
    for obj in [*ACCEPTED, *examples]:
        assert _problems(obj) == [], obj["metadata"]
        accepted, error = _dry_run(kubectl, _with_images(obj), namespace)
        assert accepted, (obj["metadata"], error)


def _with_images(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with an image in every container and a limit for every extended resource requested
    (the examples leave them out: the apiserver's validation, not its decoding, which simulate leaves
    to the cluster, as it runs nothing), and no PriorityClass (the example defines it, admission
    looks it up in the cluster)."""
    out = copy.deepcopy(obj)
    spec = out["spec"]
    spec = spec["template"]["spec"] if "template" in spec else spec
    spec.pop("priorityClassName", None)
    for container in spec["containers"]:
        container.setdefault("image", "busybox")
        resources = container.get("resources") or {}
        limits = resources.setdefault("limits", {})
        for name, value in (resources.get("requests") or {}).items():
            if "/" in name:
                limits.setdefault(name, value)
        if resources:
            container["resources"] = resources
    return out
