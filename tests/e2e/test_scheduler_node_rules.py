"""kube-scheduler's node rules in ``gpuq scheduler`` against the real control plane (design.md "Placement
rules"): a gated pod is never bound and is bound once its gate is removed (the feed passes the update
on), ``gpuq_scheduler_pending_pods{queue="gated"}`` counts it meanwhile; two pods asking one host port
never share a node, and the second is retried when the first leaves; a pod with DRA resource claims
stays pending with the reason. One scenario, on the admin kubeconfig (the scheduler reads nothing new,
so deploy/'s RBAC is proven by the suites that run on it)."""

from __future__ import annotations

import pytest

from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.cluster_fixtures import (
    Cluster,
    SchedulerFactory,
    eventually,
    node_of,
    pending_message,
    scheduled_condition,
)
from tests.testing.config import BASE_TIER

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
run_scheduler = fixtures.run_scheduler

PORTS = "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
# No kube-controller-manager here: the claim of the pod's template is never generated, and the pod waits
# for it with kube-scheduler's reason (scheduler/plugins/dynamic_resources.py).
CLAIMS = "ResourceClaim not created yet"


async def _bound(cluster: Cluster, name: str) -> str | None:
    return node_of((await cluster.pods()).get(name) or {}) or None


async def test_gates_ports_and_claims(cluster: Cluster, run_scheduler: SchedulerFactory) -> None:
    name = f"gpuq-{cluster.test_id}"
    node = await cluster.node("n", {"cpu": "4", "memory": "8Gi", "pods": "20"})
    path = f"/api/v1/namespaces/{cluster.namespace}/pods"

    gated = cluster.pod_body("gated", {"cpu": "100m"}, scheduler=name)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    await cluster.request("POST", path, gated)
    for web in ("web-0", "web-1"):
        body = cluster.pod_body(web, {"cpu": "100m"}, scheduler=name)
        body["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 80}]
        await cluster.request("POST", path, body)
    claiming = cluster.pod_body("claiming", {"cpu": "100m"}, scheduler=name)
    claiming["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
    await cluster.request("POST", path, claiming)

    scheduler = run_scheduler(name, BASE_TIER)
    await scheduler.wait_ready()

    async def one_web_bound() -> tuple[str, str] | None:
        pods = await cluster.pods()
        bound = [w for w in ("web-0", "web-1") if node_of(pods[w])]
        if len(bound) != 1:
            return None
        waiting = "web-1" if bound == ["web-0"] else "web-0"
        return (bound[0], waiting) if await pending_message(cluster, waiting, "free ports") else None

    first, second = await eventually(one_web_bound, 30, "one web pod bound, the other pending", scheduler.log)
    assert await pending_message(cluster, second, "free ports") == PORTS
    message = await eventually(
        lambda: pending_message(cluster, "claiming", CLAIMS), 30, "claiming pending", scheduler.log
    )
    assert message == f'0/1 nodes are available: pod "{cluster.namespace}/claiming": {CLAIMS}.'

    async def gated_counted() -> float | None:
        value = fixtures.metric_value(scheduler.metrics(), "gpuq_scheduler_pending_pods", {"queue": "gated"})
        return value if value == 1.0 else None

    await eventually(gated_counted, 30, "the gated pod counted", scheduler.log)
    pods = await cluster.pods()
    assert not node_of(pods["gated"])
    # The apiserver's SchedulingGated condition stands: gpuq never attempted the pod.
    assert (scheduled_condition(pods["gated"]) or {}).get("reason") == "SchedulingGated"

    # The gate removed: the watch's update lets the pod in, and it is bound.
    await cluster.request(
        "PATCH",
        f"{path}/gated",
        [{"op": "remove", "path": "/spec/schedulingGates"}],
        content_type="application/json-patch+json",
    )
    assert await eventually(lambda: _bound(cluster, "gated"), 30, "gated bound", scheduler.log) == node

    # The web pod holding port 80 leaves: the other is retried (NodePorts' event) and takes the port.
    await cluster.request("DELETE", f"{path}/{first}", {"gracePeriodSeconds": 0})
    assert await eventually(lambda: _bound(cluster, second), 30, f"{second} bound", scheduler.log) == node
    pods = await cluster.pods()
    assert not node_of(pods["claiming"])
    assert scheduler.terminate() == 0, scheduler.log()
