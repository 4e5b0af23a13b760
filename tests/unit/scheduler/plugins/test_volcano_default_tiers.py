"""Volcano's default ``volcano-scheduler.conf`` tiers with the plugins of this change (overcommit, drf,
nodeorder, binpack beside priority, gang and predicates) run together through ``gpuq simulate`` on
the heterogeneous example cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.testing.paths import REPO_ROOT
from tests.testing.simulate_text import pods_by_name, simulate_explained

EXAMPLE = REPO_ROOT / "examples" / "heterogeneous-cluster"

# Volcano's default tiers (pkg/scheduler/util.go DefaultSchedulerConf, plus the binpack its Helm chart's
# volcano-scheduler.conf adds) without conformance and proportion, with the actions gpuq runs today.
CONFIG = """\
actions: "enqueue, allocate"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: nodeorder
  - name: binpack
"""


def test_default_tiers_schedule_the_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "volcano-scheduler.conf"
    conf.write_text(CONFIG)
    out = simulate_explained(capsys, "-f", str(EXAMPLE), "--config", str(conf))
    pods = pods_by_name(out)
    bound = [p for p in pods.values() if p["phase"] == "Bound"]
    assert bound, "the example's pods are placed"
    for placed in bound:
        scores = placed["nodes"][placed["node"]]["scores"]
        # nodeorder's scorers (ImageLocality, weight 1 by Volcano's default, a member of its own) and binpack.
        assert set(scores) == {"nodeorder", "ImageLocality", "binpack"}, placed["name"]
        assert placed["nodes"][placed["node"]]["total"] == max(
            n["total"] for n in placed["nodes"].values() if n["filtered"] is None
        )
    assert {g["phase"] for g in out["podGroups"]} <= {"Inqueue", "Running"}
