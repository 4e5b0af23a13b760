"""Run a scenario ported from one of Volcano's unit tests through ``gpuq simulate -o json --explain``:
objects built with tests/testing/builders.py, a Volcano-format configuration given as YAML text (the
shared step of the test_volcano_*.py files in tests/unit/scheduler/)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq_k8s.cli import main
from tests.testing.builders import MakeNode, MakePod


def simulate_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, objects: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The JSON report of ``gpuq simulate --config`` on ``objects`` (asserting exit 0)."""
    manifests = tmp_path / "cluster.yaml"
    manifests.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    conf = tmp_path / "scheduler.conf"
    conf.write_text(config)
    capsys.readouterr()
    code = main(["simulate", "-f", str(manifests), "--config", str(conf), "-o", "json", "--explain=all"])
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


def simulate(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    objects: Iterable[dict[str, Any]],
    config: str,
) -> dict[str, Any]:
    """:func:`simulate_scenario` with the objects first."""
    return simulate_scenario(tmp_path, capsys, config, list(objects))


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
