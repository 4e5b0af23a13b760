"""Drive ``gpuq simulate -o json`` on a manifest given as text (the regression tests' common step) or
on manifest files (the worked examples' tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuq_k8s.cli import main


def simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> dict[str, Any]:
    """The JSON report of ``gpuq simulate`` on ``text`` (asserting exit 0)."""
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    assert main(["simulate", "-f", str(path), "-o", "json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def simulate_explained(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """The JSON report of ``gpuq simulate ARGS -o json --explain=all`` (asserting exit 0): every pod
    with its per-node detail."""
    assert main(["simulate", *args, "-o", "json", "--explain=all"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def pods_by_name(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in out["pods"]}
