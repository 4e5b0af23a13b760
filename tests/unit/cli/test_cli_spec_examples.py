"""Every worked example of capacity-card.md, capacity-scheduling.md and gpu-resource-quota.md, reproduced
through ``gpuq simulate -o json --explain`` with the default configuration (unless the example sets one).

The manifests live in ``examples/specs/`` and ``examples/gpu-resource-quota``; each file's header says
which spec section it reproduces.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuq_k8s.cli import main
from tests.testing.paths import REPO_ROOT
from tests.testing.simulate_text import pods_by_name, simulate_explained

EXAMPLES = REPO_ROOT / "examples"
CARD = EXAMPLES / "specs" / "capacity-card"
ELASTIC = EXAMPLES / "specs" / "capacity-scheduling"


def _queue(out: dict[str, Any], name: str) -> dict[str, Any]:
    return next(q for q in out["queues"] if q["name"] == name)


def _events(out: dict[str, Any], obj: str, reason: str) -> list[str]:
    return [e["message"] for e in out["events"] if e["object"] == obj and e["reason"] == reason]


# -- capacity-card.md -------------------------------------------------------------------------------


def test_capacity_card_example1_basic_quota(capsys: pytest.CaptureFixture[str]) -> None:
    """capacity-card.md Example 1: card.request A100: 4 <= quota 5 enqueues; all four tasks run."""
    out = simulate_explained(capsys, "-f", str(CARD / "example1-basic-quota.yaml"))
    pods = pods_by_name(out)
    assert {p["phase"] for p in pods.values()} == {"Bound"}
    assert {p["cardType"] for p in pods.values()} == {"NVIDIA-A100"}
    assert out["podGroups"] == [{"namespace": "ex1", "name": "training", "phase": "Running"}]
    queue = _queue(out, "ex1-team-a")
    assert queue["allocated"]["NVIDIA-A100"] == 4
    assert queue["capability"] == {"NVIDIA-A100": 5, "cpu": 100, "memory": 500 * 2**30}
    assert queue["inqueue"] == {}


def test_capacity_card_example2_multi_card_falls_back_when_preferred_quota_is_gone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """capacity-card.md Example 2: A100 first; once the A100 quota is exhausted, H100."""
    out = simulate_explained(capsys, "-f", str(CARD / "example2-multi-card.yaml"))
    pods = pods_by_name(out)
    placed = [
        (pods[f"flexible-training-{i}"]["node"], pods[f"flexible-training-{i}"]["cardType"]) for i in range(4)
    ]
    assert placed == [("ex2-a100-1", "NVIDIA-A100")] * 2 + [("ex2-h100-1", "NVIDIA-H100")] * 2
    third = pods["flexible-training-2"]["nodes"]
    assert third["ex2-a100-1"]["filtered"] == (
        "quota exceeded in Queue/ex2-team-a for NVIDIA-A100: requested 1, available 0, used 2, limit 2"
        " (waits for room: NVIDIA-A100 used 2 would have to drop to 1)"
    )
    # The ledger holds the concrete types, never the composite key (Semantics 1).
    assert _queue(out, "ex2-team-a")["allocated"] == {
        "NVIDIA-A100": 2,
        "NVIDIA-H100": 2,
        "cpu": 4,
        "memory": 16 * 2**30,
    }


def test_capacity_card_example3_sixteen_pods_share_four_a100_via_mps(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """capacity-card.md Example 3: 16 inference pods share 4 A100 as NVIDIA-A100/mps-80g*1/8."""
    out = simulate_explained(capsys, "-f", str(CARD / "example3-mps.yaml"))
    pods = pods_by_name(out)
    assert len(pods) == 16
    assert {(p["phase"], p["node"], p["cardType"]) for p in pods.values()} == {
        ("Bound", "ex3-mps-1", "NVIDIA-A100/mps-80g*1/8")
    }
    queue = _queue(out, "ex3-inference")
    assert queue["allocated"]["NVIDIA-A100/mps-80g*1/8"] == 16
    assert queue["capability"]["NVIDIA-A100/mps-80g*1/8"] == 32


def test_capacity_card_example4_node_order_scores_200_100_50(capsys: pytest.CaptureFixture[str]) -> None:
    """capacity-card.md Example 4: nodeOrderWeight 2.0 scores A100 200, H100 100, T4 50 in --explain."""
    config = str(EXAMPLES / "configs" / "node-order-weight-2.yaml")
    out = simulate_explained(capsys, "-f", str(CARD / "example4-node-order.yaml"), "--config", config)
    pods = pods_by_name(out)
    nodes = pods["multi-card-training-0"]["nodes"]
    assert {name: n["scores"].get("capacity-card") for name, n in nodes.items()} == {
        "ex4-a100-1": 200,
        "ex4-h100-1": 100,
        "ex4-t4-1": 50,
        "ex4-cpu-1": None,
    }
    assert nodes["ex4-cpu-1"]["filtered"] == "node(s) didn't match Pod's node affinity/selector"
    for node in nodes.values():
        assert node["total"] == pytest.approx(sum(node["scores"].values()))
    assert {p["node"] for p in pods.values()} == {"ex4-a100-1"}


def test_capacity_card_job_mode_7_of_8_enqueues_and_the_next_job_waits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """capacity-card.md "Job Mode": A100=5, H100=3, allocated 2+1, A100|H100: 4 -> 7 <= 8 enqueues."""
    out = simulate_explained(capsys, "-f", str(CARD / "job-mode-7-of-8.yaml"))
    phases = {g["name"]: g["phase"] for g in out["podGroups"]}
    assert phases == {"flexible": "Running", "one-more": "Pending"}
    pods = pods_by_name(out)
    assert all(pods[f"flexible-{i}"]["phase"] == "Bound" for i in range(4))
    refusals = _events(out, "PodGroup/jm/one-more", "InsufficientScalarQuota")
    # At its first enqueue the flexible job's 4 were reserved: 3 allocated + 4 inqueue = 7 of 8.
    assert refusals[0] == (
        "quota exceeded in Queue/jm-team for NVIDIA-A100|NVIDIA-H100: "
        "requested 2, available 1, used 7, limit 8"
        " (waits for room: NVIDIA-A100|NVIDIA-H100 used 7 would have to drop to 6)"
    )
    assert pods["one-more-0"]["reason"].startswith("PodGroup/jm/one-more is Pending: quota exceeded")


def test_capacity_card_job_mode_6_within_4_plus_4(capsys: pytest.CaptureFixture[str]) -> None:
    """capacity-card.md Considerations 4: A100|H100: 6 enqueues with A100: 4, H100: 4 (6 <= 4+4)."""
    out = simulate_explained(capsys, "-f", str(CARD / "job-mode-6-of-4-plus-4.yaml"))
    assert out["podGroups"][0]["phase"] == "Running"
    types = sorted(p["cardType"] for p in out["pods"])
    assert types == ["NVIDIA-A100"] * 4 + ["NVIDIA-H100"] * 2


def test_semantics1_card_type_is_resolved_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    """design.md Semantics 1: an A|H task never lands on an A node whose A quota is gone."""
    out = simulate_explained(capsys, "-f", str(CARD / "semantics1-per-node-type.yaml"))
    pods = pods_by_name(out)
    assert (pods["task-0"]["node"], pods["task-0"]["cardType"]) == ("s1-a100-1", "NVIDIA-A100")
    assert (pods["task-1"]["node"], pods["task-1"]["cardType"]) == ("s1-h100-1", "NVIDIA-H100")
    assert pods["task-2"]["phase"] == "Pending"
    assert pods["task-2"]["reason"].startswith(
        "0/2 nodes are available: 1 quota exceeded in Queue/s1-team for NVIDIA-A100: "
        "requested 1, available 0,"
    )
    assert "preemption: no node can be helped by preemption." in pods["task-2"]["reason"]
    assert pods["task-2"]["nodes"]["s1-h100-1"]["filtered"].startswith(
        "quota exceeded in Queue/s1-team for NVIDIA-H100"
    )
    assert _events(out, "Pod/s1/task-2", "InsufficientScalarQuota")


def test_heterogeneous_cluster_runs_with_the_default_config(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first command: every plugin, A100/H100/T4/MIG/MPS nodes, two queues, gangs."""
    out = simulate_explained(capsys, "-f", str(EXAMPLES / "heterogeneous-cluster"))
    pods = pods_by_name(out)
    assert [pods[f"finetune-{i}"]["cardType"] for i in range(4)] == ["NVIDIA-A100"] * 2 + ["NVIDIA-H100"] * 2
    assert pods["notebook-3"]["cardType"] == "NVIDIA-A100/mig-1g.10gb-mixed"
    assert pods["notebook-4"]["phase"] == "Pending"
    assert {pods[f"serving-{i}"]["cardType"] for i in range(8)} == {"NVIDIA-A100/mps-80g*1/8"}
    assert [pods[f"batch-{i}"]["cardType"] for i in range(3)] == ["NVIDIA-H100", "NVIDIA-H100", "NVIDIA-T4"]
    assert pods["big-train-0"]["reason"].startswith("PodGroup/team-b/big-train is Pending: quota exceeded")
    assert {q["name"] for q in out["queues"]} == {"team-a", "team-b"}


