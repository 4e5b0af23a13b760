"""What users run against a live cluster, on the real control plane: ``gpuq simulate --kubeconfig``
(the live state plus files, proven read-only), ``gpuq explain`` on ``$KUBECONFIG`` with
``--context``, and the ``kubectl gpuq`` plugin through real kubectl, for an admin and for a
namespace-scoped user (RBAC: a ServiceAccount token with a Role in one namespace only).

Read-only is proven from the API server itself: its ``apiserver_request_total`` counts no write to
any kind simulate reads (no controller runs here, so nothing else writes them), and every object's
resourceVersion is unchanged.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from gpuq_k8s.common.model import kinds
from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.cluster_fixtures import TEST_LABEL, Cluster
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.deployed_webhook import token_kubeconfig
from tests.testing.builders import MakePod, MakeQueue

pytestmark = pytest.mark.e2e
cluster = fixtures.cluster

ROOT = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY", "CREATE", "UPDATE"})
# What simulate lists (and so could be tempted to write): any write to these fails the test.
READ_RESOURCES = frozenset(
    {
        "pods",
        "nodes",
        "namespaces",
        "priorityclasses",
        "queues",
        "podgroups",
        "elasticquotas",
        "gpuresourcequotas",
        "events",
        "bindings",
    }
)


def run(
    argv: list[str], env: Mapping[str, str] | None = None, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(argv, capture_output=True, text=True, env=environment, timeout=timeout, check=False)


def gpuq(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpuq_k8s.cli", *args]


def writes(plane: ControlPlane) -> dict[str, float]:
    """The API server's count of write requests per resource it served, from its own metrics."""
    text = plane.kubectl("get", "--raw", "/metrics").stdout
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        fields = dict(
            part.split("=", 1)
            for part in labels[len("apiserver_request_total{") : -1].split(",")
            if "=" in part
        )
        verb = fields.get("verb", "").strip('"')
        resource = fields.get("resource", "").strip('"')
        if verb in WRITES and resource in READ_RESOURCES:
            out[resource] = out.get(resource, 0.0) + float(value)
    return out


def context_of(kubeconfig: Path) -> str:
    return str(yaml.safe_load(kubeconfig.read_text())["current-context"])


async def gpu_cluster(cluster: Cluster) -> dict[str, str]:
    """Two 4-GPU A100 nodes, Queue q (A100: 4), a pod running on node a with 2 GPUs and a pending one
    asking 1. Returns the names."""
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100", "nvidia.com/gpu.memory": "81920"}
    alloc = {"cpu": "16", "memory": "64Gi", "pods": "20", GPU: "4"}
    a = await cluster.node("a", alloc, labels=labels)
    b = await cluster.node("b", alloc, labels=labels)
    queue = f"{cluster.test_id}-q"
    body = MakeQueue(queue).card_quota('{"NVIDIA-A100": 4}').capability(cpu="100", memory="1Ti").obj()
    await cluster.create(body, "/apis/scheduling.volcano.sh/v1beta1/queues")
    annotations = {"scheduling.volcano.sh/queue-name": queue, "volcano.sh/card.name": "NVIDIA-A100"}
    running = cluster.pod_body(
        "running", {GPU: "2"}, limits={GPU: "2"}, scheduler="gpuq-scheduler", annotations=annotations
    )
    running["spec"]["nodeName"] = a
    await cluster.request("POST", f"/api/v1/namespaces/{cluster.namespace}/pods", running)
    await cluster.pod(
        "waiting", {GPU: "1"}, limits={GPU: "1"}, scheduler="gpuq-scheduler", annotations=annotations
    )
    return {"a": a, "b": b, "queue": queue}


