"""``gpuq simulate`` reads PodDisruptionBudgets from manifests and preemption honours them (design.md
"Preemption"); one the apiserver would refuse is an input error naming it and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuq_k8s.cli import main
from tests.testing.simulate_text import pods_by_name

# Two full nodes, each with one low-priority pod; a high-priority pod needs one of the nodes. a-1 sorts
# first and is younger (kube would evict it), but a budget allowing no disruption covers it.
CLUSTER = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "2", memory: 4Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: n2}
status: {allocatable: {cpu: "2", memory: 4Gi, pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata: {name: a-1, namespace: shop, labels: {app: web}, creationTimestamp: "2024-01-01T00:00:02Z"}
spec:
  schedulerName: gpuq-scheduler
  nodeName: n1
  containers: [{name: c, resources: {requests: {cpu: "2"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: b-1, namespace: shop, labels: {app: batch}, creationTimestamp: "2024-01-01T00:00:01Z"}
spec:
  schedulerName: gpuq-scheduler
  nodeName: n2
  containers: [{name: c, resources: {requests: {cpu: "2"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: urgent, namespace: shop, creationTimestamp: "2024-01-01T00:00:03Z"}
spec:
  schedulerName: gpuq-scheduler
  priorityClassName: high
  containers: [{name: c, resources: {requests: {cpu: "2"}}}]
"""

BUDGET = """
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: shop}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
"""

CONFIG = """actions: "enqueue, allocate, preempt"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
"""


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> dict[str, dict[str, object]]:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    manifest = tmp_path / "cluster.yaml"
    manifest.write_text(text)
    assert main(["simulate", "-f", str(manifest), "--config", str(config), "-o", "json"]) == 0
    return pods_by_name(json.loads(capsys.readouterr().out))


def test_without_a_budget_the_first_node_name_is_preempted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = run(tmp_path, capsys, CLUSTER)
    assert (pods["urgent"]["phase"], pods["urgent"]["node"]) == ("Bound", "n1")
    assert pods["a-1"]["phase"] == "Preempted" and pods["b-1"]["phase"] == "Bound"


def test_a_budget_from_the_manifests_steers_preemption_to_the_unprotected_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The budget has no status (no disruption controller in a manifest): its one bound pod is
    healthy and minAvailable 1 leaves no disruption, so a-1's eviction would violate it."""
    pods = run(tmp_path, capsys, CLUSTER + BUDGET)
    assert (pods["urgent"]["phase"], pods["urgent"]["node"]) == ("Bound", "n2")
    assert pods["b-1"]["phase"] == "Preempted" and pods["a-1"]["phase"] == "Bound"


def test_a_budget_status_is_what_it_allows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    allowing = BUDGET + "status: {disruptionsAllowed: 1}\n"
    pods = run(tmp_path, capsys, CLUSTER + allowing)
    assert pods["a-1"]["phase"] == "Preempted"


def test_a_budget_the_apiserver_would_refuse_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    both = BUDGET.replace("minAvailable: 1", "minAvailable: 1\n  maxUnavailable: 1")
    manifest = tmp_path / "cluster.yaml"
    manifest.write_text(CLUSTER + both)
    assert main(["simulate", "-f", str(manifest), "-o", "json"]) == 2
    err = capsys.readouterr().err
    assert "PodDisruptionBudget/shop/web: spec.maxUnavailable" in err
    assert "at most one" in err
    assert len([line for line in err.splitlines() if "PodDisruptionBudget" in line]) == 1
