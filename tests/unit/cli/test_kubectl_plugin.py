"""``kubectl gpuq`` (gpuq_k8s/kubectl.py) on what a namespace-scoped user reads, and the live overlay of
``gpuq simulate --kubeconfig`` (scheduler/simulate/live.py), without a cluster: the live reads
themselves are proven in tests/e2e/test_live_cli.py."""

from __future__ import annotations

import http.server
import re
import subprocess
import sys
import threading
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuq_k8s.certs import create_ca, issue_serving_certificate
from gpuq_k8s.certs.files import write_key_pair
from gpuq_k8s.cli import main as cli_main
from gpuq_k8s.kubectl import View, _context_namespace, main, pending_rows, queue_rows
from gpuq_k8s.scheduler.simulate.live import Snapshot, manifests, overlay
from gpuq_k8s.scheduler.simulate.loader import Manifests
from tests.testing.builders import MakeNode, MakePod, MakePodGroup, MakeQueue
from tests.testing.paths import REPO_ROOT

ROOT = REPO_ROOT
MESSAGE = (
    "0/2 nodes are available: 2 Insufficient cpu. "
    "Waits for room: the most cpu free on one node is 1, 2 asked."
)


def _pending(name: str, *, created: str, priority: int = 0, message: str = MESSAGE) -> dict[str, Any]:
    pod = MakePod(name, "ml").req(cpu="2").created(created).priority(priority).obj()
    pod["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": "team"}
    pod["status"] = {
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        ]
    }
    return pod


def test_the_plugin_is_a_console_script() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-gpuq"] == "gpuq_k8s.kubectl:main"


