"""Run a scenario ported from one of Volcano's unit tests through ``gpuq simulate -o json --explain``:
objects built with tests/builders.py, a Volcano-format configuration given as YAML text."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq.cli import main
from tests.builders import MakeNode, MakePod


def simulate_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, objects: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The JSON report of ``gpuq simulate --config`` on ``objects`` (asserting exit 0)."""
    manifests = tmp_path / "cluster.yaml"
    manifests.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    conf = tmp_path / "scheduler.conf"
    conf.write_text(config)
    capsys.readouterr()
    code = main(["simulate", "-f", str(manifests), "--config", str(conf), "-o", "json", "--explain"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out: dict[str, Any] = json.loads(captured.out)
    return out


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str) -> str:
    """The one-line error ``gpuq simulate`` exits 2 with on ``config``."""
    manifests = tmp_path / "cluster.yaml"
    manifests.write_text(yaml.safe_dump(MakeNode("n1").alloc(cpu="1", memory="1Gi").obj()))
    conf = tmp_path / "scheduler.conf"
    conf.write_text(config)
    capsys.readouterr()
    assert main(["simulate", "-f", str(manifests), "--config", str(conf)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def pod(out: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in out["pods"] if p["name"] == name)


def volcano_pod(namespace: str, name: str, cpu: str, memory: str, node: str = "") -> MakePod:
    """Volcano's ``util.BuildPod(namespace, name, nodeName, phase, BuildResourceList(cpu, memory), ...)``."""
    made = MakePod(name, namespace).req(cpu=cpu, memory=memory)
    return made.node(node) if node else made


def volcano_node(name: str, cpu: str, memory: str, extended: Mapping[str, str] | None = None) -> MakeNode:
    """Volcano's ``util.BuildNode(name, BuildResourceList(cpu, memory, pods: 10, extended...), labels)``."""
    return MakeNode(name).alloc({"cpu": cpu, "memory": memory, "pods": "10", **(extended or {})})
