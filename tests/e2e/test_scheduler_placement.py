"""Issue 23's inter-pod affinity and topology spread in ``gpuq scheduler`` against the real control plane:
what a user sees in the API. Each runs twice (the fixture's parameter): on the admin kubeconfig, and on
the gpuq-scheduler ServiceAccount's token with what deploy/'s RBAC grants (the ReplicaSets the system
default spreading reads included), no refusal logged."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e import cluster_fixtures as fixtures
from tests.e2e import rbac_fixtures
from tests.e2e.cluster_fixtures import Cluster, SchedulerFactory, eventually, node_of, pending_message
from tests.testing.config import config_text

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
run_scheduler = rbac_fixtures.run_scheduler_as_admin_and_service_account
installed_rbac = rbac_fixtures.installed_rbac
service_account_kubeconfigs = rbac_fixtures.service_account_kubeconfigs

HOST = "kubernetes.io/hostname"
NODE = {"cpu": "8", "memory": "16Gi", "pods": "20"}
ANTI_WEB = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOST}
        ]
    }
}


async def _pod(cluster: Cluster, name: str, scheduler: str, labels: dict[str, str], **spec: Any) -> None:
    body = cluster.pod_body(name, {"cpu": "100m"}, scheduler=scheduler)
    body["metadata"]["labels"] = {**(body["metadata"].get("labels") or {}), **labels}
    body["metadata"].update(spec.pop("metadata", {}))
    body["spec"].update(spec)
    await cluster.request("POST", f"/api/v1/namespaces/{cluster.namespace}/pods", body)


async def _bound(cluster: Cluster, names: set[str]) -> dict[str, str] | None:
    pods = await cluster.pods()
    nodes = {name: node_of(pods[name]) for name in names if name in pods}
    return nodes if all(nodes.get(n) for n in names) else None


async def test_anti_affinity_waits_until_a_relabel_frees_a_node(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    """Two app=web pods run, one per node; a pod with required hostname anti-affinity to app=web waits
    with kube-scheduler's reason; relabelling one running pod (the watch's label update) retries it at
    once, and it binds where that pod runs; an app=web pod without terms of its own then keeps off that
    node (existing pods' anti-affinity)."""
    name = f"gpuq-{cluster.test_id}"
    nodes = {}
    for node in ("a", "b"):
        nodes[node] = await cluster.node(node, NODE, labels={HOST: f"{cluster.test_id}-{node}"})
    for node, full in nodes.items():
        await _pod(cluster, f"running-{node}", name, {"app": "web"}, nodeName=full)
    await _pod(cluster, "web-0", name, {"app": "web"}, affinity=ANTI_WEB)
    scheduler = run_scheduler(name)
    await scheduler.wait_ready()
    await eventually(
        lambda: pending_message(cluster, "web-0", "2 node(s) didn't match pod anti-affinity rules"),
        60,
        "web-0 pending on anti-affinity",
        scheduler.log,
    )
    await cluster.request(
        "PATCH",
        f"/api/v1/namespaces/{cluster.namespace}/pods/running-a",
        {"metadata": {"labels": {"app": "retired"}}},
        "application/merge-patch+json",
    )
    placed = await eventually(
        lambda: _bound(cluster, {"web-0"}), 60, "web-0 bound after the relabel", scheduler.log
    )
    assert placed["web-0"] == nodes["a"]
    # A pod for node a without terms of its own: web-0's anti-affinity now keeps it off node a.
    await _pod(cluster, "plain", name, {"app": "web"}, nodeSelector={HOST: f"{cluster.test_id}-a"})
    message = "1 node(s) didn't satisfy existing pods anti-affinity rules"
    await eventually(lambda: pending_message(cluster, "plain", message), 60, "plain pending", scheduler.log)


async def test_system_default_spreading_selects_by_the_owning_replicaset(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    """nodeorder with only podtopologyspread weighted: three pods without constraints of their own, owned
    by a ReplicaSet (read through the scheduler's informer), spread over three nodes by the system
    defaults; without an owner or a Service nothing selects their peers and the node name decides."""
    name = f"gpuq-{cluster.test_id}"
    weights = {
        "leastrequested.weight": 0,
        "balancedresource.weight": 0,
        "nodeaffinity.weight": 0,
        "tainttoleration.weight": 0,
        "podaffinity.weight": 0,
        "podtopologyspread.weight": 2,
    }
    config = config_text("priority, gang", ["predicates", "nodeorder"], arguments={"nodeorder": weights})
    for node in ("a", "b", "c"):
        await cluster.node(node, NODE, labels={HOST: f"{cluster.test_id}-{node}"})
    replicaset = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": cluster.namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    }
    created = await cluster.create(replicaset, f"/apis/apps/v1/namespaces/{cluster.namespace}/replicasets")
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "web",
        "uid": created["metadata"]["uid"],
        "controller": True,
    }
    for i in range(3):
        await _pod(cluster, f"web-{i}", name, {"app": "web"}, metadata={"ownerReferences": [owner]})
    for i in range(2):
        await _pod(cluster, f"bare-{i}", name, {"app": "bare"})
    scheduler = run_scheduler(name, config)
    await scheduler.wait_ready()
    names = {"web-0", "web-1", "web-2", "bare-0", "bare-1"}
    placed = await eventually(lambda: _bound(cluster, names), 60, "every pod bound", scheduler.log)
    assert len({placed[f"web-{i}"] for i in range(3)}) == 3
    assert placed["bare-0"] == placed["bare-1"] == f"{cluster.test_id}-a"
