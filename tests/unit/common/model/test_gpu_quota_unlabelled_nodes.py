"""A GPUResourceQuota holds on GPU nodes whose card type cannot be named (no product label).

Found by fuzzing ``gpuq simulate``: a pod asking ``nvidia.com/gpu`` on a node without the
``nvidia.com/gpu.product`` label was never charged, so ``maxWorkers: 0`` and a 1 TFLOPS total did not
stop it (design.md Semantics 5: each pod is one worker; an amount gpuq cannot derive refuses the node).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuq_k8s.common.model.cards.discovery import discover_cards, is_gpu_resource
from gpuq_k8s.common.model.gpu_quota.card_share import UNIDENTIFIED, with_unidentified_cards
from tests.testing.builders import GPU, MakeNode
from tests.testing.simulate_text import pods_by_name, simulate

NODE = """
apiVersion: v1
kind: Node
metadata: {name: gpu-nolabel, labels: %s}
status: {allocatable: {cpu: "8", memory: 32Gi, pods: "110", nvidia.com/gpu: "4"}}
"""

QUOTA = """
---
apiVersion: tensor-fusion.ai/v1
kind: GPUResourceQuota
metadata: {name: q, namespace: ml}
spec:
  total: %s
"""

POD = """
---
apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: ml, creationTimestamp: "2024-01-01T00:00:0%sZ"}
spec:
  schedulerName: gpuq-scheduler
  containers: [{name: c, resources: {requests: {cpu: "1", nvidia.com/gpu: "1"}}}]
"""


def test_workers_are_counted_on_an_unlabelled_gpu_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = NODE % "{}" + QUOTA % "{maxWorkers: 1}" + POD % ("a", 1) + POD % ("b", 2)
    out = simulate(tmp_path, capsys, text)
    pods = pods_by_name(out)
    assert pods["a"]["phase"] == "Bound" and pods["b"]["phase"] == "Pending"
    assert "total.maxWorkers" in pods["b"]["reason"]
    assert out["gpuResourceQuotas"][0]["status"]["used"]["workers"] == 1


def test_a_limited_amount_gpuq_cannot_derive_refuses_the_node_with_the_label_to_add(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = NODE % "{}" + QUOTA % "{requests: {tflops: '100', vram: 100Gi}}" + POD % ("a", 1)
    pods = pods_by_name(simulate(tmp_path, capsys, text))
    assert pods["a"]["phase"] == "Pending"
    assert "Node/gpu-nolabel: nvidia.com/gpu.tflops" in pods["a"]["reason"]


def test_tflops_and_memory_labels_are_enough_without_a_product(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    labels = '{nvidia.com/gpu.tflops: "50", nvidia.com/gpu.memory: "40960"}'
    text = NODE % labels + QUOTA % "{requests: {tflops: '120', vram: 100Gi}}" + POD % ("a", 1)
    text += POD % ("b", 2) + POD % ("c", 3)
    out = simulate(tmp_path, capsys, text)
    pods = pods_by_name(out)
    assert [pods[p]["phase"] for p in "abc"] == ["Bound", "Bound", "Pending"]  # 3 x 50 > 120 TFLOPS
    used = out["gpuResourceQuotas"][0]["status"]["used"]
    assert used["requests"] == {"tflops": "100", "vram": "80Gi"} and used["workers"] == 2


def test_only_unnamed_gpu_resources_get_a_nameless_card_type() -> None:
    assert is_gpu_resource("nvidia.com/gpu") and is_gpu_resource("amd.com/gpu")
    assert is_gpu_resource("nvidia.com/gpu.shared") and is_gpu_resource("nvidia.com/mig-1g.5gb")
    assert not is_gpu_resource("cpu") and not is_gpu_resource("example.com/fpga")
    node = (
        MakeNode("n")
        .product("NVIDIA-A100")
        .alloc({GPU: "8", "amd.com/gpu": "2", "example.com/fpga": "1"})
        .info()
    )
    cards = with_unidentified_cards(node, discover_cards(node))
    assert [(c.name, c.resource, c.count) for c in cards.cards] == [
        ("NVIDIA-A100", "nvidia.com/gpu", 8),
        (f"amd.com/gpu {UNIDENTIFIED}", "amd.com/gpu", 2),
    ]