# -- capacity-scheduling.md -------------------------------------------------------------------------


def test_elastic_story2_reclaims_from_the_quota_over_its_min(capsys: pytest.CaptureFixture[str]) -> None:
    """capacity-scheduling.md Story 2: B.used + 1 <= min -> a pod of A (over min) is the victim, not C."""
    out = simulate_explained(capsys, "-f", str(ELASTIC / "story2-borrowers.yaml"))
    pods = pods_by_name(out)
    preempted = {(p["namespace"], p["name"]) for p in out["pods"] if p["phase"] == "Preempted"}
    assert preempted == {("user-a", "a1")}
    assert pods["b-new"]["phase"] == "Bound"
    used = {q["namespace"]: q["used"]["nvidia.com/gpu"] for q in out["elasticQuotas"]}
    assert used == {"user-a": 2, "user-b": 4, "user-c": 3}


def test_elastic_story2_preempts_within_the_namespace_over_its_min(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """capacity-scheduling.md Story 2: B.used + 1 > min -> PodA (B's own lower-priority pod) is the victim."""
    out = simulate_explained(capsys, "-f", str(ELASTIC / "story2-same-namespace.yaml"))
    pods = pods_by_name(out)
    assert pods["pod-a"]["phase"] == "Preempted"
    assert pods["pod-a"]["reason"] == "preempted by Pod/sn-user-b/pod-c"
    assert pods["pod-c"]["phase"] == "Bound"
    assert all(p["phase"] == "Bound" for n, p in pods.items() if n not in ("pod-a",))


def test_elastic_namespace_example_high_priority_pod_stays_pending(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """capacity-scheduling.md "Cross-namespace vs. single-namespace preemption": np-quota2's pod waits."""
    out = simulate_explained(capsys, "-f", str(ELASTIC / "namespace-preemption.yaml"))
    pods = {(p["namespace"], p["name"]): p for p in out["pods"]}
    assert pods[("np-quota1", "nginx")]["phase"] == "Bound"
    waiting = pods[("np-quota2", "nginx")]
    assert waiting["phase"] == "Pending"
    assert "sum of all ElasticQuota min" in waiting["reason"]
    assert "no eligible victims on any node (SameNamespace)" in waiting["reason"]
    assert not any(p["phase"] == "Preempted" for p in pods.values())


def test_elastic_cross_node_preemption_is_not_supported(capsys: pytest.CaptureFixture[str]) -> None:
    """capacity-scheduling.md Known Limitations: preempting on one node alone cannot help; nothing evicted."""
    out = simulate_explained(capsys, "-f", str(ELASTIC / "cross-node-limitation.yaml"))
    pods = {(p["namespace"], p["name"]): p for p in out["pods"]}
    assert [p["phase"] for p in pods.values()] == ["Bound", "Bound", "Pending"]
    assert "would not make room within the node and the elastic quotas" in pods[("quota2", "nginx")]["reason"]


# -- gpu-resource-quota.md --------------------------------------------------------------------------


@pytest.fixture
def gpu_quota(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    return simulate_explained(capsys, "-f", str(EXAMPLES / "gpu-resource-quota"))


def test_gpu_quota_refuses_the_worker_over_max_workers(gpu_quota: dict[str, Any]) -> None:
    """gpu-resource-quota.md "Quota Validation Workflow": total.maxWorkers 4 refuses the fifth worker."""
    pods = pods_by_name(gpu_quota)
    assert [pods[f"worker-{i}"]["phase"] for i in range(1, 6)] == ["Bound"] * 4 + ["Pending"]
    assert pods["worker-5"]["reason"] == (
        "0/2 nodes are available: quota exceeded in namespace ml (GPUResourceQuota/ml/ml-quota) for "
        "total.maxWorkers: requested 1, available 0, used 4, limit 4"
        " (waits for room: total.maxWorkers used 4 would have to drop to 3)."
    )


def test_gpu_quota_refuses_over_total_tflops(gpu_quota: dict[str, Any]) -> None:
    """gpu-resource-quota.md: 300 + 300 TFLOPS > total.requests.tflops 500."""
    reason = pods_by_name(gpu_quota)["exp-2"]["reason"]
    assert "for total.requests.tflops: requested 300, available 200, used 300, limit 500" in reason
    assert pods_by_name(gpu_quota)["exp-2"]["outlook"] == "wait"


def test_gpu_quota_single_limit_is_unresolvable(gpu_quota: dict[str, Any]) -> None:
    """gpu-resource-quota.md "Check Single Limits": 4 GPUs > single.maxGPUCount 2, not preemptable."""
    pods = pods_by_name(gpu_quota)
    assert pods["exp-wide"]["phase"] == "Pending"
    assert "for single.maxGPUCount: requested 4, available 2, limit 2" in pods["exp-wide"]["reason"]
    # A per-workload limit: no pod leaving helps; the limit or the request has to change.
    assert pods["exp-wide"]["outlook"] == "never"
    assert (
        "can never fit under the current quota: single.maxGPUCount limit 2 would have to be at least 4"
        in (pods["exp-wide"]["reason"])
    )
    assert "preemption" not in pods["exp-wide"]["reason"]


def test_gpu_quota_status_available_percent_and_conditions(gpu_quota: dict[str, Any]) -> None:
    """gpu-resource-quota.md "Status Reporting Structure", Semantics 5 (worker-3 charged 312 TFLOPS, 80Gi)."""
    status = {q["namespace"]: q["status"] for q in gpu_quota["gpuResourceQuotas"]}
    ml = status["ml"]
    assert ml["used"]["requests"] == {"tflops": "812", "vram": "160Gi"}
    assert ml["used"]["workers"] == 4
    assert ml["availablePercent"] == {
        "requests.tflops": "18.80",
        "requests.vram": "20.00",
        "limits.tflops": "59.40",
        "limits.vram": "60.00",
        "workers": "0.00",
    }
    conditions = {c["type"]: (c["status"], c["reason"]) for c in ml["conditions"]}
    assert conditions == {
        "Ready": ("True", "QuotaActive"),
        "AlertThresholdReached": ("True", "ThresholdReached"),
    }
    assert status["research"]["availablePercent"] == {"requests.tflops": "40.00", "requests.vram": "100.00"}
    assert _events(gpu_quota, "GPUResourceQuota/ml/ml-quota", "QuotaAlertThreshold") == [
        "Usage of requests.tflops, workers exceeded the 80% alert threshold"
    ]


@pytest.mark.parametrize(
    "directory",
    sorted(str(p) for p in EXAMPLES.iterdir() if p.is_dir() and p.name not in ("configs", "specs"))
    + sorted(str(p) for p in (EXAMPLES / "specs").rglob("*.yaml") if "example4" not in p.name),
)
def test_every_example_runs_with_the_default_config(
    directory: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "-f", directory, "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any(p["phase"] == "Bound" for p in out["pods"])
