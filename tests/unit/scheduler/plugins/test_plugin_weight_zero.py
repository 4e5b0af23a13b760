"""Semantics 11: a plugin weight of 0 (``crossQuotaWeight``, ``resourceStrategyFitWeight``) switches that
plugin's scoring off, as Volcano registers no node-order function then. The scheduler does not call the
plugin at Score, so ``--explain`` lists no score for it; crossquota's predicate still filters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.testing.config import config_text
from tests.testing.paths import REPO_ROOT
from tests.testing.simulate_text import pods_by_name, simulate_explained

EXAMPLES = REPO_ROOT / "examples"


def config(cq: int, rsf: int) -> str:
    """Volcano's format: crossquota and resource-strategy-fit with the given plugin weights."""
    crossquota = {
        "gpu-resource-names": "nvidia.com/gpu",
        "quota-resources": "cpu,memory",
        "crossQuotaWeight": cq,
    }
    strategy = {
        "resourceStrategyFitWeight": rsf,
        "resources": {"cpu": {"type": "MostAllocated", "weight": 1}},
    }
    return config_text(
        "priority",
        "predicates, crossquota, resource-strategy-fit",
        arguments={"crossquota": crossquota, "resource-strategy-fit": strategy},
    )


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], cq: int, rsf: int) -> dict[str, Any]:
    path = tmp_path / f"config-{cq}-{rsf}.yaml"
    path.write_text(config(cq, rsf))
    return simulate_explained(capsys, "-f", str(EXAMPLES / "crossquota-gpu-node"), "--config", str(path))


def _scored_by(out: dict[str, Any]) -> set[str]:
    return {
        plugin
        for pod in out["pods"]
        for node in (pod.get("nodes") or {}).values()
        for plugin in node["scores"]
    }


@pytest.mark.parametrize(
    ("cq", "rsf", "scoring"),
    [
        (10, 10, {"crossquota", "resource-strategy-fit"}),
        (0, 10, {"resource-strategy-fit"}),
        (10, 0, {"crossquota"}),
        (0, 0, set()),
    ],
)
def test_weight_zero_leaves_the_plugin_out_of_scoring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cq: int, rsf: int, scoring: set[str]
) -> None:
    out = _run(tmp_path, capsys, cq, rsf)
    assert _scored_by(out) == scoring
    for pod in out["pods"]:
        for node in (pod.get("nodes") or {}).values():
            assert node["total"] == pytest.approx(sum(node["scores"].values()))


def test_crossquota_weight_zero_keeps_its_predicate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """crossquota.md "Predicate": 28 + 6 > 32 still rejects gpu-c with scoring switched off."""
    pods = pods_by_name(_run(tmp_path, capsys, 0, 0))
    assert pods["big-job"]["nodes"]["gpu-c"]["filtered"] == "cpu quota exceeded: required=6 used=28 quota=32"
    assert pods["huge-job"]["phase"] == "Pending"
    assert pods["huge-job"]["reason"].startswith(
        # The predicate's numbers (crossquota.md "Predicate Function"): 14 of gpu-c's 32 used.
        "0/3 nodes are available: 1 cpu quota exceeded: required=40 used=14 quota=32, 2 Insufficient cpu."
    )
    # with no plugin scoring, equal totals go to the feasible node whose name sorts first
    nodes = pods["batch-job"]["nodes"]
    assert all(n["total"] == 0 and n["scores"] == {} for n in nodes.values() if n["filtered"] is None)
    assert pods["batch-job"]["node"] == min(name for name, n in nodes.items() if n["filtered"] is None)
