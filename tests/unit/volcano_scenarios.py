"""Run a scenario (objects from tests/builders.py, a Volcano-format configuration) through
``gpuq simulate -o json`` and read the outcome: the shared step of the tests ported from Volcano's own
unit tests (tests/unit/test_volcano_ported.py)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq.cli import main


def simulate(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    objects: Iterable[dict[str, Any]],
    config: str,
) -> dict[str, Any]:
    """The JSON report of ``gpuq simulate -f <objects> --config <config> -o json`` (asserting exit 0)."""
    manifests = tmp_path / "cluster.yaml"
    manifests.write_text(yaml.safe_dump_all(list(objects)))
    conf = tmp_path / "conf.yaml"
    conf.write_text(config)
    code = main(["simulate", "-f", str(manifests), "--config", str(conf), "-o", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out: dict[str, Any] = json.loads(captured.out)
    return out


def phases(out: dict[str, Any]) -> dict[str, str]:
    """``namespace/name`` -> phase (Bound, Pending, Preempted)."""
    return {f"{p['namespace']}/{p['name']}": p["phase"] for p in out["pods"]}


def preempted(out: dict[str, Any]) -> set[str]:
    return {key for key, phase in phases(out).items() if phase == "Preempted"}


def bound(out: dict[str, Any]) -> dict[str, str]:
    return {f"{p['namespace']}/{p['name']}": p["node"] for p in out["pods"] if p["phase"] == "Bound"}


def scheduled_order(out: dict[str, Any]) -> list[str]:
    """The pods in the order they were bound (their Scheduled events)."""
    return [e["object"].removeprefix("Pod/") for e in out["events"] if e["reason"] == "Scheduled"]
