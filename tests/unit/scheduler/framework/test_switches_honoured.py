"""Volcano's switches are honoured by the framework, per extension point (scheduler/framework/session.py):
a plugin whose switch for a point is false takes no part in it, whatever the plugin is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.testing.builders import MakeNode, MakePod, MakePodGroup
from tests.testing.paths import REPO_ROOT
from tests.testing.simulate_text import pods_by_name, simulate_explained
from tests.testing.volcano_scenarios import bound, simulate

EXAMPLES = REPO_ROOT / "examples"


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], **switches: bool) -> dict[str, Any]:
    crossquota = {
        "name": "crossquota",
        "arguments": {"gpu-resource-names": "nvidia.com/gpu", "quota-resources": "cpu,memory"},
        **switches,
    }
    config = {
        "actions": "enqueue, allocate",
        "tiers": [{"plugins": [{"name": "priority"}]}, {"plugins": [{"name": "predicates"}, crossquota]}],
    }
    path = tmp_path / "conf.yaml"
    path.write_text(yaml.safe_dump(config))
    return simulate_explained(capsys, "-f", str(EXAMPLES / "crossquota-gpu-node"), "--config", str(path))


def _scored_by(out: dict[str, Any]) -> set[str]:
    return {p for pod in out["pods"] for node in (pod.get("nodes") or {}).values() for p in node["scores"]}


def test_both_switches_on_filters_and_scores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(tmp_path, capsys)
    assert _scored_by(out) == {"crossquota"}
    assert (
        pods_by_name(out)["big-job"]["nodes"]["gpu-c"]["filtered"]
        == "cpu quota exceeded: required=6 used=32 quota=32"
    )


def test_crossquota_with_both_switches_off_neither_filters_nor_scores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's example: crossquota with enablePredicate and enableNodeOrder false used to filter
    and score all the same."""
    out = _run(tmp_path, capsys, enablePredicate=False, enableNodeOrder=False)
    assert _scored_by(out) == set()
    nodes = pods_by_name(out)["big-job"]["nodes"]
    assert "quota exceeded" not in (nodes["gpu-c"]["filtered"] or "")
    assert all(
        "quota exceeded" not in (node["filtered"] or "")
        for pod in out["pods"]
        for node in (pod.get("nodes") or {}).values()
    )


def test_node_order_off_keeps_the_predicate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(tmp_path, capsys, enableNodeOrder=False)
    assert _scored_by(out) == set()
    assert (
        pods_by_name(out)["big-job"]["nodes"]["gpu-c"]["filtered"]
        == "cpu quota exceeded: required=6 used=28 quota=32"
    )


def test_predicate_off_keeps_the_score(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(tmp_path, capsys, enablePredicate=False)
    assert _scored_by(out) == {"crossquota"}
    assert all(
        "quota exceeded" not in (node["filtered"] or "")
        for pod in out["pods"]
        for node in (pod.get("nodes") or {}).values()
    )


def _card_phases(tmp_path: Path, capsys: pytest.CaptureFixture[str], **switches: bool) -> dict[str, str]:
    config = {
        "actions": "enqueue, allocate",
        "tiers": [
            {"plugins": [{"name": "priority"}, {"name": "gang"}]},
            {"plugins": [{"name": "predicates"}, {"name": "capacity-card", **switches}]},
        ],
    }
    path = tmp_path / "card.yaml"
    path.write_text(yaml.safe_dump(config))
    manifest = EXAMPLES / "specs" / "capacity-card" / "job-mode-7-of-8.yaml"
    out = simulate_explained(capsys, "-f", str(manifest), "--config", str(path))
    return {g["name"]: g["phase"] for g in out["podGroups"]}


def test_job_enqueued_off_takes_capacity_card_out_of_enqueue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """capacity-card.md "Job Mode": with its enqueue check on, the second job waits (7 of 8 used);
    with ``enableJobEnqueued: false`` the plugin has no say at enqueue and both PodGroups go Inqueue
    (its task-mode predicate still applies to the pods)."""
    assert _card_phases(tmp_path, capsys) == {"flexible": "Running", "one-more": "Pending"}
    phases = _card_phases(tmp_path, capsys, enableJobEnqueued=False)
    assert phases["one-more"] != "Pending"


def test_job_ready_off_takes_gang_out_of_permit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A PodGroup of minMember 3 on a node with room for 2: gang's Permit (Volcano's jobReady) rolls
    the two back; with ``enableJobReady: false`` on gang they bind."""
    objects = [
        MakeNode("n1").alloc(cpu="2", memory="8Gi", pods="110").obj(),
        MakePodGroup("pg", "ml").min_member(3).obj(),
        *(MakePod(f"p{i}", "ml").group("pg").req(cpu="1").obj() for i in range(3)),
    ]

    def conf(**gang: bool) -> str:
        tiers = [{"plugins": [{"name": "gang", **gang}]}, {"plugins": [{"name": "predicates"}]}]
        return yaml.safe_dump({"actions": "enqueue, allocate", "tiers": tiers})

    assert bound(simulate(tmp_path, capsys, objects, conf())) == {}
    assert len(bound(simulate(tmp_path, capsys, objects, conf(enableJobReady=False)))) == 2
