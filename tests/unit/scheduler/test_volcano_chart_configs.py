"""Volcano's configurations as a platform team has them (issue 27, "Volcano's configurations"): the
chart's volcano-scheduler.conf (Volcano master ed72c7c) and the variant with reserve and reservation
start ``gpuq simulate`` and ``gpuq scheduler``; a file with several things gpuq does not run reports
them all at once, each with its path and whether gpuq will never or does not yet support it; and a
ConfigMap given as ``--config`` is unwrapped, with a note, by every command that takes ``--config``."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpuq_k8s.cli import main
from gpuq_k8s.common.kube.config_file import read_config
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.errors import ConfigError, ConfigErrors
from gpuq_k8s.common.model.volcano_support import ACTIONS, PLUGINS, Support
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.webhook.options import admission_options
from tests.testing.paths import REPO_ROOT

CONFIGS = REPO_ROOT / "examples" / "configs"
CLUSTER = str(REPO_ROOT / "examples" / "heterogeneous-cluster")
CHART = CONFIGS / "volcano-chart.conf"
CHART_RESERVE = CONFIGS / "volcano-chart-reserve.conf"
MIRROR = Path("/work/.mirror/volcano-sh+volcano/repo")


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something listens on: ``gpuq scheduler`` and ``gpuq webhook`` stop at it with exit 2
    after reading ``--config`` and before connecting anywhere."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _scheduler_reads(config: Path, port: int, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """``gpuq scheduler --config``: the configuration is read and every plugin built (exit 2 only at
    the busy metrics port that follows); stderr's lines."""
    code = main(
        ["scheduler", "--config", str(config), "--metrics-port", str(port), "--bind-address", "127.0.0.1"]
    )
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and lines[-1].startswith("error: --metrics-port:"), lines
    return lines


