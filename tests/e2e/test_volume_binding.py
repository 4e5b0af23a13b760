"""Volume binding end to end (design.md "Placement rules: volumes"): ``gpuq scheduler`` and
kube-controller-manager's real PersistentVolume controller (``persistentvolume-binder``) on the real
control plane; the test plays the external provisioner.

- ``WaitForFirstConsumer`` with static volumes in two zones: only zone b's volume is big enough; the
  pod lands in zone b, PreBind pre-binds that volume (claimRef), the PV controller binds the claim.
- Dynamic provisioning: PreBind writes ``volume.kubernetes.io/selected-node`` and waits; the test,
  as a provisioner would, creates a volume for the claim on that node; the PV controller binds it; the
  pod is bound only after, which the watch's resourceVersions (etcd revisions, one total order over
  every write) show: the pod's binding comes after the claim's Bound phase.

Each runs twice, on the admin kubeconfig and on the gpuq-scheduler ServiceAccount's token with what
deploy/'s RBAC grants (PersistentVolume and PersistentVolumeClaim patches included).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.api_client import ApiClient

from tests.e2e import cluster_fixtures as fixtures
from tests.e2e import rbac_fixtures
from tests.e2e.cluster_fixtures import Cluster, SchedulerFactory, eventually, node_of
from tests.e2e.controlplane.harness import ControlPlane
from tests.testing.builders import MakePV, MakePVC, MakeStorageClass

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
run_scheduler = rbac_fixtures.run_scheduler_as_admin_and_service_account
installed_rbac = rbac_fixtures.installed_rbac
service_account_kubeconfigs = rbac_fixtures.service_account_kubeconfigs

ZONE = "topology.kubernetes.io/zone"
NODE = {"cpu": "8", "memory": "16Gi", "pods": "110"}
PROVISIONER = "disk.e2e.gpuq.example.com"


@pytest.fixture(scope="module")
def pv_controller(control_plane: ControlPlane) -> Iterator[None]:
    """kube-controller-manager running only the PersistentVolume binder (it binds claims to volumes,
    and leaves provisioning to the external provisioner the test plays)."""
    stop = control_plane.start_controller_manager(("persistentvolume-binder",))
    yield
    stop()


def pod_with_claim(cluster: Cluster, name: str, claim: str, scheduler: str) -> dict[str, Any]:
    body = cluster.pod_body(name, {"cpu": "1"}, scheduler=scheduler)
    body["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    return body


async def claim(cluster: Cluster, name: str) -> dict[str, Any]:
    return await cluster.get(f"/api/v1/namespaces/{cluster.namespace}/persistentvolumeclaims/{name}")


async def test_wait_for_first_consumer_binds_the_static_volume_of_the_zone_that_has_one(
    cluster: Cluster, run_scheduler: SchedulerFactory, pv_controller: None
) -> None:
    """The storage objects are cluster-scoped: named after the test (``storage``), deleted after it."""
    name = storage = f"gpuq-{cluster.test_id}"
    ns = cluster.namespace
    node_a = await cluster.node("a", NODE, labels={ZONE: f"{storage}-a"})
    node_b = await cluster.node("b", NODE, labels={ZONE: f"{storage}-b"})
    local = f"{storage}-local"
    await cluster.create(MakeStorageClass(local).obj(), "/apis/storage.k8s.io/v1/storageclasses")
    for zone, size in (("a", "1Gi"), ("b", "10Gi")):
        volume = (
            MakePV(f"{storage}-pv-{zone}", local)
            .capacity(size)
            .node_affinity({ZONE: [f"{storage}-{zone}"]})
            .spec(local={"path": "/mnt/disk"}, persistentVolumeReclaimPolicy="Retain")
        )
        await cluster.create(volume.obj(), "/api/v1/persistentvolumes")
    await cluster.create(
        MakePVC("data", ns, local).request("5Gi").obj(), f"/api/v1/namespaces/{ns}/persistentvolumeclaims"
    )
    await cluster.create(pod_with_claim(cluster, "trainer", "data", name), f"/api/v1/namespaces/{ns}/pods")
    scheduler = run_scheduler(name)
    await scheduler.wait_ready()

    async def bound() -> str | None:
        pods = await cluster.pods()
        return node_of(pods["trainer"]) or None

    node = await eventually(bound, 60, "trainer bound", scheduler.log)
    assert node == node_b and node != node_a
    data = await claim(cluster, "data")
    assert data["status"]["phase"] == "Bound", data
    assert data["spec"]["volumeName"] == f"{storage}-pv-b"
    chosen = await cluster.get(f"/api/v1/persistentvolumes/{storage}-pv-b")
    assert (
        chosen["spec"]["claimRef"]["name"] == "data"
        and chosen["spec"]["claimRef"]["uid"] == data["metadata"]["uid"]
    )
    # the scheduler chose it (kube-scheduler's volume binder marks it so), the PV controller bound it
    assert chosen["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"
    small = await cluster.get(f"/api/v1/persistentvolumes/{storage}-pv-a")
    assert "claimRef" not in small["spec"]
    assert scheduler.terminate() == 0, scheduler.log()


async def _watch(
    api: ApiClient,
    target: tuple[str, str, str],
    seen: list[tuple[int, dict[str, Any]]],
    errors: list[BaseException],
) -> None:
    """Every version of one pod or claim, as (resourceVersion, object), until cancelled; a broken watch
    is resumed from the last version seen (and its error kept for the failure message). ``target``:
    (namespace, "pod" or "claim", name)."""
    namespace, kind, name = target
    core = client.CoreV1Api(api)
    lister = core.list_namespaced_pod if kind == "pod" else core.list_namespaced_persistent_volume_claim
    options: dict[str, Any] = {"field_selector": f"metadata.name={name}", "timeout_seconds": 60}
    while True:
        try:
            async with watch.Watch() as stream:
                async for event in stream.stream(lister, namespace, **options):
                    obj = api.sanitize_for_serialization(event["object"])
                    options["resource_version"] = obj["metadata"]["resourceVersion"]
                    seen.append((int(obj["metadata"]["resourceVersion"]), obj))
        except asyncio.CancelledError:
            raise
        except Exception as err:  # kept for the failure message; the watch goes on
            errors.append(err)
            await asyncio.sleep(0.2)


async def test_dynamic_provisioning_binds_the_pod_after_its_claim(
    cluster: Cluster, run_scheduler: SchedulerFactory, pv_controller: None
) -> None:
    """The storage objects are cluster-scoped: named after the test (``storage``), deleted after it."""
    name = storage = f"gpuq-{cluster.test_id}"
    ns = cluster.namespace
    await cluster.node("a", NODE, labels={ZONE: f"{storage}-a"})
    await cluster.node("b", NODE, labels={ZONE: f"{storage}-b"})
    fast = f"{storage}-fast"
    await cluster.create(MakeStorageClass(fast, PROVISIONER).obj(), "/apis/storage.k8s.io/v1/storageclasses")
    await cluster.create(
        MakePVC("scratch", ns, fast).request("2Gi").obj(), f"/api/v1/namespaces/{ns}/persistentvolumeclaims"
    )
    claims: list[tuple[int, dict[str, Any]]] = []
    pods: list[tuple[int, dict[str, Any]]] = []
    errors: list[BaseException] = []
    watches = [
        asyncio.create_task(_watch(cluster.api, (ns, "claim", "scratch"), claims, errors)),
        asyncio.create_task(_watch(cluster.api, (ns, "pod", "worker"), pods, errors)),
    ]
    try:
        await cluster.create(
            pod_with_claim(cluster, "worker", "scratch", name), f"/api/v1/namespaces/{ns}/pods"
        )
        scheduler = run_scheduler(name)
        await scheduler.wait_ready()

        async def selected() -> str | None:
            annotations = (await claim(cluster, "scratch"))["metadata"].get("annotations") or {}
            return annotations.get("volume.kubernetes.io/selected-node")

        node = await eventually(selected, 60, "the claim's selected-node annotation", scheduler.log)
        await asyncio.sleep(1.0)  # PreBind waits for the claim: no binding meanwhile
        assert node_of((await cluster.pods())["worker"]) == ""
        # The provisioner's part: a volume for the claim, on the selected node.
        scratch = await claim(cluster, "scratch")
        zone = (await cluster.get(f"/api/v1/nodes/{node}"))["metadata"]["labels"][ZONE]
        provisioned = (
            MakePV(f"{storage}-pvc-scratch", fast)
            .capacity("2Gi")
            .csi(PROVISIONER, f"{storage}-handle")
            .claim_ref(ns, "scratch", scratch["metadata"]["uid"])
            .node_affinity({ZONE: [zone]})
            .annotation("pv.kubernetes.io/provisioned-by", PROVISIONER)
            .spec(persistentVolumeReclaimPolicy="Retain")
        )
        await cluster.create(provisioned.obj(), "/api/v1/persistentvolumes")

        async def bound() -> str | None:
            return node_of((await cluster.pods())["worker"]) or None

        assert await eventually(bound, 60, "worker bound", scheduler.log) == node
        await eventually(
            lambda: _settled(claims, pods),
            60,
            "the watches to show the claim Bound and the pod bound",
            lambda: f"watch errors: {errors!r}; versions seen: {[rv for rv, _ in claims + pods]}",
        )
    finally:
        for task in watches:
            task.cancel()
        await asyncio.gather(*watches, return_exceptions=True)
    claim_bound = min(rv for rv, obj in claims if (obj.get("status") or {}).get("phase") == "Bound")
    pod_bound = min(rv for rv, obj in pods if (obj.get("spec") or {}).get("nodeName"))
    assert claim_bound < pod_bound, (claim_bound, pod_bound)
    data = await claim(cluster, "scratch")
    assert data["spec"]["volumeName"] == f"{storage}-pvc-scratch"
    assert scheduler.terminate() == 0, scheduler.log()


async def _settled(claims: list[tuple[int, dict[str, Any]]], pods: list[tuple[int, dict[str, Any]]]) -> bool:
    await asyncio.sleep(0)
    return any((o.get("status") or {}).get("phase") == "Bound" for _, o in claims) and any(
        (o.get("spec") or {}).get("nodeName") for _, o in pods
    )
