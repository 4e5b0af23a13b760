"""A pending pod's outlook (common/model/outlook.py): "can never fit under the current quota/cluster"
versus "waits for room", naming the number that would have to change, in the model, in the
scheduler's messages and in ``gpuq simulate``'s report."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuq_k8s.common.model.outlook import (
    NEVER,
    WAIT,
    absent_card_outlook,
    annotation_outlook,
    capacity_outlook,
    no_card_node_outlook,
    outlook_of,
    quota_outlook,
    with_outlook,
)
from gpuq_k8s.common.model.quota_exceeded import BelowMinimum, QuotaExceeded
from gpuq_k8s.common.model.refusal import Refusal
from tests.testing.builders import MakeNode, MakePod
from tests.testing.paths import REPO_ROOT
from tests.testing.simulate_text import pods_by_name, simulate, simulate_explained

EXAMPLE = REPO_ROOT / "examples" / "heterogeneous-cluster"


def test_over_the_limit_itself_can_never_fit_and_names_the_limit() -> None:
    outlook = quota_outlook("NVIDIA-H100", "8", "4", "0")
    assert outlook is not None and outlook.kind == NEVER
    assert (
        str(outlook)
        == "can never fit under the current quota: NVIDIA-H100 limit 4 would have to be at least 8"
    )


def test_within_the_limit_waits_and_names_the_usage_to_free() -> None:
    outlook = quota_outlook("cpu", "1500m", "4", "3")
    assert outlook is not None and outlook.kind == WAIT
    assert str(outlook) == "waits for room: cpu used 3 would have to drop to 2500m"
    memory = quota_outlook("memory", "2Gi", "8Gi", "7Gi")
    assert str(memory) == "waits for room: memory used 7Gi would have to drop to 6Gi"


def test_a_per_workload_limit_never_fits_and_unreadable_amounts_say_nothing() -> None:
    # No usage quoted: a per-workload limit, which no pod leaving can help.
    single = quota_outlook("single.maxGPUCount", "4", "4", None)
    assert single is not None and single.never
    assert quota_outlook("total.requests.tflops", "a lot", "10", "1") is None


def test_quota_exceeded_carries_its_outlook_in_its_message() -> None:
    error = QuotaExceeded("NVIDIA-H100", "8", "0", "4", scope="Queue/team-b", used="4")
    assert str(error) == (
        "quota exceeded in Queue/team-b for NVIDIA-H100: requested 8, available 0, used 4, limit 4 "
        "(can never fit under the current quota: NVIDIA-H100 limit 4 would have to be at least 8)"
    )
    assert outlook_of(str(error)) == NEVER


def test_cluster_capacity_outlook() -> None:
    never = capacity_outlook("nvidia.com/gpu", 8000, 4000, 0)
    assert never.never
    assert (
        str(never) == "can never fit under the current cluster: no node has 8 nvidia.com/gpu allocatable "
        "(the largest has 4)"
    )
    wait = capacity_outlook("memory", 4 * 2**30, 8 * 2**30, 2**30)
    assert str(wait) == "waits for room: the most memory free on one node is 1Gi, 4Gi asked"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (None, None),
        ("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.", None),
        ("x (can never fit under the current quota: y)", NEVER),
        ("x (waits for room: y)", WAIT),
        # One card type can never fit, another waits for room: room can still come.
        ("a (can never fit under the current quota: b); c (waits for room: d)", WAIT),
    ],
)
def test_outlook_of_a_message(message: str | None, expected: str | None) -> None:
    assert outlook_of(message) == expected


def test_simulate_separates_never_from_waiting_in_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/heterogeneous-cluster: big-train asks 8 H100 of team-b's quota of 4 (never);
    notebook-4 waits for one of team-a's 4 MIG slices to be freed."""
    pods = pods_by_name(simulate_explained(capsys, "-f", str(EXAMPLE)))
    big = pods["big-train-0"]
    assert big["outlook"] == NEVER
    assert "NVIDIA-H100 limit 4 would have to be at least 8" in big["reason"]
    notebook = pods["notebook-4"]
    assert notebook["outlook"] == WAIT
    assert (
        "waits for room: NVIDIA-A100/mig-1g.10gb-mixed used 4 would have to drop to 3" in notebook["reason"]
    )
    assert all(p["outlook"] is None for p in pods.values() if p["phase"] == "Bound")


