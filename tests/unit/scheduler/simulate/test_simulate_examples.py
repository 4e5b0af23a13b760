"""Worked examples of the specs, reproduced through ``gpuq simulate -o json --explain`` (the CLI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuq_k8s.cli import main
from tests.testing.paths import REPO_ROOT
from tests.testing.simulate_text import pods_by_name, simulate_explained

ROOT = REPO_ROOT
EXAMPLES = ROOT / "examples"
NO_CARDS = str(EXAMPLES / "configs" / "no-cards.yaml")


def test_capacity_scheduling_story1_borrowing_and_preemption(capsys: pytest.CaptureFixture[str]) -> None:
    """capacity-scheduling.md Story 1: B reclaims its min by preempting one 2-GPU pod of A (6 -> 4)."""
    out = simulate_explained(capsys, "-f", str(EXAMPLES / "elastic-quota-preemption"), "--config", NO_CARDS)
    pods = pods_by_name(out)
    assert pods["a3"]["phase"] == "Preempted"
    assert pods["b-train"] == pods["b-train"] | {"phase": "Bound", "node": "gpu-2"}
    assert pods["b-extra"]["phase"] == "Pending"
    assert "no eligible victims" in pods["b-extra"]["reason"]
    used = {q["namespace"]: q["used"]["nvidia.com/gpu"] for q in out["elasticQuotas"]}
    assert used == {"user-a": 4, "user-b": 6}
    assert {
        "object": "Pod/user-a/a3",
        "type": "Normal",
        "reason": "Preempted",
        "message": "Preempted by user-b/b-train on node gpu-2",
    } in out["events"]


def test_crossquota_worked_examples(capsys: pytest.CaptureFixture[str]) -> None:
    """crossquota.md: Most-Allocated 8.64, Least-Allocated 6.25, Predicate 28 + 6 > 32 rejects."""
    out = simulate_explained(capsys, "-f", str(EXAMPLES / "crossquota-gpu-node"), "--config", NO_CARDS)
    pods = pods_by_name(out)
    assert pods["batch-job"]["nodes"]["gpu-a"]["scores"]["crossquota"] == pytest.approx(8.64, abs=0.005)
    assert pods["web-service"]["nodes"]["gpu-b"]["scores"]["crossquota"] == pytest.approx(6.25)
    assert pods["web-service"]["node"] == "gpu-b"
    assert pods["big-job"]["nodes"]["gpu-c"]["filtered"] == "cpu quota exceeded: required=6 used=32 quota=32"
    assert pods["huge-job"]["phase"] == "Pending"
    assert pods["huge-job"]["reason"].startswith(
        # The predicate's numbers (crossquota.md "Predicate Function"): 12 of gpu-c's 32 used.
        "0/3 nodes are available: 1 cpu quota exceeded: required=40 used=12 quota=32, 2 Insufficient cpu."
    )
    for node in pods["batch-job"]["nodes"].values():
        assert node["total"] == pytest.approx(sum(node["scores"].values()))


def test_resource_strategy_fit_packs_gpu_and_spreads_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    """resource-strategy-fit.md Story 1: GPU workers aggregate, the CPU master spreads."""
    out = simulate_explained(
        capsys,
        "-f",
        str(EXAMPLES / "resource-strategy-fit"),
        "--config",
        str(EXAMPLES / "configs" / "strategy-fit.yaml"),
    )
    pods = pods_by_name(out)
    assert pods["worker-0"]["node"] == pods["worker-1"]["node"] == "gpu-2"
    assert pods["master-0"]["node"] == "cpu-2"
    scores = pods["worker-0"]["nodes"]
    # sum(w*s)/sum(w) * 100 * 10: gpu MostAllocated (4+1)/8 (w2), cpu LeastAllocated (32-2)/32 (w1).
    expected = (2 * 5 / 8 + 1 * 30 / 32) / 3 * 100 * 10
    assert scores["gpu-2"]["scores"]["resource-strategy-fit"] == pytest.approx(expected, abs=1e-5)
    assert scores["cpu-1"]["filtered"] == "Insufficient nvidia.com/gpu"


def test_same_input_same_output(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("-f", str(EXAMPLES / "crossquota-gpu-node"), "--config", NO_CARDS)
    assert simulate_explained(capsys, *args) == simulate_explained(capsys, *args)


@pytest.mark.parametrize(
    ("documents", "expected"),
    [
        (
            "kind: Pod\nmetadata: {name: p}\n"
            "spec: {containers: [{name: c, resources: {requests: {cpu: lots}}}]}\n",
            ["requests[cpu]: invalid value 'lots'"],
        ),
        # kubectl: strict decoding error: unknown field "spec.schedulerNmae"
        (
            "kind: Pod\nmetadata: {name: p}\n"
            "spec: {schedulerNmae: gpuq-scheduler, containers: [{name: c}]}\n",
            ["Pod/default/p: spec.schedulerNmae: unknown field"],
        ),
        (
            "kind: Node\nmetadata: {name: n}\n---\nkind: Node\nmetadata: {name: n}\n",
            ["Node/n is defined twice"],
        ),
        (
            "kind: Pod\nmetadata: {name: p}\nspec:\n"
            "  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoreDuringExecution: {}}}\n"
            "  containers: [{name: c}]\n---\nkind: Queue\nmetadata: {name: q}\nspec: {weight: -1}\n",
            ["requiredDuringSchedulingIgnoreDuringExecution", "Queue/q"],
        ),
        ("kind: Pod\nmetadata: {name: p}\n  bad: [\n", ["invalid YAML"]),
    ],
)
def test_invalid_input_one_line_per_problem_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], documents: str, expected: list[str]
) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(documents)
    assert main(["simulate", "-f", str(path), "--config", NO_CARDS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == len(expected)
    for line, fragment in zip(err, expected, strict=True):
        assert line.startswith("error: ")
        assert fragment in line


def test_invalid_config_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "conf.yaml"
    conf.write_text('actions: "allocate, shuffle"\ntiers: [{plugins: [{name: predicates}]}]\n')
    assert main(["simulate", "-f", str(EXAMPLES / "crossquota-gpu-node"), "--config", str(conf)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "actions: invalid value 'shuffle'" in err[0]


def test_explain_one_pod_and_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["-f", str(EXAMPLES / "crossquota-gpu-node"), "--config", NO_CARDS]
    assert main(["explain", "batch/web-service", *args]) == 0
    text = capsys.readouterr().out
    assert "gpu-b" in text and "6.25" in text
    assert main(["simulate", *args]) == 0
    assert "pods bound" in capsys.readouterr().out
    assert main(["explain", "batch/nope", *args]) == 2
