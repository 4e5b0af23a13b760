"""Gated pods (``spec.schedulingGates``) as every view shows them: ``gpuq simulate`` (JSON phase
``Gated``, the table, the HTML page), ``gpuq explain`` and ``kubectl gpuq pending`` / ``explain``, from
the scheduler's view and from what a namespace-scoped user reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq_k8s.cli import main as cli_main
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.kubectl import View, _explain, pending_rows
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.scheduler.simulate.live import Snapshot, manifests
from gpuq_k8s.scheduler.simulate.run import Simulation, prepare, run
from tests.testing.builders import MakeNode, MakePod
from tests.testing.simulate_text import pods_by_name, simulate

REASON = "waiting for scheduling gates: [example.com/a example.com/b]"
NODE = MakeNode("n1").alloc(cpu="4", memory="8Gi", pods="10")
GATED = (
    MakePod("gated", "ml")
    .req(cpu="1")
    .image("x")
    .created("2024-01-01T00:00:00Z")
    .scheduling_gates("example.com/a", "example.com/b")
)
TOO_BIG = MakePod("too-big", "ml").req(cpu="8").image("x").created("2024-01-01T00:00:01Z")
FITS = MakePod("fits", "ml").req(cpu="1").image("x").created("2024-01-01T00:00:02Z")


def _manifest(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([NODE.obj(), GATED.obj(), TOO_BIG.obj(), FITS.obj()]))
    return path


def test_simulate_reports_a_gated_pod_with_its_gates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = simulate(tmp_path, capsys, _manifest(tmp_path).read_text())
    pods = pods_by_name(out)
    assert pods["gated"]["phase"] == "Gated"
    assert pods["gated"]["reason"] == REASON and pods["gated"]["node"] is None
    assert pods["gated"]["outlook"] is None
    assert (pods["too-big"]["phase"], pods["fits"]["phase"]) == ("Pending", "Bound")
    # Never attempted: no FailedScheduling event for it.
    assert not [e for e in out["events"] if e["object"] == "Pod/ml/gated"]


def test_the_table_and_the_html_page_show_it_gated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _manifest(tmp_path)
    assert cli_main(["simulate", "-f", str(path)]) == 0
    table = capsys.readouterr().out
    line = next(line for line in table.splitlines() if " gated " in line)
    assert "Gated" in line and REASON in line
    assert cli_main(["simulate", "-f", str(path), "-o", "html"]) == 0
    page = capsys.readouterr().out
    assert '<p class="summary" id="summary">1/3 pods bound, 1 pending, 1 gated</p>' in page
    assert '<tr data-pod="ml/gated" data-outlook="gated">' in page
    assert '<span class="badge gated">gated</span>' in page


def test_explain_says_it_is_gated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _manifest(tmp_path)
    assert cli_main(["explain", "ml/gated", "-f", str(path), "-o", "json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert (explained["phase"], explained["reason"]) == ("Gated", REASON)
    assert cli_main(["explain", "ml/gated", "-f", str(path)]) == 0
    assert capsys.readouterr().out.startswith(f"Pod ml/gated: Gated ({REASON})")


def _snapshot(*, scoped: bool) -> Snapshot:
    pods: list[dict[str, Any]] = [GATED.obj(), TOO_BIG.obj()]
    if scoped:
        return Snapshot(objects={"Pod": pods}, forbidden=["Node"], namespace="ml")
    return Snapshot(objects={"Node": [NODE.obj()], "Pod": pods})


def _view(snap: Snapshot) -> View:
    sim = prepare(manifests(snap), SchedulerConfig.default(), default_registry(), explain=True)
    assert isinstance(sim, Simulation)
    run(sim)
    return View(snap, sim)


@pytest.mark.parametrize("scoped", [False, True], ids=["scheduler-view", "namespace-scoped"])
def test_kubectl_pending_lists_it_as_gated_without_a_position(scoped: bool) -> None:
    snap = _snapshot(scoped=scoped)
    view = View(snap, None) if scoped else _view(snap)
    rows = {r["name"]: r for r in pending_rows(view)}
    assert rows["gated"]["phase"] == "Gated" and rows["gated"]["reason"] == REASON
    assert rows["gated"]["position"] is None
    assert (rows["too-big"]["phase"], rows["too-big"]["position"], rows["too-big"]["of"]) == ("Pending", 1, 1)


@pytest.mark.parametrize("scoped", [False, True], ids=["scheduler-view", "namespace-scoped"])
def test_kubectl_explain_says_it_is_gated(scoped: bool, capsys: pytest.CaptureFixture[str]) -> None:
    snap = _snapshot(scoped=scoped)
    view = View(snap, None) if scoped else _view(snap)
    assert _explain(view, ("ml", "gated"), "json") == 0
    explained = json.loads(capsys.readouterr().out)
    assert (explained["phase"], explained["reason"], explained["outlook"]) == ("Gated", REASON, None)
