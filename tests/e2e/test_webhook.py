"""The admission webhook called by the real kube-apiserver over TLS.

The webhook runs in a thread of its own (its own event loop and API client, as in its own process):
kubectl is a blocking subprocess, and the apiserver calls the webhook while kubectl waits.
Webhook configurations are url-based (``https://127.0.0.1:<port>``) with the test CA as caBundle. They
only match objects of this module (namespaces and cluster-scoped objects labelled
``gpuq-e2e-webhook``) and are deleted afterwards, so tests of other modules never meet a webhook that
has stopped.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gpuq_k8s.certs import create_ca, issue_serving_certificate, write_key_pair
from gpuq_k8s.certs.cluster import inject_ca_bundle
from gpuq_k8s.common.kube.client import new_api_client
from gpuq_k8s.webhook.admission import Admission
from gpuq_k8s.webhook.cluster import InformerView
from gpuq_k8s.webhook.endpoints import Endpoints
from gpuq_k8s.webhook.metrics import WebhookMetrics
from gpuq_k8s.webhook.server import create_app, start_site
from gpuq_k8s.webhook.tls import CertificateReloader
from tests.e2e.controlplane.harness import ControlPlane, Kubectl
from tests.e2e.url_webhook import LABEL, configurations, create
from tests.testing import dra
from tests.testing.builders import (
    GPU,
    MakeElasticQuota,
    MakeGPUResourceQuota,
    MakeNode,
    MakePod,
    MakePodGroup,
    MakeQueue,
)

pytestmark = pytest.mark.e2e

NODE = "gpuq-webhook-e2e-a100"


class WebhookThread:
    def __init__(self, kubeconfig: Path, cert: Path, key: Path) -> None:
        self.kubeconfig = kubeconfig
        self.reloader = CertificateReloader(cert, key)
        self.port = 0
        self.view: InformerView | None = None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        except BaseException as err:
            self._error = err
            self._ready.set()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        api = await new_api_client(str(self.kubeconfig))
        view = self.view = InformerView(api)
        view.informers.start()
        runner: web.BaseRunner | None = None
        try:
            await view.informers.wait_synced(60)
            # As `gpuq webhook` builds it: live reads before refusing, ready while the watches are live.
            admission = Admission(view, live=view)
            app = create_app(Endpoints(admission, WebhookMetrics(), lambda: view.ready))
            runner, self.port = await start_site(app, "127.0.0.1", 0, ssl_context=self.reloader.context)
            self._ready.set()
            await self._stop.wait()
        finally:
            if runner is not None:
                await runner.cleanup()
            await view.informers.stop()
            await api.close()

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(90), "webhook did not start"
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture(scope="module")
def webhook(
    control_plane: ControlPlane, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    directory = tmp_path_factory.mktemp("webhook-certs")
    ca = create_ca("gpuq-e2e-webhook-ca")
    pair = issue_serving_certificate(ca, ip_addresses=["127.0.0.1"])
    write_key_pair(pair, directory / "tls.crt", directory / "tls.key")
    # A fake GPU node: card discovery reads its labels and allocatable (no kubelet needed).
    node = MakeNode(NODE).product("NVIDIA-A100").label("nvidia.com/gpu.memory", "81920")
    kubectl("create", "-f", "-", stdin=json.dumps(node.obj()))
    status = {
        "status": {
            "capacity": {"cpu": "64", "nvidia.com/gpu": "8", "pods": "110"},
            "allocatable": {"cpu": "64", "nvidia.com/gpu": "8", "pods": "110"},
        }
    }
    kubectl("patch", "node", NODE, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    server = WebhookThread(control_plane.kubeconfig, directory / "tls.crt", directory / "tls.key")
    server.start()
    bundle = base64.b64encode(ca.certificate_pem()).decode()
    documents = configurations(server.port, bundle)
    kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": documents}))
    try:
        _wait_for_catalog(server)
        yield
    finally:
        kubectl("delete", "validatingwebhookconfiguration", "gpuq-e2e-validate", "--ignore-not-found")
        kubectl("delete", "mutatingwebhookconfiguration", "gpuq-e2e-mutate", "--ignore-not-found")
        kubectl("delete", "node", NODE, "--ignore-not-found")
        kubectl("delete", "queues", "-l", f"{LABEL}=true", "--ignore-not-found")
        server.stop()


def _wait_for_catalog(server: WebhookThread) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.view is not None and "NVIDIA-A100" in server.view.card_catalog():
            return
        time.sleep(0.05)
    raise AssertionError("the webhook never saw the GPU node")


@pytest.fixture
def ns(webhook: None, namespace: str, kubectl: Kubectl) -> str:
    kubectl("label", "namespace", namespace, f"{LABEL}=true")
    return namespace


# Templates (copy() before use). Queues carry the label the webhook configurations match.
QUEUE = MakeQueue().label(LABEL, "true").capability(cpu="100", memory="200Gi")
POD = MakePod().image("busybox")


def _wait_visible(server_kind: str, check: Any) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"{server_kind} never reached the webhook's cache")


def test_invalid_objects_are_denied_with_their_message_and_valid_ones_created(
    ns: str, kubectl: Kubectl
) -> None:
    suffix = ns[-8:]
    good_queue = f"wq-{suffix}"
    ok, out = create(kubectl, QUEUE.copy().name(good_queue).card_quota('{"NVIDIA-A100": 2}').obj())
    assert ok, out
    ok, out = create(kubectl, QUEUE.copy().name(f"bad-{suffix}").card_quota('{"NVIDIA-A100": -1}').obj())
    assert not ok
    assert "denied the request" in out and f"Queue/bad-{suffix}" in out and "volcano.sh/card.quota" in out
    closed = f"closed-{suffix}"
    assert create(kubectl, QUEUE.copy().name(closed).card_quota('{"NVIDIA-A100": 2}').obj())[0]
    kubectl(
        "patch",
        "queue",
        closed,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"state":"Closed"}}',
    )
    time.sleep(0.5)  # the webhook's informer sees the queues

    group = MakePodGroup("pg", ns).min_member(1)
    one_card = POD.copy().namespace(ns).lim({"cpu": "1", GPU: "1"})
    a100 = one_card.copy().queue(good_queue).card("NVIDIA-A100")
    cases: list[tuple[dict[str, Any], bool, list[str]]] = [
        (group.copy().name("pg-ok").queue(good_queue).card_request('{"NVIDIA-A100": 2}').obj(), True, []),
        (
            group.copy().name("pg-over").queue(good_queue).card_request('{"NVIDIA-A100": 3}').obj(),
            False,
            [f"PodGroup/{ns}/pg-over", "requested 3", "available 2"],
        ),
        (
            group.copy().name("pg-noq").queue("no-such-queue").card_request('{"NVIDIA-A100": 1}').obj(),
            False,
            ["spec.queue", "no-such-queue"],
        ),
        (
            group.copy().name("pg-closed").queue(closed).card_request('{"NVIDIA-A100": 1}').obj(),
            False,
            ["Open", "Closed"],
        ),
        (
            group.copy().name("pg-json").queue(good_queue).card_request("{").obj(),
            False,
            ["volcano.sh/card.request", "invalid JSON"],
        ),
        (a100.copy().name("p-ok").obj(), True, []),
        (
            a100.copy().name("p-over").lim({GPU: "3"}).obj(),
            False,
            [f"Pod/{ns}/p-over", "NVIDIA-A100", "requested 3", "available 2"],
        ),
        (
            one_card.copy().name("p-syntax").card("A||B").obj(),
            False,
            ["volcano.sh/card.name", "empty"],
        ),
        (
            MakeElasticQuota("eq-bad", ns).min(cpu="4").max(cpu="2").obj(),
            False,
            [f"ElasticQuota/{ns}/eq-bad", "spec.min[cpu]"],
        ),
        (
            MakeGPUResourceQuota("grq-bad", ns)
            .total(requests={"tflops": "10", "vram": "10Gi"}, limits={"tflops": "10", "vram": "1Gi"})
            .obj(),
            False,
            [f"GPUResourceQuota/{ns}/grq-bad", "spec.total.limits.vram"],
        ),
    ]
    for document, allowed, parts in cases:
        ok, out = create(kubectl, document)
        name = document["metadata"]["name"]
        assert ok == allowed, (name, out)
        for part in parts:
            assert part in out, (name, part, out)


def test_a_claim_that_can_never_fit_a_card_quota_is_denied_at_create(ns: str, kubectl: Kubectl) -> None:
    """issue 26: the webhook reads the published devices (a ResourceSlice standing in for a driver) and
    the Queues' card quotas; a ResourceClaim asking more H100s than any Queue's quota, or a template
    whose claims would, is refused at create naming the object, the field, the value and the quota;
    one that fits, or whose firstAvailable alternative fits, is created."""
    suffix = ns[-8:]
    driver = f"{suffix}.gpu.example.com"
    klass = f"gpu-{suffix}"
    h100 = f'device.attributes["{driver}"].productName == "NVIDIA H100"'
    slice_name = f"{NODE}-{suffix}"
    gpus = [dra.device(f"gpu-{i}", {"productName": "NVIDIA H100"}, {"memory": "80Gi"}) for i in range(4)]
    assert create(kubectl, dra.device_class(klass, driver))[0]
    assert create(kubectl, dra.resource_slice(slice_name, NODE, gpus, driver))[0]
    quota = QUEUE.copy().name(f"dq-{suffix}").card_quota('{"NVIDIA-H100": 8}').obj()
    assert create(kubectl, quota)[0]
    try:
        time.sleep(1)  # the webhook's informers see the slice and the queue
        over = dra.claim("over", ns, dra.exactly("gpu", klass, 16, selector=h100))
        ok, out = create(kubectl, over)
        assert not ok, out
        for part in (
            f"ResourceClaim/{ns}/over",
            "spec.devices.requests[0].exactly.count",
            "invalid value 16",
            f"NVIDIA-H100: 8 (Queue/dq-{suffix})",
        ):
            assert part in out, (part, out)
        template = dra.claim_template("over-t", ns, dra.exactly("gpu", klass, 16, selector=h100))
        ok, out = create(kubectl, template)
        assert not ok and f"ResourceClaimTemplate/{ns}/over-t" in out and "spec.spec.devices" in out, out
        assert create(kubectl, dra.claim("fits", ns, dra.exactly("gpu", klass, 8, selector=h100)))[0]
        either = dra.first_available(
            "gpu",
            {"name": "many", "deviceClassName": klass, "count": 16},
            {"name": "few", "deviceClassName": klass, "count": 2},
        )
        assert create(kubectl, dra.claim("either", ns, either))[0]
    finally:
        kubectl("delete", "resourceslice", slice_name, "--ignore-not-found")
        kubectl("delete", "deviceclass", klass, "--ignore-not-found")


def test_pod_in_a_namespace_with_a_gpu_resource_quota_gets_its_defaults(ns: str, kubectl: Kubectl) -> None:
    quota = MakeGPUResourceQuota("quota", ns).single(
        maxGPUCount=2,
        defaultRequests={"tflops": "10", "vram": "4Gi"},
        defaultLimits={"tflops": "20", "vram": "8Gi"},
    )
    ok, out = create(kubectl, quota.obj())
    assert ok, out
    ok, out = create(kubectl, quota.copy().name("second").obj())
    assert not ok and "at most one GPUResourceQuota" in out
    time.sleep(0.5)
    default_pod = POD.copy().namespace(ns).scheduler("default-scheduler").lim(cpu="1")
    ok, out = create(kubectl, default_pod.copy().name("worker").lim({GPU: "2"}).obj())
    assert ok, out
    annotations = json.loads(out)["metadata"]["annotations"]
    assert annotations["tensor-fusion.ai/tflops-request"] == "10"
    assert annotations["tensor-fusion.ai/vram-request"] == "4Gi"
    assert annotations["tensor-fusion.ai/tflops-limit"] == "20"
    assert annotations["tensor-fusion.ai/vram-limit"] == "8Gi"
    assert annotations["tensor-fusion.ai/gpu-count"] == "2"
    ok, out = create(kubectl, default_pod.copy().name("too-many").lim({GPU: "3"}).obj())
    assert not ok and "single.maxGPUCount" in out and "requested 3" in out


APPLY_ROUNDS = 100


def test_one_file_with_a_queue_a_podgroup_and_its_pods_applies_every_time(ns: str, kubectl: Kubectl) -> None:
    """Issue 12, stale cache: `kubectl apply -f` of one file holding a Queue, a PodGroup naming it and
    the PodGroup's pods succeeds every time, although the webhook's cache sees the Queue and the
    PodGroup only after they were created (a live read stands in); the pods land in the PodGroup's
    queue, which the mutation reads from the PodGroup."""
    suffix = ns[-6:]
    for round_ in range(APPLY_ROUNDS):
        queue = f"aq-{suffix}-{round_}"
        group = MakePodGroup(f"apg-{round_}", ns).queue(queue).min_member(2)
        items = [
            QUEUE.copy().name(queue).card_quota('{"NVIDIA-A100": 4}').obj(),
            group.card_request('{"NVIDIA-A100": 2}').obj(),
            *(
                POD.copy().name(f"ap-{round_}-{i}").namespace(ns).group(f"apg-{round_}").req(cpu="1").obj()
                for i in range(2)
            ),
        ]
        result = kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
            check=False,
        )
        assert result.returncode == 0, f"round {round_}: {result.stderr}"
        pod = json.loads(kubectl("get", "pod", "-n", ns, f"ap-{round_}-0", "-o", "json").stdout)
        assert pod["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == queue


def test_objects_made_invalid_while_the_webhook_was_off_never_wedge(
    webhook: None, namespace: str, kubectl: Kubectl
) -> None:
    """Issue 12, wedge: objects that gpuq's rules call invalid, created while the webhook did not cover
    their namespace, carry finalizers. With the webhook on (the namespace labelled, and a new problem
    refused to prove it), their labels and valid parts still change, and once deleted their finalizers
    come off by UPDATE and they are gone. These test configurations send even the UPDATEs of objects
    being deleted to the webhook (the chart's do not), so the ratchet itself is what admits them."""
    keep = ["example.com/keep"]
    invalid = {
        "elasticquota/eq": MakeElasticQuota("eq", namespace).min(cpu="4").max(cpu="2"),
        "gpuresourcequota/grq": MakeGPUResourceQuota("grq", namespace).total(
            requests={"tflops": "10", "vram": "10Gi"}, limits={"tflops": "10", "vram": "5Gi"}
        ),
        "podgroup/pg": MakePodGroup("pg", namespace).min_member(1).card_request("{nope"),
    }
    for builder in invalid.values():
        obj = builder.obj()
        obj["metadata"]["finalizers"] = keep
        ok, out = create(kubectl, obj)
        assert ok, out
    kubectl("label", "namespace", namespace, f"{LABEL}=true")  # the webhook now covers them
    changes = {
        "elasticquota/eq": ('{"spec":{"max":{"cpu":"2","memory":"8Gi"}}}', '{"spec":{"min":{"cpu":"5"}}}'),
        "gpuresourcequota/grq": (
            '{"spec":{"total":{"maxWorkers":3}}}',
            '{"spec":{"total":{"limits":{"vram":"4Gi"}}}}',
        ),
        "podgroup/pg": (
            '{"spec":{"minMember":2}}',
            '{"metadata":{"annotations":{"volcano.sh/card.request":"{x"}}}',
        ),
    }

    def patch(target: str, body: str) -> tuple[bool, str]:
        result = kubectl("patch", "-n", namespace, target, "--type=merge", "-p", body, check=False)
        return result.returncode == 0, result.stderr

    deadline = time.monotonic() + 10
    while patch("elasticquota/eq", changes["elasticquota/eq"][1])[0]:  # until the webhook covers it
        assert time.monotonic() < deadline, "the webhook never covered the labelled namespace"
        kubectl(
            "patch", "-n", namespace, "elasticquota/eq", "--type=merge", "-p", '{"spec":{"min":{"cpu":"4"}}}'
        )
        time.sleep(0.2)
    for target, (valid, new_problem) in changes.items():
        ok, err = patch(target, new_problem)
        assert not ok and "denied the request" in err, f"{target}: a new problem was admitted"
        assert patch(target, '{"metadata":{"labels":{"team":"a"}}}')[0], f"{target}: label refused"
        ok, err = patch(target, valid)
        assert ok, f"{target}: a change of its valid parts was refused: {err}"
        kubectl("delete", "-n", namespace, target, "--wait=false")
        ok, err = patch(target, '{"metadata":{"finalizers":null}}')
        assert ok, f"{target}: finalizers could not be removed: {err}"
        gone = kubectl("get", "-n", namespace, target, "--ignore-not-found", "-o", "name").stdout.strip()
        assert not gone, f"{target} still exists"


async def test_ca_bundle_injection(kubectl: Kubectl, api_client: Any) -> None:
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "gpuq-e2e-inject"},
        "webhooks": [
            {
                "name": "inject.gpuq.e2e",
                "clientConfig": {"url": "https://127.0.0.1:1/validate"},
                "rules": [
                    {
                        "apiGroups": ["example.com"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["x"],
                    }
                ],
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
            }
        ],
    }
    kubectl("create", "-f", "-", stdin=json.dumps(config))
    try:
        ca = create_ca("inject-ca")
        patched = await inject_ca_bundle(api_client, ca.certificate_pem(), validating=["gpuq-e2e-inject"])
        assert patched == ["ValidatingWebhookConfiguration/gpuq-e2e-inject"]
        out = json.loads(
            kubectl("get", "validatingwebhookconfiguration", "gpuq-e2e-inject", "-o", "json").stdout
        )
        assert base64.b64decode(out["webhooks"][0]["clientConfig"]["caBundle"]) == ca.certificate_pem()
    finally:
        kubectl("delete", "validatingwebhookconfiguration", "gpuq-e2e-inject", "--ignore-not-found")
