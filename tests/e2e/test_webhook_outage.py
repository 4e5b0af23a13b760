"""Issue 12, outage: the deployed webhook is killed in the middle of 1,000 creates across five namespaces.

The chart's webhook runs as tests/e2e/deployed_webhook.py installs it (its RBAC and webhook
configurations as rendered, reached over loopback; ``gpuq webhook`` with the Deployment's arguments on
its token, renewing its own certificate). 1,000 Pods are created, eight at a time, across two
application namespaces, a cert-manager-like namespace, kube-system and the release namespace; once 350
have been answered the webhook is SIGKILLed. Then, from the replies and from the API:

* no Pod gpuq does not govern is ever refused, in any namespace;
* every governed Pod in a namespace the webhook covers is either admitted *checked* (it carries what the
  mutating webhook sets: the queue annotation, a normalised card name) or refused with the apiserver's
  webhook error; a Pod the validating webhook refuses (a malformed weight) is never admitted;
* governed Pods were admitted before the kill and refused after it (the kill fell inside the run);
* kube-system, the release namespace and the excluded namespaces are never checked, whatever the values.

Run twice: with the chart's defaults, and with ``webhook.excludedNamespaces={cert-manager}`` (a list
without kube-system, which stays excluded, and with the cert-manager-like namespace).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client.api_client import ApiClient

from gpuq_k8s.common.kube.status import Reply, call
from gpuq_k8s.common.model.annotations import CARD_NAME, QUEUE_NAME, RESOURCE_STRATEGY_WEIGHT
from gpuq_k8s.common.model.pods import GPUQ_SCHEDULER
from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.api import ensure_namespace
from tests.e2e.cluster_fixtures import Cluster
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.deployed_webhook import NAMESPACE, DeployedWebhook
from tests.e2e.scope_pods import plain_pods, pod_body
from tests.testing.builders import MakePod

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster

CERT_MANAGER = "cert-manager"
TOTAL = 1000
KILL_AFTER = 350
FAILED_CALLING = 'failed calling webhook "validate.gpuq.io"'
DENIED = 'admission webhook "validate.gpuq.io" denied the request'
CARD = " NVIDIA-A100 "


@dataclass(frozen=True)
class Governed:
    pod: MakePod
    valid: bool
    mark: tuple[str, str] | None  # the annotation the mutating webhook sets, and its value


GOVERNED = {
    "gpuq-scheduler": Governed(
        MakePod().scheduler(GPUQ_SCHEDULER).req(cpu="10m"), True, (QUEUE_NAME, "default")
    ),
    "card-name": Governed(
        MakePod().scheduler(None).annotations({CARD_NAME: CARD}), True, (CARD_NAME, "NVIDIA-A100")
    ),
    "bad-weight": Governed(
        MakePod().scheduler(GPUQ_SCHEDULER).annotations({RESOURCE_STRATEGY_WEIGHT: "not json"}), False, None
    ),
}
PLAIN = plain_pods(set_scheduler_name=False)
# values label -> (helm settings, namespaces excluded on top of kube-system and the release namespace)
VALUES: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    "defaults": ((), frozenset()),
    "excluded-cert-manager": (("webhook.excludedNamespaces={cert-manager}",), frozenset({CERT_MANAGER})),
}


@pytest.fixture
def deploy(
    control_plane: ControlPlane, tmp_path: Path
) -> Iterator[Callable[[Sequence[str]], DeployedWebhook]]:
    """``deploy(settings)``: the chart's webhook installed with ``settings`` and serving; removed after."""
    started: list[DeployedWebhook] = []

    def start(settings: Sequence[str]) -> DeployedWebhook:
        webhook = DeployedWebhook(control_plane, tmp_path, settings=settings)
        started.append(webhook)
        webhook.install()
        webhook.start()
        webhook.wait_serving()
        return webhook

    try:
        yield start
    finally:
        for webhook in started:
            webhook.remove()
        if started:
            started[-1].reset_certificates()