def test_pending_pods_in_queue_order_with_their_recorded_reason_and_outlook() -> None:
    never = "x (can never fit under the current quota: cpu limit 1 would have to be at least 2)"
    running = MakePod("running", "ml").req(cpu="1").obj()
    running["spec"]["nodeName"] = "n1"
    grouped = _pending("grouped", created="2024-01-01T00:00:00Z")
    grouped["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "pg"}
    snap = Snapshot(
        objects={
            "Pod": [
                _pending("late", created="2024-01-01T00:00:09Z"),
                _pending("early", created="2024-01-01T00:00:01Z", message=never),
                _pending("urgent", created="2024-01-01T00:00:05Z", priority=100),
                running,
                grouped,
            ],
            "PodGroup": [MakePodGroup("pg", "ml").queue("other").obj()],
        },
        forbidden=["Node", "Queue"],
        namespace="ml",
    )
    rows = pending_rows(View(snap, None))
    assert [(r["name"], r["queue"], r["position"], r["of"], r["outlook"]) for r in rows] == [
        ("urgent", "team", 1, 3, "wait"),  # priority first
        ("grouped", "other", 1, 1, "wait"),  # its PodGroup's queue
        ("early", "team", 2, 3, "never"),
        ("late", "team", 3, 3, "wait"),
    ]
    assert rows[0]["reason"] == MESSAGE


def test_queues_from_their_recorded_allocation_when_pods_are_out_of_sight() -> None:
    queue = MakeQueue("team").card_quota('{"NVIDIA-A100": 4}').capability(cpu="10").obj()
    queue["status"]["allocated"] = {"NVIDIA-A100": "3", "cpu": "2500m"}
    snap = Snapshot(
        objects={"Queue": [queue], "Pod": [_pending("p", created="2024-01-01T00:00:00Z")]}, forbidden=["Node"]
    )
    rows = {r["resource"]: r for r in queue_rows(View(snap, None))}
    assert rows["NVIDIA-A100"] == {
        "queue": "team",
        "resource": "NVIDIA-A100",
        "used": 3,
        "limit": 4,
        "inqueue": 0,
        "pending": 1,
    }
    assert (rows["cpu"]["used"], rows["cpu"]["limit"]) == (2.5, 10)


def test_the_namespace_of_the_context_is_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config"
    config.write_text(
        "contexts:\n"
        "- {name: a, context: {cluster: c, user: u, namespace: team-a}}\n"
        "- {name: b, context: {cluster: c, user: u}}\n"
        "current-context: a\n"
    )
    assert _context_namespace(str(config), None) == "team-a"
    assert _context_namespace(str(config), "b") == "default"
    monkeypatch.setenv("KUBECONFIG", str(config))
    assert _context_namespace(None, None) == "team-a"
    assert _context_namespace(str(tmp_path / "missing"), None) == "default"
    for text in ("- a\n", "contexts: 5\n", "current-context: a\ncontexts: [{name: a, context: 7}]\n"):
        config.write_text(text)  # malformed: reading the cluster then says what is wrong
        assert _context_namespace(str(config), None) == "default"


def test_files_overlay_the_live_state() -> None:
    live = Manifests(
        nodes=[MakeNode("n1").alloc(cpu="4").info()],
        pods=[MakePod("old", "ml").created("2024-01-01T00:00:00Z").info()],
        objects=[MakeQueue("team").capability(cpu="4").obj(), MakeQueue("other").obj()],
    )
    extra = Manifests(
        nodes=[MakeNode("n1").alloc(cpu="8").info(), MakeNode("n2").alloc(cpu="8").info()],
        pods=[MakePod("new", "ml").info()],
        objects=[MakeQueue("team").capability(cpu="16").obj()],
    )
    merged = overlay(live, extra)
    assert [(n.name, n.allocatable.amount("cpu")) for n in merged.nodes] == [("n1", 8000), ("n2", 8000)]
    queues = {o["metadata"]["name"]: o.get("spec") for o in merged.objects}
    assert queues == {"other": {}, "team": {"capability": {"cpu": "16"}}}
    old, new = merged.pods
    # A pod of the files is created now: it queues behind the live ones.
    assert new.name == "new" and new.creation_timestamp > old.creation_timestamp


def test_files_queue_behind_a_live_pod_of_the_same_second() -> None:
    """Timestamps have one-second resolution: a live pod created in the second simulate starts in
    (or, with a clock skewed against the apiserver's, later) must still queue before the files' pods,
    whose names would otherwise decide ("more" < "waiting")."""
    future = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    live = Manifests(nodes=[], pods=[MakePod("waiting", "ml").created(future).info()], objects=[])
    merged = overlay(live, Manifests(nodes=[], pods=[MakePod("more", "ml").info()], objects=[]))
    waiting, more = merged.pods
    assert more.creation_timestamp > waiting.creation_timestamp == future


def test_refused_credentials_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A kubeconfig whose token the API server refuses (HTTP 401), from a local stand-in server."""

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"kind":"Status","code":401}')

        def log_message(self, *args: Any) -> None:
            return

    class Quiet(http.server.ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            return  # the client leaves after the first refusal: its other requests are cut short

    server = Quiet(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        config = tmp_path / "config"
        config.write_text(
            f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{server.server_port}'}}}}]\n"
            "users: [{name: u, user: {token: wrong}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
            "current-context: x\n"
        )
        assert main(["queues", "--kubeconfig", str(config)]) == 2
    finally:
        server.shutdown()
    err = capsys.readouterr().err
    # Whichever list is answered first (they are read concurrently) names its path.
    assert re.fullmatch(
        r"error: cannot read the cluster: GET /apis?/\S+: HTTP 401 Unauthorized: "
        r"the kubeconfig's credentials were refused\n",
        err,
    ), err


BAD_KUBECONFIGS = {
    "missing": (None, r"--kubeconfig: invalid value '\S+/missing': expected an existing kubeconfig file"),
    "not-yaml": ("garbage: [\n", r"--kubeconfig: \S+/not-yaml: expected a kubeconfig in YAML: .+"),
    "a-list": ("- a\n", r"--kubeconfig: \S+/a-list: invalid value of type list: expected a kubeconfig .+"),
    "contexts-not-a-list": (
        "apiVersion: v1\ncurrent-context: x\ncontexts: 5\n",
        r"--kubeconfig: malformed kubeconfig \(TypeError: .+\)",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_KUBECONFIGS))
@pytest.mark.parametrize("command", [["queues"], ["pending"], ["explain", "ml/p"], ["simulate"]])
def test_a_bad_kubeconfig_is_one_line_naming_it(
    name: str, command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, expected = BAD_KUBECONFIGS[name]
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    args = [*command, "--kubeconfig", str(path)]
    code = cli_main(args) if command == ["simulate"] else main(args)
    assert code == 2
    err = capsys.readouterr().err
    assert re.fullmatch(rf"error: cannot read the cluster: {expected}\n", err), err


def test_a_missing_kubeconfig_file_named_by_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "gone"))
    assert main(["queues"]) == 2
    assert capsys.readouterr().err == (
        f"error: cannot read the cluster: $KUBECONFIG: invalid value '{tmp_path / 'gone'}': "
        "expected an existing kubeconfig file\n"
    )


@pytest.mark.parametrize("pod", ["a/b/c", "/p", "ns/", ""])
def test_a_malformed_pod_argument_is_one_line(pod: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before any read of the cluster (the kubeconfig given does not exist)."""
    assert main(["explain", pod, "--kubeconfig", "/nonexistent"]) == 2
    assert capsys.readouterr().err == (
        f"error: [NAMESPACE/]POD: invalid value {pod!r}: expected <namespace>/<pod>\n"
    )


@pytest.mark.parametrize("pod", ["a/b/c", "p", "/p", "ns/"])
def test_gpuq_explain_refuses_a_malformed_pod_argument(pod: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["explain", pod, "--kubeconfig", "/nonexistent"]) == 2
    assert capsys.readouterr().err == (
        f"error: NAMESPACE/POD: invalid value {pod!r}: expected <namespace>/<pod>\n"
    )


def test_equal_pods_are_placed_by_namespace_then_name_as_the_scheduler_queue_does() -> None:
    same = "2024-01-01T00:00:00Z"
    pods = []
    for namespace, name in (("a-b", "c"), ("a", "z")):
        pod = _pending(name, created=same)
        pod["metadata"]["namespace"] = namespace
        pods.append(pod)
    rows = pending_rows(View(Snapshot(objects={"Pod": pods}), None))
    # As a pair ("a", "z") < ("a-b", "c"); as the string "a/z" it would sort after "a-b/c".
    assert [(r["namespace"], r["name"], r["position"]) for r in rows] == [("a", "z", 1), ("a-b", "c", 2)]


def test_a_live_object_the_model_cannot_read_is_named_once() -> None:
    node = MakeNode("n1").alloc(cpu="4").obj()
    node["status"]["allocatable"]["cpu"] = "abc"
    pod = MakePod("p", "ml").req(cpu="1").obj()
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "x"
    errors = manifests(Snapshot(objects={"Node": [node], "Pod": [pod]})).errors
    assert [e.split(": ", 2)[:2] for e in errors] == [
        ["live cluster", "Node/n1"],
        ["live cluster", "Pod/ml/p"],
    ]
    assert all(e.count("Node/") + e.count("Pod/") == 1 for e in errors), errors  # never Node//n1, never twice


@pytest.mark.parametrize(
    "command",
    [["scheduler"], ["webhook", "--tls-cert-file", "c", "--tls-private-key-file", "k", "--port", "0"]],
)
@pytest.mark.parametrize("name", ["missing", "contexts-not-a-list"])
def test_the_processes_refuse_a_bad_kubeconfig_in_one_line(
    name: str, command: list[str], tmp_path: Path
) -> None:
    """``gpuq scheduler`` and ``gpuq webhook`` load it first (common/kube/client.py), before serving:
    exit 2, the last line of stderr says why, no traceback (they log to stderr, so run as processes)."""
    text, expected = BAD_KUBECONFIGS[name]
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    # The webhook checks its certificate files and ports before it connects: give it a real pair.
    write_key_pair(
        issue_serving_certificate(create_ca("ca"), dns_names=["x"]), tmp_path / "c", tmp_path / "k"
    )
    command = [str(tmp_path / arg) if arg in ("c", "k") else arg for arg in command]
    result = subprocess.run(
        [sys.executable, "-m", "gpuq_k8s.cli", *command, "--kubeconfig", str(path), "--metrics-port", "0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert re.fullmatch(rf"error: {expected}", result.stderr.splitlines()[-1]), result.stderr


def test_without_any_kubeconfig_the_message_says_where_one_is_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["queues"]) == 2
    assert capsys.readouterr().err == (
        "error: cannot read the cluster: no kubeconfig: expected --kubeconfig P, $KUBECONFIG or "
        "~/.kube/config (or a Pod's service account)\n"
    )
