"""Issue 12, outage: with the chart's own webhook configurations registered and nothing serving them,
only what gpuq governs is refused.

The configurations are rendered from deploy/helm/gpuq (as deploy/render.py renders deploy/), under three
sets of values: the defaults, ``webhook.excludedNamespaces=null``, and an overriding list together with
``webhook.setSchedulerName=true``. No Service backs them (the webhook process is gone), so every call the
apiserver makes fails, and ``failurePolicy: Fail`` turns it into a refusal. Across five namespaces
(two application namespaces, a cert-manager-like one, kube-system and the release namespace):

* plain pods (no gpuq schedulerName, no gpuq annotation, a GPU request while the schedulerName mutation
  is off) are all created, in every namespace;
* every pod in kube-system and the release namespace is created, whatever the values say;
* every governed pod elsewhere, and a Queue, fails with the apiserver's webhook error (none is admitted
  unchecked).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client.api_client import ApiClient

from gpuq_k8s.common.kube.status import MERGE_PATCH, Reply, call
from gpuq_k8s.common.model.pods import GPUQ_SCHEDULER
from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.api import ensure_namespace
from tests.e2e.cluster_fixtures import Cluster
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.manifests import render
from tests.e2e.scope_pods import governed_pods, plain_pods, pod_body
from tests.testing.builders import MakeElasticQuota, MakePod, MakeQueue

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster

RELEASE_NAMESPACE = "gpuq-scope-e2e"
CERT_MANAGER = "cert-manager"
WEBHOOK_ERROR = 'failed calling webhook "validate.gpuq.io"'
ROUNDS = 2  # pods of each variant per namespace and configuration
QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"

VALUES: dict[str, tuple[str, ...]] = {
    "defaults": (),
    "excluded-null": ("webhook.excludedNamespaces=null",),
    "excluded-list-set-scheduler": (
        "webhook.excludedNamespaces={monitoring}",
        "webhook.setSchedulerName=true",
    ),
}


def _configurations(settings: Sequence[str]) -> list[dict[str, Any]]:
    text = render.helm_template(render.find_helm(), settings, namespace=RELEASE_NAMESPACE)
    kinds = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
    return [d for d in yaml.safe_load_all(text) if d and d["kind"] in kinds]


@pytest.fixture
def registered(control_plane: ControlPlane) -> Iterator[Any]:
    """Apply one rendered pair of configurations; delete them whatever happens."""
    kubectl = control_plane.kubectl

    def apply(settings: Sequence[str]) -> list[dict[str, Any]]:
        docs = _configurations(settings)
        kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump_all(docs))
        return docs

    try:
        yield apply
    finally:
        kubectl(
            "delete",
            "validatingwebhookconfiguration/gpuq-webhook",
            "mutatingwebhookconfiguration/gpuq-webhook",
            "--ignore-not-found",
        )


async def _create_all(api: ApiClient, bodies: Sequence[dict[str, Any]]) -> list[Reply]:
    gate = asyncio.Semaphore(8)

    async def one(body: dict[str, Any]) -> Reply:
        async with gate:
            namespace = body["metadata"]["namespace"]
            return await call(api, "POST", f"/api/v1/namespaces/{namespace}/pods", body)

    return list(await asyncio.gather(*(one(body) for body in bodies)))


async def _wait_effective(api: ApiClient, namespace: str) -> None:
    """The apiserver picks up a new configuration within a second or so: until a governed pod is refused."""
    body = pod_body(MakePod().scheduler(GPUQ_SCHEDULER), namespace, "probe")
    for _ in range(100):
        reply = await call(api, "POST", f"/api/v1/namespaces/{namespace}/pods", body)
        if not reply.ok:
            assert WEBHOOK_ERROR in reply.message, reply.message
            return
        await asyncio.sleep(0.1)
    pytest.fail("the rendered webhook configuration never took effect")


async def test_an_outage_refuses_governed_objects_only(
    api_client: ApiClient, cluster: Cluster, registered: Any
) -> None:
    apps = [await cluster.extra_namespace("app-a"), await cluster.extra_namespace("app-b")]
    for name in (CERT_MANAGER, RELEASE_NAMESPACE, "kube-system"):
        await ensure_namespace(api_client, name)
    exempt = ["kube-system", RELEASE_NAMESPACE]
    watched = [*apps, CERT_MANAGER]
    created: list[tuple[str, str]] = []
    try:
        for label, settings in VALUES.items():
            docs = registered(settings)
            for doc in docs:
                (hook,) = doc["webhooks"]
                assert hook["matchConditions"], f"{label}: no matchConditions rendered"
            await _wait_effective(api_client, apps[0])
            mutating = any(s == "webhook.setSchedulerName=true" for s in settings)
            cases: list[tuple[str, bool, dict[str, Any]]] = []  # (what, refused, body)
            for _ in range(ROUNDS):
                for namespace in [*watched, *exempt]:
                    for variant, pod in plain_pods(mutating).items():
                        cases.append((f"{namespace}/{variant}", False, pod_body(pod, namespace, variant)))
                    for variant, pod in governed_pods(mutating).items():
                        refused = namespace in watched
                        cases.append((f"{namespace}/{variant}", refused, pod_body(pod, namespace, variant)))
            replies = await _create_all(api_client, [body for _, _, body in cases])
            wrong = [
                f"{what}: {reply.status} {reply.message}"
                for (what, refused, _), reply in zip(cases, replies, strict=True)
                if reply.ok == refused or (refused and WEBHOOK_ERROR not in reply.message)
            ]
            created += [
                (reply.body["metadata"]["namespace"], reply.body["metadata"]["name"])
                for reply in replies
                if reply.ok
            ]
            assert not wrong, f"{label}: {len(wrong)} of {len(cases)} creates went the wrong way:\n" + (
                "\n".join(wrong[:20])
            )
            queue = await call(api_client, "POST", QUEUES, MakeQueue("gpuq-scope-q").obj())
            assert not queue.ok and WEBHOOK_ERROR in queue.message, f"{label}: Queue: {queue.message}"
    finally:
        for namespace, name in created:
            if namespace in (CERT_MANAGER, RELEASE_NAMESPACE, "kube-system"):
                await call(api_client, "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")


@pytest.mark.parametrize(
    "override",
    [
        "webhook.excludedNamespaces=null",
        "webhook.excludedNamespaces={}",
        "webhook.excludedNamespaces={monitoring}",
        "webhook.excludedNamespaces={kube-system,monitoring}",
    ],
)
def test_kube_system_and_the_release_namespace_stay_excluded_whatever_the_values(override: str) -> None:
    docs = _configurations((override,))
    assert len(docs) == 2
    for doc in docs:
        (hook,) = doc["webhooks"]
        (expression,) = hook["namespaceSelector"]["matchExpressions"]
        values = expression["values"]
        assert expression["operator"] == "NotIn"
        assert {"kube-system", RELEASE_NAMESPACE} <= set(values) and len(values) == len(set(values))
        if "monitoring" in override:
            assert "monitoring" in values


def test_the_gpu_clause_is_rendered_only_with_the_scheduler_name_mutation() -> None:
    for settings, expected in ((("webhook.setSchedulerName=true",), True), ((), False)):
        for doc in _configurations(settings):
            (hook,) = doc["webhooks"]
            (condition,) = hook["matchConditions"]
            assert ('r.endsWith("/gpu")' in condition["expression"]) is expected, (settings, doc["kind"])


async def test_finalizers_come_off_a_deleted_invalid_object_while_the_webhook_is_down(
    api_client: ApiClient, cluster: Cluster, registered: Any
) -> None:
    """Wedge, with gpuq down: an ElasticQuota made invalid (min > max) before the webhook was registered
    carries a finalizer. With the webhook registered and unreachable, a label change on a live governed
    object is refused (Fail), but once the object is being deleted its finalizer comes off by UPDATE and
    the object is gone: the apiserver never calls the webhook for it."""
    base = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{cluster.namespace}/elasticquotas"
    invalid = MakeElasticQuota("eq", cluster.namespace).min(cpu="4").max(cpu="2")
    await cluster.create(invalid.finalizers("example.com/keep").obj(), base)
    registered(())
    await _wait_effective(api_client, cluster.namespace)
    path = f"{base}/eq"
    label = await call(
        api_client, "PATCH", path, {"metadata": {"labels": {"a": "b"}}}, content_type=MERGE_PATCH
    )
    assert not label.ok and WEBHOOK_ERROR in label.message, label.message
    deleted = await call(api_client, "DELETE", path)
    assert deleted.ok, deleted.message
    assert (await call(api_client, "GET", path)).body["metadata"]["deletionTimestamp"]
    unblocked = await call(
        api_client, "PATCH", path, {"metadata": {"finalizers": None}}, content_type=MERGE_PATCH
    )
    assert unblocked.ok, unblocked.message
    assert (await call(api_client, "GET", path)).status == 404
