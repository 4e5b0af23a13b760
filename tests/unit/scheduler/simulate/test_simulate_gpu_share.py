"""``gpuq simulate`` with tensor-fusion pods (design.md Semantics 19): the GPU each shared-GPU pod is
given in the JSON report, the table and the HTML page, and each device's reason in ``--explain``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuq_k8s.cli import main
from tests.testing.paths import REPO_ROOT
from tests.testing.simulate_text import pods_by_name

NODE = (
    "apiVersion: v1\nkind: Node\nmetadata:\n  name: a100\n  labels:\n"
    "    nvidia.com/gpu.product: NVIDIA-A100\n    nvidia.com/gpu.memory: '81920'\n"
    "    nvidia.com/gpu.tflops: '100'\n"
    "status: {allocatable: {cpu: '32', memory: 64Gi, pods: '110', nvidia.com/gpu: '1'}}\n"
)
QUOTA = (
    "apiVersion: tensor-fusion.ai/v1\nkind: GPUResourceQuota\nmetadata: {name: q, namespace: ml}\n"
    "spec: {total: {maxWorkers: 10}}\n"
)


def _pod(name: str) -> str:
    return (
        f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: ml\n  annotations:\n"
        "    tensor-fusion.ai/tflops-request: '50'\n    tensor-fusion.ai/vram-request: 10Gi\n"
        "spec: {schedulerName: gpuq-scheduler, containers: [{name: c, resources: {requests: {cpu: '1'}}}]}\n"
    )


@pytest.fixture
def manifest(tmp_path: Path) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text("---\n".join([NODE, QUOTA, _pod("w-0"), _pod("w-1"), _pod("w-2")]))
    return str(path)


def test_the_report_shows_the_gpu_each_pod_shares(manifest: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", manifest, "-o", "json", "--explain=all"]) == 0
    pods = pods_by_name(json.loads(capsys.readouterr().out))
    assert {n: (p["node"], p.get("gpuIds")) for n, p in pods.items()} == {
        "w-0": ("a100", "a100-gpu-0"),
        "w-1": ("a100", "a100-gpu-0"),
        "w-2": (None, None),
    }
    assert pods["w-2"]["reason"].startswith(
        "0/1 nodes are available: 1 gpu-0 on a100: 0 TFLOPS left, 50 asked."
    )
    assert "gpu-0 on a100: 0 TFLOPS left, 50 asked" in pods["w-2"]["nodes"]["a100"]["filtered"]


def test_the_table_and_the_page_show_the_shares(manifest: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", manifest, "-o", "table"]) == 0
    table = capsys.readouterr().out
    assert "GPU shares" in table and table.count("a100-gpu-0") == 2
    assert main(["simulate", "-f", manifest, "-o", "html"]) == 0
    html = capsys.readouterr().out
    assert '<table id="gpu-shares">' in html and html.count("<td>a100-gpu-0</td>") == 2


def test_explain_names_the_gpu_and_each_device_reason(
    manifest: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", "ml/w-0", "-f", manifest]) == 0
    assert "Pod ml/w-0: Bound on a100, sharing GPU a100-gpu-0" in capsys.readouterr().out
    assert main(["explain", "ml/w-2", "-f", manifest]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "gpu-0 on a100: 0 TFLOPS left, 50 asked" in text, text


def test_the_gpu_share_example(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/gpu-share: the notebooks pack onto gpu-0, the trainer holds the other GPU whole, and
    serve-0 waits with each device's reason; nothing tensor-fusion lands on the CPU node."""
    assert main(["simulate", "-f", str(REPO_ROOT / "examples" / "gpu-share"), "-o", "json", "--explain"]) == 0
    pods = pods_by_name(json.loads(capsys.readouterr().out))
    assert {n: (p["node"], p.get("gpuIds")) for n, p in pods.items()} == {
        "notebook-a": ("gpu-1", "gpu-1-gpu-0"),
        "notebook-b": ("gpu-1", "gpu-1-gpu-0"),
        "trainer": ("gpu-1", None),
        "serve-0": (None, None),
    }
    assert pods["serve-0"]["nodes"]["gpu-1"]["filtered"] == (
        "gpu-0 on gpu-1: 20 TFLOPS left, 30 asked; 1 GPU(s) on gpu-1 held by whole-GPU pods"
    )