def _cases(namespaces: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
    """(namespace, variant, body), round-robin over namespaces and variants, TOTAL of them."""
    variants = [*PLAIN.items(), *((name, g.pod) for name, g in GOVERNED.items())]
    cases: list[tuple[str, str, dict[str, Any]]] = []
    while len(cases) < TOTAL:
        for namespace in namespaces:
            for variant, pod in variants:
                cases.append((namespace, variant, _restricted(pod_body(pod.copy(), namespace, variant))))
    return cases[:TOTAL]


def _restricted(body: dict[str, Any]) -> dict[str, Any]:
    """The Pod as the release namespace's PodSecurity level ("restricted", as the chart labels it) admits."""
    body["spec"]["securityContext"] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    for container in body["spec"]["containers"]:
        container["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    return body


async def _create_and_kill(
    api: ApiClient, cases: list[tuple[str, str, dict[str, Any]]], webhook: DeployedWebhook
) -> list[Reply]:
    gate = asyncio.Semaphore(8)
    answered = 0
    killed = asyncio.Event()

    async def one(namespace: str, body: dict[str, Any]) -> Reply:
        nonlocal answered
        async with gate:
            reply = await call(api, "POST", f"/api/v1/namespaces/{namespace}/pods", body)
        answered += 1
        if answered >= KILL_AFTER and not killed.is_set():
            killed.set()
            await asyncio.to_thread(webhook.kill)
        return reply

    return list(await asyncio.gather(*(one(ns, body) for ns, _, body in cases)))


@pytest.mark.parametrize("values", sorted(VALUES))
async def test_killing_the_webhook_mid_run_refuses_only_governed_pods_and_admits_none_unchecked(
    values: str, api_client: ApiClient, cluster: Cluster, deploy: Callable[[Sequence[str]], DeployedWebhook]
) -> None:
    settings, excluded = VALUES[values]
    apps = [await cluster.extra_namespace("app-a"), await cluster.extra_namespace("app-b")]
    for name in (CERT_MANAGER, "kube-system", NAMESPACE):
        await ensure_namespace(api_client, name)
    exempt = {"kube-system", NAMESPACE, *excluded}
    webhook = deploy(settings)
    namespaces = [*apps, CERT_MANAGER, "kube-system", NAMESPACE]
    cases = _cases(namespaces)
    created: list[tuple[str, str]] = []
    try:
        replies = await _create_and_kill(api_client, cases, webhook)
        created = [(r.body["metadata"]["namespace"], r.body["metadata"]["name"]) for r in replies if r.ok]
        wrong: list[str] = []
        checked = refused = 0
        for (namespace, variant, _), reply in zip(cases, replies, strict=True):
            what = f"{namespace}/{variant}: {reply.status} {reply.message}"
            if variant in PLAIN or namespace in exempt:
                if not reply.ok:
                    wrong.append(f"refused, not governed here: {what}")
                continue
            governed = GOVERNED[variant]
            if not reply.ok:
                expected = (FAILED_CALLING, DENIED) if not governed.valid else (FAILED_CALLING,)
                if not any(text in reply.message for text in expected):
                    wrong.append(f"refused without the webhook error: {what}")
                refused += FAILED_CALLING in reply.message
                continue
            annotations = reply.body["metadata"].get("annotations") or {}
            if not governed.valid or governed.mark is None:
                wrong.append(f"admitted although invalid: {what}")
            elif annotations.get(governed.mark[0]) != governed.mark[1]:
                wrong.append(f"admitted unchecked (no {governed.mark[0]}={governed.mark[1]}): {what}")
            else:
                checked += 1
        assert not wrong, f"{values}: {len(wrong)} of {TOTAL} creates went wrong:\n" + "\n".join(wrong[:20])
        assert checked > 0 and refused > 0, (
            f"{values}: {checked} checked before the kill, {refused} refused after"
        )
        # From the API: every governed Pod stored in a covered namespace went through both webhooks.
        for namespace in namespaces:
            if namespace in exempt:
                continue
            listing = await call(api_client, "GET", f"/api/v1/namespaces/{namespace}/pods")
            for pod in listing.body["items"]:
                variant = pod["metadata"]["generateName"].rstrip("-")
                if variant in GOVERNED:
                    mark = GOVERNED[variant].mark
                    assert mark is not None, (
                        f"{namespace}/{pod['metadata']['name']}: an invalid pod is stored"
                    )
                    annotations = pod["metadata"].get("annotations") or {}
                    assert annotations.get(mark[0]) == mark[1], (
                        f"{namespace}/{pod['metadata']['name']} unchecked"
                    )
        print(f"{values}: {len(created)} of {TOTAL} created, {checked} governed checked, {refused} refused")
    finally:
        for namespace, name in created:
            if namespace in (CERT_MANAGER, "kube-system", NAMESPACE):
                await call(api_client, "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")
