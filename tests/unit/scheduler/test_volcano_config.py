"""Volcano's configuration taken whole (design.md "Scheduler configuration", Semantics 15): the designs'
own configuration blocks and Volcano's default file start ``gpuq scheduler``, ``gpuq webhook`` and
``gpuq simulate`` unchanged; Volcano's switch spellings, the ``configurations:`` section, and a refusal
naming the key for anything gpuq cannot honour."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from gpuq_k8s.cli import main
from gpuq_k8s.common.kube.config_file import read_config
from gpuq_k8s.common.model.config import SUPPORTED_PLUGINS, SchedulerConfig
from gpuq_k8s.common.model.errors import ConfigError
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.webhook.options import admission_options
from tests.testing.designs import (
    CAPACITY_CARD_CONFIGMAP,
    CAPACITY_CARD_CONFIGURATION,
    RESOURCE_STRATEGY_FIT_CONFIGURATION,
    VOLCANO_DEFAULT,
)
from tests.testing.paths import REPO_ROOT

ROOT = REPO_ROOT
EXAMPLE = ROOT / "examples" / "heterogeneous-cluster"


def _starts(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    """What ``gpuq scheduler``, ``gpuq webhook`` and ``gpuq simulate`` do with ``--config`` before
    anything else: read it, build every plugin (the scheduler's start-up check), derive the admission
    rules; and a whole simulation with it."""
    path = tmp_path / "conf.yaml"
    path.write_text(text)
    config = read_config(path)
    Scheduler(config, default_registry(), MemoryBackend(), clock=time.monotonic)
    admission_options(config)
    assert main(["simulate", "-f", str(EXAMPLE), "--config", str(path), "-o", "json"]) == 0, (
        capsys.readouterr().err
    )
    capsys.readouterr()


@pytest.mark.parametrize(
    "block", [CAPACITY_CARD_CONFIGURATION, CAPACITY_CARD_CONFIGMAP], ids=["options", "configmap"]
)
def test_capacity_card_design_blocks_start_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], block: str
) -> None:
    _starts(tmp_path, capsys, block)


def test_resource_strategy_fit_design_block_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The design's block is not valid YAML as printed (`` - name`` under ``- plugins:`` at column 1);
    Volcano's YAML parser refuses it too. gpuq says so in one line; with that line's indentation fixed
    (nothing else changed) it starts."""
    with pytest.raises(ConfigError) as info:
        SchedulerConfig.from_yaml(RESOURCE_STRATEGY_FIT_CONFIGURATION)
    assert "valid YAML" in str(info.value) and "line 4" in str(info.value)
    fixed = RESOURCE_STRATEGY_FIT_CONFIGURATION.replace("\n - name:", "\n  - name:")
    _starts(tmp_path, capsys, fixed)


def test_volcanos_default_configuration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Volcano's default file, unchanged, starts ``gpuq scheduler``, ``gpuq webhook`` and ``gpuq
    simulate``: every plugin it names is registered, and its tiers and switches are kept as written."""
    names = re.findall(r"name: (\S+)", VOLCANO_DEFAULT)
    assert [name for name in names if name not in SUPPORTED_PLUGINS] == []
    assert [name for name in names if name not in default_registry()] == []
    config = SchedulerConfig.from_yaml(VOLCANO_DEFAULT)
    assert [[plugin.name for plugin in tier] for tier in config.tiers] == [
        names[:3],
        names[3:],
    ]
    for name in ("gang", "drf"):
        plugin = config.plugin(name)
        assert plugin is not None and plugin.switches == {"enablePreemptable": False}
    _starts(tmp_path, capsys, VOLCANO_DEFAULT)


@pytest.mark.parametrize(
    ("switch", "right"),
    [
        ("enabledPredicate", "enablePredicate"),
        ("enabledNodeOrder", "enableNodeOrder"),
        ("enabledPreemptable", "enablePreemptable"),
        ("enabledJobStarving", "enableJobStarving"),
        ("enabledQueueOrder", "enableQueueOrder"),
    ],
)
def test_former_spellings_are_refused_naming_volcanos_key(switch: str, right: str) -> None:
    with pytest.raises(ConfigError) as info:
        SchedulerConfig.from_yaml(
            f"actions: allocate\ntiers: [{{plugins: [{{name: gang, {switch}: false}}]}}]"
        )
    message = str(info.value)
    assert f"tiers[0].plugins[0].{switch}" in message and f"'{right}'" in message


@pytest.mark.parametrize(
    "switch",
    [
        "enabledClusterOrder",
        "enabledVictim",
        "enabledOverused",
        "enabledAllocatable",
        "enabledHyperNodeOrder",
    ],
)
def test_volcanos_own_enabled_spellings_are_accepted(switch: str) -> None:
    config = SchedulerConfig.from_yaml(
        f"actions: allocate\ntiers: [{{plugins: [{{name: proportion, {switch}: false}}]}}]"
    )
    plugin = config.plugin("proportion")
    assert plugin is not None and plugin.switches == {switch: False}


GANG = "tiers: [{plugins: [{name: gang}]}]\n"


@pytest.mark.parametrize(
    ("text", "field", "expected"),
    [
        (
            "tiers: [{plugins: [{name: gang, enableFoo: true}]}]",
            "tiers[0].plugins[0].enableFoo",
            "plugin switches",
        ),
        (
            "tiers: [{plugins: [{name: proportion, enableHierarchy: true}]}]",
            "enableHierarchy",
            "hierarchical",
        ),
        ("tiers: [{plugins: [{name: nodeorder-x}]}]", "tiers[0].plugins[0].name", "one of"),
        (
            GANG + "configurations: [{name: enqueue, arguments: {overcommit-factor: 1.2}}]",
            "configurations.enqueue.arguments.overcommit-factor",
            "without the overcommit plugin",
        ),
        (
            GANG + "configurations: [{name: preempt, arguments: {maxCandidateNodesAbsolute: 0}}]",
            "configurations[0].arguments.maxCandidateNodesAbsolute",
            "an integer >= 1",
        ),
        (
            GANG + "configurations: [{name: preempt, arguments: {minCandidateNodesPercentage: 101}}]",
            "configurations[0].arguments.minCandidateNodesPercentage",
            "an integer from 0 to 100",
        ),
        (
            GANG
            + "configurations: [{name: preempt, arguments: "
            + "{minCandidateNodesPercentage: 0, minCandidateNodesAbsolute: 0}}]",
            "configurations[0].arguments.minCandidateNodesAbsolute",
            "not 0 when minCandidateNodesPercentage is 0",
        ),
        (
            GANG + "configurations: [{name: preempt, arguments: {enableTopologyAwarePreemption: maybe}}]",
            "enableTopologyAwarePreemption",
            "true or false",
        ),
        (
            GANG + "configurations: [{name: reclaim, arguments: {foo: 1}}]",
            "configurations[0].arguments.foo",
            "an argument of the reclaim action (predicateErrorCacheEnable)",
        ),
        (
            GANG + "configurations: [{name: shuffle}]",
            "configurations[0].name",
            "one of enqueue",
        ),
    ],
)
def test_what_gpuq_cannot_honour_is_refused_by_name(text: str, field: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        SchedulerConfig.from_yaml("actions: enqueue, allocate\n" + text)
    message = str(info.value)
    assert field in message and expected in message
    assert "\n" not in message


def test_configurations_known_arguments_reach_the_handle() -> None:
    config = SchedulerConfig.from_yaml(
        "actions: enqueue, allocate, preempt\ntiers: [{plugins: [{name: gang}]}]\n"
        "configurations:\n- name: preempt\n  arguments: {enableTopologyAwarePreemption: 'true',"
        " minCandidateNodesPercentage: 40, minCandidateNodesAbsolute: '2', maxCandidateNodesAbsolute: 50,"
        " topologyAwarePreemptWorkerNum: 4}\n"
        "- name: allocate\n- name: reclaim\n  arguments: {predicateErrorCacheEnable: 'false'}\n"
    )
    sched = Scheduler(config, default_registry(), MemoryBackend(), clock=time.monotonic)
    assert sched.framework.action_arguments("preempt") == {
        "enableTopologyAwarePreemption": True,
        "minCandidateNodesPercentage": 40,
        "minCandidateNodesAbsolute": 2,
        "maxCandidateNodesAbsolute": 50,
        "topologyAwarePreemptWorkerNum": 4,
    }
    assert sched.framework.action_arguments("allocate") == {}
    assert sched.framework.action_arguments("reclaim") == {"predicateErrorCacheEnable": False}
    assert sched.framework.action_arguments("enqueue") == {}


def test_invalid_config_is_one_line_exit_2_for_scheduler_and_webhook(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "conf.yaml"
    path.write_text("actions: allocate\ntiers: [{plugins: [{name: gang, enabledJobReady: true}]}]\n")
    assert main(["simulate", "-f", str(EXAMPLE), "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'enableJobReady'" in err[0]
