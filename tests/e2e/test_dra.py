"""DRA end to end (design.md "DRA devices", "The cycle"): ``gpuq scheduler`` allocates ResourceClaims on
the real control plane, with kube-controller-manager's real ``resource-claim-controller`` making each
pod's claim from its ResourceClaimTemplate and cleaning up after a deleted pod. The test publishes
ResourceSlices for fake nodes, standing in for a driver.

Three pods each want one GPU by template; two GPUs exist (node a). The scheduler waits for the
controller's claims (``status.resourceClaimStatuses``), allocates two distinct GPUs, writes each claim's
delete-protection finalizer, allocation (its node selector: the pod's node) and reservation before the
pod's binding; the third pod waits with kube-scheduler's reason. Deleting a bound pod makes the
controller take its claim away, which frees its GPU: the third pod is retried on that claim event and
bound to the freed GPU.

Runs twice, on the admin kubeconfig and on the gpuq-scheduler ServiceAccount's token with what
deploy/'s RBAC grants (the claim writes included: no 403 may be logged).

A pod and its template made before their DeviceClass (issue 26): the pod waits with kube-scheduler's
reason, and binds once the class is made, a few seconds later (the class event retries it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import cluster_fixtures as fixtures
from tests.e2e import rbac_fixtures
from tests.e2e.cluster_fixtures import Cluster, SchedulerFactory, eventually, node_of, pending_message
from tests.e2e.controlplane.harness import ControlPlane
from tests.testing import dra

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
run_scheduler = rbac_fixtures.run_scheduler_as_admin_and_service_account
installed_rbac = rbac_fixtures.installed_rbac
service_account_kubeconfigs = rbac_fixtures.service_account_kubeconfigs

NODE = {"cpu": "8", "memory": "16Gi", "pods": "110"}
DRA = "/apis/resource.k8s.io/v1"


@pytest.fixture(scope="module")
def claim_controller(control_plane: ControlPlane) -> Iterator[None]:
    """kube-controller-manager running only the resource-claim-controller, its client limits raised
    (the default 20 qps would pace a burst of claims)."""
    stop = control_plane.start_controller_manager(
        ("resource-claim-controller",), extra_args=("--kube-api-qps=1000", "--kube-api-burst=1000")
    )
    yield
    stop()


async def _claims(cluster: Cluster) -> dict[str, dict[str, Any]]:
    listing = await cluster.get(f"{DRA}/namespaces/{cluster.namespace}/resourceclaims")
    return {c["metadata"]["name"]: c for c in listing.get("items") or []}


def _claim_of(pod: dict[str, Any], claims: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    names = [s.get("resourceClaimName") for s in statuses if s.get("name") == "gpu"]
    return claims.get(names[0]) if names and names[0] else None


async def test_template_claims_are_allocated_reserved_and_freed_with_the_claim_controller(
    cluster: Cluster, run_scheduler: SchedulerFactory, claim_controller: None
) -> None:
    name = f"gpuq-{cluster.test_id}"
    ns = cluster.namespace
    driver = f"{cluster.test_id}.gpu.example.com"
    node_a = await cluster.node("a", NODE)
    node_b = await cluster.node("b", NODE)
    await cluster.create(dra.device_class(name, driver), f"{DRA}/deviceclasses")
    gpus = [dra.device(f"gpu-{i}", {"model": "h100"}, {"memory": "80Gi"}) for i in range(2)]
    await cluster.create(dra.resource_slice(f"{node_a}-gpus", node_a, gpus, driver), f"{DRA}/resourceslices")
    await cluster.create(
        dra.claim_template("gpu", ns, dra.exactly("gpu", name)),
        f"{DRA}/namespaces/{ns}/resourceclaimtemplates",
    )
    for pod in ("p0", "p1", "p2"):
        body = dra.use_claims(cluster.pod_body(pod, {"cpu": "100m"}, scheduler=name), templates=("gpu",))
        await cluster.request("POST", f"/api/v1/namespaces/{ns}/pods", body)
    scheduler = run_scheduler(name)
    await scheduler.wait_ready()

    async def two_bound() -> dict[str, dict[str, Any]] | None:
        pods = await cluster.pods()
        bound = {p: body for p, body in pods.items() if node_of(body)}
        return bound if len(bound) == 2 else None

    bound = await eventually(two_bound, 60, "two pods bound", scheduler.log)
    waiting = next(p for p in ("p0", "p1", "p2") if p not in bound)
    message = await eventually(
        lambda: pending_message(cluster, waiting, "cannot allocate all claims"),
        30,
        "third pod pending",
        scheduler.log,
    )
    # node b reaches no slice, node a's two GPUs are taken
    assert message.startswith("0/2 nodes are available: 2 cannot allocate all claims."), message
    claims = await _claims(cluster)
    devices = []
    for pod, body in bound.items():
        claim = _claim_of(body, claims)
        assert claim is not None, (pod, body.get("status"))
        assert node_of(body) == node_a
        assert claim["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
        assert claim["status"]["reservedFor"] == [
            {"resource": "pods", "name": pod, "uid": body["metadata"]["uid"]}
        ]
        selector = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
        assert selector["values"] == [node_a]
        devices += dra.devices_of(claim)
    assert sorted(devices) == [(driver, node_a, "gpu-0"), (driver, node_a, "gpu-1")]

    # The controller deallocates (and deletes) a deleted pod's claim: its GPU goes to the waiting pod.
    gone = sorted(bound)[0]
    freed = dra.devices_of(_claim_of(bound[gone], claims) or {})
    await cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{gone}", {"gracePeriodSeconds": 0})

    async def waiting_bound() -> dict[str, Any] | None:
        pods = await cluster.pods()
        return pods[waiting] if node_of(pods.get(waiting) or {}) else None

    late = await eventually(waiting_bound, 60, f"{waiting} bound after {gone} left", scheduler.log)
    assert node_of(late) == node_a and node_b not in node_of(late)
    late_claim = _claim_of(late, await _claims(cluster))
    assert late_claim is not None and dra.devices_of(late_claim) == freed
    assert scheduler.terminate() == 0, scheduler.log()


async def test_a_pod_made_before_its_device_class_binds_once_the_class_is_made(
    cluster: Cluster, control_plane: ControlPlane, tmp_path: Path, claim_controller: None
) -> None:
    name = f"gpuq-{cluster.test_id}-late"
    ns = cluster.namespace
    driver = f"{cluster.test_id}.late.example.com"
    node_a = await cluster.node("a", NODE)
    gpus = [dra.device("gpu-0", {"model": "h100"}, {"memory": "80Gi"})]
    await cluster.create(dra.resource_slice(f"{node_a}-late", node_a, gpus, driver), f"{DRA}/resourceslices")
    await cluster.create(
        dra.claim_template("gpu", ns, dra.exactly("gpu", name)),
        f"{DRA}/namespaces/{ns}/resourceclaimtemplates",
    )
    body = dra.use_claims(cluster.pod_body("p0", {"cpu": "100m"}, scheduler=name), templates=("gpu",))
    await cluster.request("POST", f"/api/v1/namespaces/{ns}/pods", body)
    started: list[fixtures.SchedulerProcess] = []
    try:
        scheduler = fixtures.scheduler_starter(control_plane.kubeconfig, tmp_path, started)(name)
        await scheduler.wait_ready()
        # The controller makes the claim; the pod then waits for its class.
        await eventually(
            lambda: pending_message(cluster, "p0", f"device class {name} does not exist"),
            30,
            "p0 pending on its missing DeviceClass",
            scheduler.log,
        )
        await cluster.create(dra.device_class(name, driver), f"{DRA}/deviceclasses")

        async def bound() -> dict[str, Any] | None:
            pod = (await cluster.pods()).get("p0") or {}
            return pod if node_of(pod) else None

        pod = await eventually(bound, 30, "p0 bound once its DeviceClass exists", scheduler.log)
        assert node_of(pod) == node_a
        claim = _claim_of(pod, await _claims(cluster))
        assert claim is not None and dra.devices_of(claim) == [(driver, node_a, "gpu-0")]
        assert scheduler.terminate() == 0, scheduler.log()
    finally:
        for process in started:
            process.terminate()
