"""`gpuq simulate --admission`: the webhook's rules run offline before scheduling (design.md, simulate)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuq_k8s.cli import main
from tests.testing.config import scheduler_config

NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: a100-1
  labels: {nvidia.com/gpu.product: NVIDIA-A100, nvidia.com/gpu.count: "8", nvidia.com/gpu.memory: "81920"}
status:
  allocatable: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "8", pods: "110"}
"""
QUEUE = """\
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata:
  name: team-a
  annotations: {volcano.sh/card.quota: '{"NVIDIA-A100": 4}'}
spec: {weight: 1, capability: {cpu: "32", memory: 256Gi}}
"""
BAD_QUEUE = """\
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata:
  name: bad
  annotations: {volcano.sh/card.quota: '{"NVIDIA-A100": -1}'}
spec: {weight: 1}
"""


def pod(name: str, cards: int, card_name: str = "NVIDIA-A100", node: str = "") -> str:
    node_line = f"\n  nodeName: {node}" if node else ""
    return f"""\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ns
  annotations: {{volcano.sh/card.name: "{card_name}", scheduling.volcano.sh/queue-name: team-a}}
spec:
  schedulerName: gpuq-scheduler{node_line}
  containers:
  - name: c
    resources: {{limits: {{nvidia.com/gpu: {cards}}}, requests: {{nvidia.com/gpu: {cards}, cpu: "1"}}}}
"""


def simulate(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *docs: str,
    admission: bool = True,
    config: str | None = None,
) -> Any:
    path = tmp_path / "input.yaml"
    path.write_text("---\n".join(docs))
    options = ["--admission"] if admission else []
    if config is not None:
        (tmp_path / "config.yaml").write_text(config)
        options += ["--config", str(tmp_path / "config.yaml")]
    code = main(["simulate", "-f", str(path), "-o", "json", *options])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if code == 0 else captured.err)


def test_rejected_pod_and_queue_are_reported_not_scheduled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = simulate(tmp_path, capsys, NODE, QUEUE, BAD_QUEUE, pod("fits", 1), pod("too-big", 8))
    assert code == 0
    phases = {p["name"]: (p["phase"], p["node"]) for p in out["pods"]}
    assert phases == {"fits": ("Bound", "a100-1"), "too-big": ("Rejected", None)}
    too_big = next(p for p in out["pods"] if p["name"] == "too-big")
    assert "Queue/team-a" in too_big["reason"] and "requested 8" in too_big["reason"]
    assert "available 4" in too_big["reason"]
    assert [r["object"] for r in out["rejected"]] == ["Queue/bad"]
    assert "volcano.sh/card.quota" in out["rejected"][0]["message"]
    # the rejected Queue never reached the scheduler
    assert [q["name"] for q in out["queues"]] == ["team-a"]


def test_mutation_is_applied_before_scheduling(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spaced = pod("spaced", 1, card_name=" NVIDIA-A100 ")
    # without admission the scheduler meets the un-normalised annotation as it would in a cluster
    # (a pod created before the webhook): a Warning event, and the pod waits ...
    code, out = simulate(tmp_path, capsys, NODE, QUEUE, spaced, admission=False)
    assert code == 0 and out["pods"][0]["phase"] == "Pending"
    warnings = [e for e in out["events"] if e["type"] == "Warning" and e["object"].endswith("/spaced")]
    assert warnings and all("volcano.sh/card.name" in e["message"] for e in warnings)
    # ... with it, the webhook's mutator normalises it first, as the apiserver would store it
    code, out = simulate(tmp_path, capsys, NODE, QUEUE, spaced)
    assert code == 0
    assert out["pods"][0]["phase"] == "Bound" and out["pods"][0]["cardType"] == "NVIDIA-A100"


def test_running_pods_are_not_admitted_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a pod already on a node predates the simulated admission: it is usage, not a request
    code, out = simulate(tmp_path, capsys, NODE, QUEUE, pod("running", 8, node="a100-1"))
    assert code == 0
    assert out["pods"][0]["phase"] == "Bound" and out["rejected"] == []


@pytest.mark.parametrize("admission", [True, False])
def test_a_pod_whose_spec_is_not_a_mapping_is_an_input_error_with_or_without_admission(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], admission: bool
) -> None:
    """Found by fuzzing: --admission read the spec before anything checked it (a traceback)."""
    bad = "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: oops\n"
    code, err = simulate(tmp_path, capsys, NODE, bad, admission=admission)
    assert code == 2
    assert "Pod/default/x: spec: invalid value 'oops': expected a mapping" in err
    assert "Traceback" not in err


DEFAULT_QUEUE = """\
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: default}
spec: {weight: 1}
"""
CPU_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: cpu, namespace: ns}
spec:
  schedulerName: gpuq-scheduler
  containers:
  - name: c
    resources: {requests: {cpu: "1"}}
"""


@pytest.mark.parametrize(("plugin", "phase"), [("capacity-card", "Rejected"), ("gpu-quota", "Bound")])
def test_admission_applies_the_rules_the_simulated_configuration_switches_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], plugin: str, phase: str
) -> None:
    """design.md Semantics 10: a pod in Volcano's default Queue (no capability) is refused only when
    capacity-card runs, as by `gpuq webhook --config` with the same file; never hidden by simulate."""
    config = scheduler_config(f"name: {plugin}")
    code, out = simulate(tmp_path, capsys, NODE, DEFAULT_QUEUE, CPU_POD, config=config)
    assert code == 0
    (result,) = out["pods"]
    assert result["phase"] == phase, result
    if phase == "Rejected":
        assert "default" in result["reason"] and "capability" in result["reason"]
    # what admission rejects is what the scheduler itself never places under that configuration
    code, out = simulate(tmp_path, capsys, NODE, DEFAULT_QUEUE, CPU_POD, admission=False, config=config)
    assert code == 0
    assert (out["pods"][0]["phase"] == "Bound") == (phase == "Bound")
