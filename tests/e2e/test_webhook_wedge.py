"""Issue 12, wedge: a namespace holding objects made invalid while the webhook was off still goes away.

Objects gpuq's rules call invalid (an ElasticQuota with min over max, a GPUResourceQuota with limits
under its requests, a PodGroup with a malformed card request) are created, each with a finalizer,
while no webhook is registered. Then the chart's webhook is turned on (tests/e2e/deployed_webhook.py)
and shown to judge them: a CREATE of the same object is denied, a label change (UPDATE) is admitted by
the ratchet, a change adding a new problem is denied. The namespace is deleted; kube-controller-manager's
namespace controller (started for this test only) deletes its content, the objects wait on their
finalizers, and the test, standing in for the controller that owns the finalizer, removes them by UPDATE
(PUT). Every such UPDATE is admitted and the namespace disappears from the API.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client.api_client import ApiClient

from gpuq_k8s.common.kube.status import MERGE_PATCH, call
from tests.e2e.controlplane.harness import ControlPlane, dns_label
from tests.e2e.deployed_webhook import DeployedWebhook
from tests.testing.builders import MakeElasticQuota, MakeGPUResourceQuota, MakePodGroup

pytestmark = pytest.mark.e2e

KEEP = "example.com/keep"
DENIED = "denied the request"
TIMEOUT = 300.0


def _objects(namespace: str) -> dict[str, tuple[str, Any, dict[str, Any]]]:
    """name -> (collection path, the invalid object, a merge patch adding a new problem)."""
    return {
        "eq": (
            f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/elasticquotas",
            MakeElasticQuota("eq", namespace).min(cpu="4").max(cpu="2"),
            {"spec": {"min": {"memory": "16Gi"}, "max": {"memory": "8Gi"}}},
        ),
        "grq": (
            f"/apis/tensor-fusion.ai/v1/namespaces/{namespace}/gpuresourcequotas",
            MakeGPUResourceQuota("grq", namespace).total(
                requests={"tflops": "10", "vram": "10Gi"}, limits={"tflops": "10", "vram": "5Gi"}
            ),
            {"spec": {"total": {"limits": {"vram": "4Gi"}}}},
        ),
        "pg": (
            f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{namespace}/podgroups",
            MakePodGroup("pg", namespace).min_member(1).card_request("{nope"),
            {"metadata": {"annotations": {"volcano.sh/card.request": "{still nope"}}},
        ),
    }


@pytest.fixture
def controller_manager(control_plane: ControlPlane) -> Iterator[None]:
    stop = control_plane.start_controller_manager(("namespace",))
    try:
        yield
    finally:
        stop()


@pytest.fixture
def webhook(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Callable[[], DeployedWebhook]]:
    deployed = DeployedWebhook(control_plane, tmp_path)

    def start() -> DeployedWebhook:
        deployed.install()
        deployed.start()
        deployed.wait_serving()
        return deployed

    try:
        yield start
    finally:
        deployed.remove()
        deployed.reset_certificates()


async def _until(what: str, check: Callable[[], Any], log: Callable[[], str]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not await check():
        assert time.monotonic() < deadline, f"{what} not within {TIMEOUT:g}s\n{log()}"
        await asyncio.sleep(0.5)


async def test_a_namespace_of_objects_made_invalid_while_the_webhook_was_off_is_deleted(
    api_client: ApiClient,
    control_plane: ControlPlane,
    controller_manager: None,
    webhook: Callable[[], DeployedWebhook],
) -> None:
    namespace = dns_label("wedge")
    reply = await call(api_client, "POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    assert reply.ok, reply.message
    objects = _objects(namespace)
    for name, (path, builder, _) in objects.items():
        reply = await call(api_client, "POST", path, builder.copy().finalizers(KEEP).obj())
        assert reply.ok, f"{name}, created while the webhook is off: {reply.message}"

    deployed = webhook()
    for name, (path, builder, worse) in objects.items():
        again = builder.copy().name(f"{name}-again").obj()
        reply = await call(api_client, "POST", path, again)
        assert not reply.ok and DENIED in reply.message, f"{name} is not one gpuq refuses: {reply.message}"
        label = {"metadata": {"labels": {"team": "a"}}}
        reply = await call(api_client, "PATCH", f"{path}/{name}", label, content_type=MERGE_PATCH)
        assert reply.ok, f"{name}: a label change was refused: {reply.message}"
        reply = await call(api_client, "PATCH", f"{path}/{name}", worse, content_type=MERGE_PATCH)
        assert not reply.ok and DENIED in reply.message, (
            f"{name}: a new problem was admitted: {reply.message}"
        )

    reply = await call(api_client, "DELETE", f"/api/v1/namespaces/{namespace}")
    assert reply.ok, reply.message

    async def all_being_deleted() -> bool:
        for name, (path, _, _) in objects.items():
            current = await call(api_client, "GET", f"{path}/{name}")
            if not current.body.get("metadata", {}).get("deletionTimestamp"):
                return False
        return True

    await _until("the namespace controller deleting the objects", all_being_deleted, deployed.log)
    for name, (path, _, _) in objects.items():
        current = (await call(api_client, "GET", f"{path}/{name}")).body
        current["metadata"]["finalizers"] = [f for f in current["metadata"]["finalizers"] if f != KEEP]
        reply = await call(api_client, "PUT", f"{path}/{name}", current)
        assert reply.ok, f"{name}: removing the finalizer by UPDATE was refused: {reply.message}"

    async def namespace_gone() -> bool:
        return (await call(api_client, "GET", f"/api/v1/namespaces/{namespace}")).status == 404

    await _until(f"namespace {namespace} gone", namespace_gone, deployed.log)