def _simulate(config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code = main(["simulate", "-f", CLUSTER, "--config", str(config), "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    report: dict[str, object] = json.loads(out)
    return report


@pytest.mark.parametrize("path", [CHART, CHART_RESERVE], ids=["chart", "chart-reserve"])
def test_the_charts_configurations_start_simulate_and_the_scheduler(
    path: Path, busy_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _simulate(path, capsys)
    pods = report["pods"]
    assert isinstance(pods, list) and any(p["phase"] == "Bound" for p in pods)
    # No configuration error, no note: the only line is the busy port's.
    assert len(_scheduler_reads(path, busy_port, capsys)) == 1
    config = read_config(path)
    admission_options(config)  # what gpuq webhook derives from the same file
    sched = Scheduler(config, default_registry(), MemoryBackend(), clock=time.monotonic)
    assert sched.framework.actions == tuple(
        a.strip() for a in str(yaml.safe_load(path.read_text())["actions"]).split(",")
    )
    if path == CHART_RESERVE:
        assert sched.reserve is not None and [p.name for p in sched.framework.target_job_plugins] == [
            "reservation"
        ]


@pytest.mark.skipif(not MIRROR.exists(), reason="needs the Volcano snapshot on this machine")
def test_the_example_is_volcano_masters_chart_file() -> None:
    shown = subprocess.run(
        ["git", "-C", str(MIRROR), "show", "HEAD:installer/helm/chart/volcano/config/volcano-scheduler.conf"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert yaml.safe_load(shown) == yaml.safe_load(CHART.read_text())


UNSUPPORTED = """\
actions: "enqueue, allocate, shuffle, gangpreempt, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
  - name: capacity
    enableHierarchy: true
  - name: deviceshare
  - name: network-topology-aware
  - name: usage
metrics:
  type: prometheus
"""


def test_every_unsupported_item_is_reported_at_once_with_its_path_and_never_or_not_yet() -> None:
    with pytest.raises(ConfigErrors) as info:
        SchedulerConfig.from_yaml(UNSUPPORTED)
    lines = info.value.lines()
    expected = [
        ("metrics", "gpuq will never support Volcano's 'metrics'"),
        (
            "actions: invalid value 'shuffle'",
            "gpuq will never support Volcano's 'shuffle': it evicts running pods",
        ),
        ("actions: invalid value 'gangpreempt'", "gpuq does not yet support Volcano's 'gangpreempt'"),
        ("tiers[1].plugins[1].name: invalid value 'capacity'", "does not yet support Volcano's 'capacity'"),
        (
            "tiers[1].plugins[1].enableHierarchy: invalid value True",
            "does not yet support Volcano's 'enableHierarchy'",
        ),
        (
            "tiers[1].plugins[2].name: invalid value 'deviceshare'",
            "will never support Volcano's 'deviceshare'",
        ),
        (
            "tiers[1].plugins[3].name: invalid value 'network-topology-aware'",
            "does not yet support Volcano's 'network-topology-aware'",
        ),
        ("tiers[1].plugins[4].name: invalid value 'usage'", "will never support Volcano's 'usage'"),
    ]
    assert len(lines) == len(expected), lines
    for (where, why), line in zip(expected, lines, strict=True):
        assert line.startswith(where) and why in line, line
    assert all("\n" not in line for line in lines)


def test_the_support_table_covers_volcano_masters_actions_and_plugins() -> None:
    """Every action and plugin Volcano master registers (factory.go at ed72c7c) has a status, and every
    one gpuq does not run says why."""
    actions = {
        "allocate",
        "backfill",
        "enqueue",
        "gangpreempt",
        "gangreclaim",
        "preempt",
        "reclaim",
        "shuffle",
    }
    plugins = {
        "binpack", "capacity", "cdp", "conformance", "deviceshare", "drf", "extender", "gang",
        "network-topology-aware", "nodegroup", "nodeorder", "numaaware", "overcommit", "pdb", "predicates",
        "priority", "proportion", "rescheduling", "resource-strategy-fit", "resourcequota", "sla",
        "task-topology", "tdm", "usage",
    }  # fmt: skip
    assert actions <= set(ACTIONS) and plugins <= set(PLUGINS)
    for entry in (*ACTIONS.values(), *PLUGINS.values()):
        assert entry.status is Support.SUPPORTED or entry.reason, entry
    assert {name for name, e in PLUGINS.items() if e.status is Support.SUPPORTED} <= set(
        default_registry().names
    )


@pytest.mark.parametrize(
    ("actions", "plugins", "where", "expected"),
    [
        (
            "enqueue, reserve, allocate",
            "priority",
            "actions: invalid value 'reserve'",
            "the reservation plugin",
        ),
        ("enqueue, allocate", "priority, reservation", "tiers[0].plugins[1].name", "the reserve action"),
        ("enqueue, elect, allocate", "priority", "actions: invalid value 'elect'", "reserve listed as well"),
    ],
)
def test_reserve_elect_and_reservation_act_only_together(
    actions: str, plugins: str, where: str, expected: str
) -> None:
    entries = ", ".join(f"{{name: {name.strip()}}}" for name in plugins.split(","))
    with pytest.raises(ConfigError) as info:
        SchedulerConfig.from_yaml(f"actions: {actions}\ntiers: [{{plugins: [{entries}]}}]\n")
    assert where in str(info.value) and expected in str(info.value)


def test_elect_is_accepted_with_reserve_and_folded_into_it() -> None:
    config = SchedulerConfig.from_yaml(
        "actions: enqueue, elect, allocate, backfill, reserve\n"
        "tiers: [{plugins: [{name: priority}, {name: gang}, {name: reservation}]}]\n"
    )
    sched = Scheduler(config, default_registry(), MemoryBackend(), clock=time.monotonic)
    assert sched.reserve is not None


# -- a ConfigMap as --config -------------------------------------------------------------------------


def _config_map(tmp_path: Path, key: str = "volcano-scheduler.conf", source: Path = CHART_RESERVE) -> Path:
    path = tmp_path / "volcano-scheduler-configmap.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"},
                "data": {key: source.read_text()},
            }
        )
    )
    return path


NOTE = (
    "note: --config {path} is a ConfigMap: read ConfigMap/volcano-system/volcano-scheduler-configmap's "
    "data['{key}']"
)


def test_simulate_unwraps_a_configmap_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config_map(tmp_path)
    code = main(["simulate", "-f", CLUSTER, "--config", str(path), "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["pods"]
    assert err.splitlines() == [NOTE.format(path=path, key="volcano-scheduler.conf")]


def test_explain_unwraps_a_configmap_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config_map(tmp_path)
    assert main(["simulate", "-f", CLUSTER, "-o", "json"]) == 0
    pod = json.loads(capsys.readouterr().out)["pods"][0]
    code = main(["explain", f"{pod['namespace']}/{pod['name']}", "-f", CLUSTER, "--config", str(path)])
    out, err = capsys.readouterr()
    assert code == 0 and pod["name"] in out
    assert err.splitlines() == [NOTE.format(path=path, key="volcano-scheduler.conf")]


def test_the_scheduler_unwraps_a_configmap_with_a_note(
    tmp_path: Path, busy_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config_map(tmp_path)
    lines = _scheduler_reads(path, busy_port, capsys)
    assert lines[0] == NOTE.format(path=path, key="volcano-scheduler.conf") and len(lines) == 2


def test_the_webhook_unwraps_a_configmap_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gpuq's own ConfigMap (deploy/'s ``config.yaml`` key) works the same; the webhook stops after the
    configuration, at its missing certificate."""
    path = _config_map(tmp_path, key="config.yaml")
    missing = str(tmp_path / "tls.crt")
    code = main(
        ["webhook", "--config", str(path), "--tls-cert-file", missing, "--tls-private-key-file", missing]
    )
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and lines[0] == NOTE.format(path=path, key="config.yaml"), lines
    assert len(lines) == 2 and lines[1].startswith("error: --tls-cert-file:"), lines


def test_a_configmap_without_the_configuration_names_its_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config_map(tmp_path, key="scheduler.yaml")
    assert main(["simulate", "-f", CLUSTER, "--config", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "data: invalid value 'scheduler.yaml'" in err[0]
    assert "'volcano-scheduler.conf' or 'config.yaml'" in err[0]


def test_problems_inside_a_configmap_are_all_reported_with_their_paths(tmp_path: Path) -> None:
    source = tmp_path / "bad.conf"
    source.write_text(UNSUPPORTED)
    with pytest.raises(ConfigErrors) as info:
        read_config(_config_map(tmp_path, source=source), note=lambda _: None)
    assert len(info.value.lines()) == 8
