"""A configuration's problems are collected, not raised at the first (design.md "Scheduler
configuration"): every problem with its full path, in the model and on the command line of the three
commands that read ``--config`` (one line each, exit 2, no traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuq_k8s.cli import main
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.errors import ConfigError, ConfigErrors, ErrorCollector, GpuqError
from tests.testing.paths import REPO_ROOT

ROOT = REPO_ROOT
EXAMPLE = ROOT / "examples" / "heterogeneous-cluster"

# Three independent mistakes: an unknown action, a crossquota weight that is no number, and a
# capacity-card weight below zero (the fourth plugin of the second tier).
THREE_MISTAKES = """\
actions: "enqueue, allocate, shuffle"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
  - name: crossquota
    arguments: {gpu-resource-names: nvidia.com/gpu, weight.cpu: lots}
  - name: resource-strategy-fit
  - name: capacity-card
    arguments: {nodeOrderWeight: -1}
"""
EXPECTED = [
    "actions: invalid value 'shuffle': expected a comma-separated list of enqueue, allocate, backfill, "
    "preempt, reclaim",
    "tiers[1].plugins[1].arguments.weight.cpu: invalid value 'lots': expected an integer from 0 to 1000000",
    "tiers[1].plugins[3].arguments.nodeOrderWeight: invalid value -1: expected a positive number such as 1.0",
]


def test_three_independent_mistakes_are_three_errors_each_with_its_path() -> None:
    with pytest.raises(ConfigErrors) as info:
        SchedulerConfig.from_yaml(THREE_MISTAKES)
    assert [str(e) for e in info.value.errors] == EXPECTED
    assert info.value.lines() == EXPECTED
    assert [e.field for e in info.value.errors] == [
        "actions",
        "tiers[1].plugins[1].arguments.weight.cpu",
        "tiers[1].plugins[3].arguments.nodeOrderWeight",
    ]
    # Still a ConfigError (the first problem's), and its message one line holding every problem.
    assert isinstance(info.value, ConfigError) and info.value.field == "actions"
    assert str(info.value) == "; ".join(EXPECTED) and "\n" not in str(info.value)


def test_every_problem_of_every_section_is_reported() -> None:
    """Top-level keys, actions, tier shapes, plugin names and repeats, switches, every argument of a
    plugin, plugins without arguments, the configurations section and its cross-check on the tiers."""
    text = """\
actions: "enqueue, enqueue"
metrics: {address: x}
tiers:
- plugins:
  - name: gang
    enabledJobOrder: false
    enablePreemptable: "no"
    arguments: {x: 1, y: 2}
  - name: no-such
- plugin: []
- plugins:
  - name: gang
  - name: binpack
    arguments: {binpack.weight: -1, binpack.cpu: 1.5, binpack.resources.x/y: 2, binpack.weigth: 1}
configurations:
- name: enqueue
  arguments: {overcommit-factor: 1.2}
- name: preempt
  arguments: {maxCandidateNodesAbsolute: 0, foo: 1}
"""
    with pytest.raises(ConfigErrors) as info:
        SchedulerConfig.from_yaml(text)
    fields = [e.field for e in info.value.errors]
    assert fields == [
        "metrics",
        "actions",
        "tiers[0].plugins[0].enabledJobOrder",
        "tiers[0].plugins[0].enablePreemptable",
        "tiers[0].plugins[0].arguments.x",
        "tiers[0].plugins[0].arguments.y",
        "tiers[0].plugins[1].name",
        "tiers[1]",
        "tiers[2].plugins[0].name",
        "tiers[2].plugins[1].arguments.binpack.weight",
        "tiers[2].plugins[1].arguments.binpack.cpu",
        "tiers[2].plugins[1].arguments.binpack.resources.x/y",
        "tiers[2].plugins[1].arguments.binpack.weigth",
        "configurations[1].arguments.maxCandidateNodesAbsolute",
        "configurations[1].arguments.foo",
        "configurations.enqueue.arguments.overcommit-factor",
    ]
    messages = info.value.lines()
    assert "'enableJobOrder'" in messages[2]  # Volcano's spelling named
    assert "each plugin at most once" in messages[8]
    assert "a weight for a resource listed in binpack.resources" in messages[11]
    assert "without the overcommit plugin" in messages[-1]


def test_a_file_that_is_no_mapping_is_one_problem() -> None:
    for text in ("actions: [\n", "- a\n- b\n"):
        with pytest.raises(ConfigError) as info:
            SchedulerConfig.from_yaml(text)
        assert info.value.lines() == [str(info.value)] and info.value.field == "config"


def test_collector_prefixes_and_flattens() -> None:
    problems = ErrorCollector()
    assert not problems
    problems.raise_any()  # nothing collected: nothing raised
    problems.add("actions", "x", "one of a, b")
    inner = ConfigErrors(
        [ConfigError("quota.cpu", "abc", "a quantity"), ConfigError("weight.cpu", -1, "0 or more")]
    )
    problems.extend(inner, "tiers[0].plugins[2].arguments")
    problems.extend(ConfigError("a", 1, "b"))
    with pytest.raises(ConfigErrors) as info:
        problems.raise_any()
    assert [e.field for e in info.value.errors] == [
        "actions",
        "tiers[0].plugins[2].arguments.quota.cpu",
        "tiers[0].plugins[2].arguments.weight.cpu",
        "a",
    ]
    assert all(type(e) is ConfigError for e in info.value.errors)  # flat: no ConfigErrors inside
    assert GpuqError("one line").lines() == ["one line"]
    with pytest.raises(ValueError):
        ConfigErrors([])


# -- the command line ----------------------------------------------------------------------------------


def _assert_three_lines(err: str, path: Path) -> None:
    assert "Traceback" not in err
    assert err.splitlines() == [f"error: {path}: {line}" for line in EXPECTED]


@pytest.fixture
def three_mistakes(tmp_path: Path) -> Path:
    path = tmp_path / "conf.yaml"
    path.write_text(THREE_MISTAKES)
    return path


def test_simulate_prints_every_problem(three_mistakes: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", str(EXAMPLE), "--config", str(three_mistakes)]) == 2
    _assert_three_lines(capsys.readouterr().err, three_mistakes)


def test_webhook_prints_every_problem(three_mistakes: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["webhook", "--tls-cert-file", "x", "--tls-private-key-file", "y", "--config", str(three_mistakes)]
    assert main(argv) == 2
    _assert_three_lines(capsys.readouterr().err, three_mistakes)


def test_scheduler_prints_every_problem(three_mistakes: Path) -> None:
    """As a process: ``gpuq scheduler`` sets up logging for the whole interpreter before it reads."""
    result = subprocess.run(
        [sys.executable, "-m", "gpuq_k8s.cli", "scheduler", "--config", str(three_mistakes)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    _assert_three_lines(result.stderr, three_mistakes)
    assert result.stdout == ""