async def test_simulate_live_plus_files_writes_nothing(
    control_plane: ControlPlane, cluster: Cluster, tmp_path: Path
) -> None:
    names = await gpu_cluster(cluster)
    extra = (
        MakePod("more", cluster.namespace)
        .req(**{GPU: "2"})
        .lim(**{GPU: "2"})
        .annotations(
            {"scheduling.volcano.sh/queue-name": names["queue"], "volcano.sh/card.name": "NVIDIA-A100"}
        )
        .node_selector({TEST_LABEL: cluster.test_id})
        .obj()
    )
    path = tmp_path / "extra.yaml"
    path.write_text(yaml.safe_dump(extra))
    before = await cluster.pods()
    count = writes(control_plane)
    kubeconfig = control_plane.kubeconfig
    context = context_of(kubeconfig)
    argv = gpuq(
        "simulate", "--kubeconfig", str(kubeconfig), "--context", context, "-f", str(path), "-o", "json"
    )
    result = await asyncio.to_thread(run, argv)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    pods = {p["name"]: p for p in out["pods"] if p["namespace"] == cluster.namespace}
    # The live pod runs (2 of the queue's 4 A100); the live pending pod takes 1; the file's pod asks
    # 2 more: 2 + 1 + 2 > 4, so it waits for room, naming the usage that would have to drop.
    assert pods["running"]["phase"] == "Bound" and pods["running"]["node"] == names["a"]
    assert pods["waiting"]["phase"] == "Bound", pods["waiting"]["reason"]
    assert pods["more"]["phase"] == "Pending"
    assert pods["more"]["outlook"] == "wait"
    assert "NVIDIA-A100 used 3 would have to drop to 2" in pods["more"]["reason"]
    queue = next(q for q in out["queues"] if q["name"] == names["queue"])
    assert queue["allocated"]["NVIDIA-A100"] == 3
    # Nothing was written: no write request reached the API server, and every object is as it was.
    assert writes(control_plane) == count
    after = await cluster.pods()
    assert {n: p["metadata"]["resourceVersion"] for n, p in after.items()} == {
        n: p["metadata"]["resourceVersion"] for n, p in before.items()
    }
    assert "nodeName" not in after["waiting"]["spec"]
    assert "more" not in after


