"""``gpuq simulate`` with DRA (design.md "DRA devices", "gpuq simulate"): the worked example of
examples/dra through the CLI: ResourceClaimTemplates turned into claims as kube-controller-manager's
resource-claim-controller would, whole GPUs by selector and firstAvailable, MIG partitions over shared
counters, shares of a GPU by consumable capacity, a claim two pods share; the allocations in the
report (per pod and per claim) and the per-device reasons in ``--explain``."""

from __future__ import annotations

import pytest

from gpuq_k8s.cli import main
from tests.testing.paths import REPO_ROOT
from tests.testing.simulate_text import pods_by_name, simulate_explained

EXAMPLE = str(REPO_ROOT / "examples" / "dra")


def test_the_dra_example(capsys: pytest.CaptureFixture[str]) -> None:
    out = simulate_explained(capsys, "-f", EXAMPLE)
    pods = pods_by_name(out)
    devices = {name: [d["device"].rsplit("/", 1)[1] for d in p["devices"]] for name, p in pods.items()}
    assert {name: p["node"] for name, p in pods.items()} == {
        "eval-1g-0": "mig-1",
        "eval-1g-1": "mig-1",
        "eval-3g-0": "mig-1",
        "eval-3g-1": None,  # 1 + 1 + 3 of 7 slices used: 3 more do not fit
        "finetune": "whole-1",  # firstAvailable: its first choice, the H100
        "second-trainer": None,
        "trainer": None,  # the one H100 went to finetune; an A100 does not pass its selector
        "notebook-a": "shared-1",
        "notebook-b": "shared-1",  # the same claim, allocated once
        "serve-0": "shared-1",
        "serve-1": "shared-1",
        "serve-2": None,  # 10 + 30 + 30 of 80Gi used
    }
    assert devices["finetune"] == ["gpu-0"]
    assert devices["eval-3g-0"] == ["mig-3g-0"]
    assert devices["notebook-a"] == devices["notebook-b"] == ["shared-0"]
    assert pods["serve-0"]["devices"][0]["consumedCapacity"] == {"memory": "30Gi"}
    assert pods["trainer"]["reason"].startswith("0/3 nodes are available: 3 cannot allocate all claims.")
    assert "shared-0: 10Gi of memory left, 30Gi asked" in pods["serve-2"]["nodes"]["shared-1"]["filtered"]
    assert (
        "mig-3g-1: counter gpu-0/slices: 2 left, 3 needed" in pods["eval-3g-1"]["nodes"]["mig-1"]["filtered"]
    )
    assert "gpu-0: in use" in pods["trainer"]["nodes"]["whole-1"]["filtered"]
    assert "gpu-1: request gpu selector #0 false" in pods["trainer"]["nodes"]["whole-1"]["filtered"]
    claims = {c["name"]: c for c in out["resourceClaims"]}
    assert claims["notebook-gpu"]["reservedFor"] == ["notebook-a", "notebook-b"]
    assert claims["trainer-gpu"]["allocated"] is False
    assert claims["finetune-gpu"]["devices"] == [
        {"request": "gpu/h100", "device": "gpu.nvidia.com/whole-1/gpu-0"}
    ]


def test_the_table_and_the_page_show_the_allocations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", EXAMPLE, "-o", "table"]) == 0
    table = capsys.readouterr().out
    assert "ResourceClaims" in table
    assert "gpu.nvidia.com/shared-1/shared-0 (memory=10Gi)" in table
    assert "notebook-a, notebook-b" in table
    assert main(["simulate", "-f", EXAMPLE, "-o", "html"]) == 0
    page = capsys.readouterr().out
    assert '<td class="pod">ml/finetune-gpu</td><td>gpu.nvidia.com/whole-1/gpu-0' in page
    assert "gpu.nvidia.com/shared-1/shared-0 (memory 30Gi)" in page