def test_more_than_any_node_has_can_never_fit_a_full_node_waits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = [
        MakeNode("small").alloc(cpu="4", memory="8Gi", pods="10").obj(),
        MakeNode("big").alloc(cpu="8", memory="16Gi", pods="10").obj(),
        MakePod("running").req(cpu="6").obj() | {},
        MakePod("huge").req(cpu="16").obj(),
        MakePod("later").req(cpu="6").obj(),
    ]
    docs[2]["spec"]["nodeName"] = "big"
    pods = pods_by_name(simulate(tmp_path, capsys, yaml.safe_dump_all(docs)))
    assert pods["huge"]["outlook"] == NEVER
    assert (
        "0/2 nodes are available: 2 Insufficient cpu. "
        "Can never fit under the current cluster: no node has 16 cpu allocatable (the largest has 8)."
    ) in pods["huge"]["reason"]
    assert pods["later"]["outlook"] == WAIT
    assert "Waits for room: the most cpu free on one node is 2, 6 asked." in pods["later"]["reason"]


def test_below_a_minimum_can_never_fit() -> None:
    """gpu-resource-quota ``single.min``: no pod leaving raises a request (it was null before)."""
    error = BelowMinimum("single.min.vram", "1Gi", "8Gi", "8Gi", scope="namespace ml", unresolvable=True)
    assert str(error) == (
        "request below the minimum in namespace ml for single.min.vram: requested 1Gi, minimum 8Gi "
        "(can never fit under the current quota: single.min.vram minimum 8Gi would have to be at most 1Gi)"
    )
    assert outlook_of(str(error)) == NEVER


def test_a_malformed_annotation_of_the_pod_can_never_fit() -> None:
    text = with_outlook(
        "Pod/ml/p: tensor-fusion.ai/gpu-count: invalid value 'two'",
        annotation_outlook("tensor-fusion.ai/gpu-count"),
    )
    assert text.endswith(
        "(can never fit under the current annotations: tensor-fusion.ai/gpu-count would have to be corrected)"
    )
    assert outlook_of(text) == NEVER


def test_a_card_type_no_node_offers_waits_for_a_node_unless_the_cluster_is_not_autoscaled() -> None:
    waits = absent_card_outlook("NVIDIA-H100")
    assert str(waits) == "waits for a node offering NVIDIA-H100" and not waits.never
    assert outlook_of(f"x ({waits})") == WAIT
    never = no_card_node_outlook("NVIDIA-H100")
    assert str(never) == "can never fit under the current cluster: no node offers NVIDIA-H100"
    assert outlook_of(f"x ({never})") == NEVER


def test_a_never_refusal_is_one_refusal_whatever_the_usage_it_quotes() -> None:
    """The heterogeneous example's big-train: 8 H100 of a limit of 4, before and after team-b's other
    pods took its H100: one refusal (one event), not one per figure."""
    before = Refusal(QuotaExceeded("NVIDIA-H100", "8", "4", "4", scope="Queue/team-b", used="0"))
    after = Refusal(QuotaExceeded("NVIDIA-H100", "8", "0", "4", scope="Queue/team-b", used="4"))
    assert before.message != after.message and before.identity == after.identity
    waiting = Refusal(QuotaExceeded("NVIDIA-H100", "2", "0", "4", scope="Queue/team-b", used="4"))
    later = Refusal(QuotaExceeded("NVIDIA-H100", "2", "1", "4", scope="Queue/team-b", used="3"))
    assert waiting.identity != later.identity  # waiting: the figures are the news


def test_the_example_reports_big_train_once(capsys: pytest.CaptureFixture[str]) -> None:
    out = simulate_explained(capsys, "-f", str(EXAMPLE))
    refusals = [e for e in out["events"] if e["object"] == "PodGroup/team-b/big-train"]
    assert len(refusals) == 1 and refusals[0]["reason"] == "InsufficientScalarQuota"