async def test_explain_honours_kubeconfig_env_and_context(
    control_plane: ControlPlane, cluster: Cluster
) -> None:
    await gpu_cluster(cluster)
    huge = cluster.pod_body("huge", {GPU: "8"}, limits={GPU: "8"}, scheduler="gpuq-scheduler")
    await cluster.request("POST", f"/api/v1/namespaces/{cluster.namespace}/pods", huge)
    kubeconfig = control_plane.kubeconfig
    argv = gpuq("explain", f"{cluster.namespace}/huge", "--context", context_of(kubeconfig), "-o", "json")
    result = await asyncio.to_thread(run, argv, {"KUBECONFIG": str(kubeconfig), "HOME": "/nonexistent"})
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["phase"] == "Pending"
    assert answer["outlook"] == "never"
    assert "no node has 8 nvidia.com/gpu allocatable" in answer["reason"]
    bad = await asyncio.to_thread(
        run,
        gpuq("explain", f"{cluster.namespace}/huge", "--context", "nope"),
        {"KUBECONFIG": str(kubeconfig)},
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: cannot read the cluster:") and "Traceback" not in bad.stderr


# -- kubectl gpuq ---------------------------------------------------------------------------------


def plugin_path(tmp_path: Path) -> str:
    """A directory holding a ``kubectl-gpuq`` executable (as the console script installs it)."""
    directory = tmp_path / "bin"
    directory.mkdir(exist_ok=True)
    script = directory / "kubectl-gpuq"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -m gpuq_k8s.kubectl "$@"\n')
    script.chmod(0o755)
    return f"{directory}{os.pathsep}{os.environ.get('PATH', '')}"


def kubectl_gpuq(
    plane: ControlPlane, tmp_path: Path, kubeconfig: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return run(
        [str(plane.binaries.kubectl), "gpuq", *args],
        {
            "KUBECONFIG": str(kubeconfig),
            "PATH": plugin_path(tmp_path),
            "KUBECACHEDIR": str(tmp_path / "cache"),
        },
    )


async def test_kubectl_gpuq_as_admin(control_plane: ControlPlane, cluster: Cluster, tmp_path: Path) -> None:
    names = await gpu_cluster(cluster)
    for i in range(2):
        await cluster.pod(
            f"big-{i}",
            {GPU: "4"},
            limits={GPU: "4"},
            scheduler="gpuq-scheduler",
            annotations={"scheduling.volcano.sh/queue-name": names["queue"]},
        )
    kubeconfig = control_plane.kubeconfig
    queues = await asyncio.to_thread(
        kubectl_gpuq, control_plane, tmp_path, kubeconfig, "queues", "-o", "json"
    )
    assert queues.returncode == 0, queues.stderr
    rows = {(r["queue"], r["resource"]): r for r in json.loads(queues.stdout)}
    a100 = rows[(names["queue"], "NVIDIA-A100")]
    assert (a100["used"], a100["limit"], a100["pending"]) == (3, 4, 2)
    pending = await asyncio.to_thread(
        kubectl_gpuq, control_plane, tmp_path, kubeconfig, "pending", "-n", cluster.namespace, "-o", "json"
    )
    assert pending.returncode == 0, pending.stderr
    listed = {r["name"]: r for r in json.loads(pending.stdout)}
    assert set(listed) == {"big-0", "big-1"}
    assert [listed["big-0"]["position"], listed["big-1"]["position"]] == [1, 2]
    assert listed["big-0"]["of"] == 2 and listed["big-0"]["queue"] == names["queue"]
    assert listed["big-0"]["outlook"] == "wait"
    table = await asyncio.to_thread(
        kubectl_gpuq, control_plane, tmp_path, kubeconfig, "pending", "-n", cluster.namespace
    )
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAMESPACE", "POD", "QUEUE", "POSITION", "OUTLOOK", "REASON"]
    assert lines[1].split()[:5] == [cluster.namespace, "big-0", names["queue"], "1/2", "wait"]
    explained = await asyncio.to_thread(
        kubectl_gpuq, control_plane, tmp_path, kubeconfig, "explain", f"{cluster.namespace}/big-1"
    )
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.startswith(f"Pod {cluster.namespace}/big-1: Pending")
    assert names["b"] in explained.stdout  # the per-node table


async def test_kubectl_gpuq_for_a_namespace_scoped_user(
    control_plane: ControlPlane, cluster: Cluster, tmp_path: Path
) -> None:
    """A user with a Role in one namespace (pods and podgroups: get, list): the plugin shows that
    namespace's pending pods with the reason the scheduler recorded, and says what it could not read."""
    names = await gpu_cluster(cluster)
    ns = cluster.namespace
    # The reason a running scheduler would have recorded on the pod (none runs here).
    message = (
        "0/2 nodes are available: 2 quota exceeded in Queue/q for NVIDIA-A100: requested 8, "
        "available 2, used 2, limit 4 (can never fit under the current quota: NVIDIA-A100 limit 4 "
        "would have to be at least 8)."
    )
    status = {
        "status": {
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
            ]
        }
    }
    await cluster.request(
        "PATCH", f"/api/v1/namespaces/{ns}/pods/waiting/status", status, "application/merge-patch+json"
    )
    account = "viewer"
    await cluster.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": account}})
    role = {
        "metadata": {"name": account},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
            {"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"], "verbs": ["get", "list"]},
        ],
    }
    await cluster.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", role)
    binding = {
        "metadata": {"name": account},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
    }
    await cluster.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", binding)
    kubeconfig = token_kubeconfig(control_plane, account, tmp_path / "viewer.kubeconfig", namespace=ns)
    pending = await asyncio.to_thread(
        kubectl_gpuq, control_plane, tmp_path, kubeconfig, "pending", "-o", "json"
    )
    assert pending.returncode == 0, pending.stderr
    assert pending.stderr.startswith("note: this user may not list Node")
    assert "showing what it may read (namespace " + ns in pending.stderr
    rows = json.loads(pending.stdout)
    assert [(r["name"], r["queue"], r["position"], r["outlook"]) for r in rows] == [
        ("waiting", names["queue"], 1, "never")
    ]
    assert rows[0]["reason"] == message
    queues = await asyncio.to_thread(kubectl_gpuq, control_plane, tmp_path, kubeconfig, "queues")
    assert queues.returncode == 0, queues.stderr
    assert queues.stdout.strip() == "No queues readable by this user."
    explained = await asyncio.to_thread(
        kubectl_gpuq, control_plane, tmp_path, kubeconfig, "explain", "waiting", "-o", "json"
    )
    assert explained.returncode == 0, explained.stderr
    answer = json.loads(explained.stdout)
    assert (answer["phase"], answer["outlook"], answer["reason"]) == ("Pending", "never", message)
    other = await asyncio.to_thread(
        kubectl_gpuq, control_plane, tmp_path, kubeconfig, "explain", "kube-system/nothing"
    )
    assert other.returncode == 2
    assert other.stderr.strip().endswith("not found (or not readable by this user)")
    # A simulation needs the whole cluster: the namespace-scoped user is told so, in one line.
    simulated = await asyncio.to_thread(run, gpuq("simulate", "--kubeconfig", str(kubeconfig)))
    assert simulated.returncode == 2
    watched = ", ".join(kind.kind for kind in kinds.SCHEDULER_WATCHES)  # Node, Namespace, ..., Pod
    assert simulated.stderr == (
        f"error: cannot read the cluster: listing {watched} across all namespaces is forbidden for this "
        "user (a simulation needs every kind the scheduler watches)\n"
    )
