"""Continuous creates through the deployed webhook while its certificates rotate (issue 12, rotation).

Used by tests/e2e/test_webhook_rotation.py (the short run) and tests/bench/bench_cert_rotation.py (the
10-minute run). Workers create governed Pods (``schedulerName: gpuq-scheduler``) one after another and
delete them; a create counts as good only if the apiserver admitted it *and* the mutating webhook
patched it (the queue annotation): the mutating webhook is ``failurePolicy: Ignore``, so a TLS failure
there would otherwise pass unseen. An observer reads, every quarter second, the TLS Secret, the CA
Secret, the caBundle of the ValidatingWebhookConfiguration and the certificate the HTTPS port serves,
and records every distinct value in order.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from kubernetes_asyncio.client.api_client import ApiClient

from gpuq_k8s.common.kube.status import call
from gpuq_k8s.common.model.annotations import QUEUE_NAME
from gpuq_k8s.common.model.pods import GPUQ_SCHEDULER
from tests.e2e.deployed_webhook import CONFIGURATION, NAMESPACE
from tests.testing.builders import MakePod

SECRETS = f"/api/v1/namespaces/{NAMESPACE}/secrets"
VALIDATING = f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{CONFIGURATION}"


def _fingerprint(pem_or_der: bytes) -> str:
    return hashlib.sha256(pem_or_der).hexdigest()[:12]


def _pem_certificates(data: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(data) if data.strip() else []


@dataclass
class Rotations:
    """What the run saw, in order of first appearance."""

    servings: list[str] = field(default_factory=list)  # tls.crt of the TLS Secret
    served: list[str] = field(default_factory=list)  # certificates the HTTPS port handed out
    signing: list[str] = field(default_factory=list)  # ca.crt of the CA Secret (the signing CA)
    bundles: list[tuple[str, ...]] = field(default_factory=list)  # the caBundle, CA by CA
    creates: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def serving_rotations(self) -> int:
        return max(len(self.servings) - 1, 0)

    @property
    def ca_rollovers(self) -> int:
        """Completed rollovers: the bundle held two CAs, then only the new one."""
        done = 0
        for before, after in zip(self.bundles, self.bundles[1:], strict=False):
            if len(before) == 2 and after == before[1:]:
                done += 1
        return done

    def summary(self) -> str:
        seconds = self.seconds or self.seconds_now()
        return (
            f"{self.creates} creates in {seconds:.0f}s, {len(self.failures)} failed; "
            f"serving certificate rotated {self.serving_rotations} times "
            f"({len(self.served)} distinct certificates served on the port); "
            f"CA rolled over {self.ca_rollovers} times (bundle sizes {[len(b) for b in self.bundles]})"
        )

    started: float = field(default_factory=time.monotonic)

    def seconds_now(self) -> float:
        return time.monotonic() - self.started

    def add(self, seen: list[Any], value: Any) -> None:
        if value and (not seen or seen[-1] != value):
            seen.append(value)


def _no_verify() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def served_certificate(port: int) -> str | None:
    """The fingerprint of the certificate 127.0.0.1:``port`` hands out, or None if it does not answer."""
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=_no_verify(), server_hostname=None), 5
        )
    except (OSError, TimeoutError):
        return None
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return _fingerprint(x509.load_der_x509_certificate(der).public_bytes(Encoding.PEM))


async def secret_certificate(api: ApiClient) -> str | None:
    """The fingerprint of ``tls.crt`` in the TLS Secret, or None if there is none."""
    tls = await call(api, "GET", f"{SECRETS}/gpuq-webhook-tls")
    return _fingerprint(base64.b64decode(tls.body["data"]["tls.crt"])) if tls.ok else None


async def _observe(api: ApiClient, port: int, seen: Rotations) -> None:
    while True:
        seen.add(seen.servings, await secret_certificate(api))
        ca = await call(api, "GET", f"{SECRETS}/gpuq-webhook-ca")
        if ca.ok:
            seen.add(seen.signing, _fingerprint(base64.b64decode(ca.body["data"]["ca.crt"])))
        hooks = await call(api, "GET", VALIDATING)
        bundle = ((hooks.body.get("webhooks") or [{}])[0].get("clientConfig") or {}).get("caBundle")
        if bundle:
            cas = _pem_certificates(base64.b64decode(bundle))
            seen.add(seen.bundles, tuple(_fingerprint(c.public_bytes(Encoding.PEM)) for c in cas))
        seen.add(seen.served, await served_certificate(port))
        await asyncio.sleep(0.25)


async def _create_loop(
    api: ApiClient, namespace: str, worker: int, seen: Rotations, stop: asyncio.Event
) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods"
    n = 0
    while not stop.is_set():
        name = f"rot-{worker}-{n}"
        n += 1
        body = (
            MakePod(name, namespace)
            .image("registry.k8s.io/pause:3.10")
            .scheduler(GPUQ_SCHEDULER)
            .req(cpu="10m")
            .spec(automountServiceAccountToken=False)
            .obj()
        )
        seen.creates += 1
        try:
            reply = await call(api, "POST", path, body)
        except (OSError, TimeoutError) as err:  # aiohttp's errors are OSErrors
            seen.failures.append(f"{name}: {type(err).__name__}: {err}")
            continue
        if not reply.ok:
            seen.failures.append(f"{name}: {reply.status} {reply.message}")
            continue
        annotations = (reply.body.get("metadata") or {}).get("annotations") or {}
        if QUEUE_NAME not in annotations:
            seen.failures.append(f"{name}: admitted without the mutating webhook's patch")
        await call(api, "DELETE", f"{path}/{name}")


async def creates_while_rotating(
    api: ApiClient,
    namespace: str,
    port: int,
    *,
    done: Callable[[Rotations], bool],
    timeout: float,
    workers: int = 4,
    progress: Callable[[Rotations], None] | None = None,
) -> Rotations:
    """Create Pods until ``done(seen)`` (checked every second) or ``timeout`` seconds."""
    seen = Rotations()
    stop = asyncio.Event()
    start = time.monotonic()
    observer = asyncio.create_task(_observe(api, port, seen))
    loops = [asyncio.create_task(_create_loop(api, namespace, i, seen, stop)) for i in range(workers)]
    try:
        while time.monotonic() - start < timeout and not done(seen):
            await asyncio.sleep(1.0)
            if progress is not None:
                progress(seen)
    finally:
        stop.set()
        await asyncio.gather(*loops, return_exceptions=True)
        observer.cancel()
        await asyncio.gather(observer, return_exceptions=True)
        seen.seconds = time.monotonic() - start
    return seen
