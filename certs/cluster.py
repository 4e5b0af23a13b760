"""Writing certificates into the cluster: a ``kubernetes.io/tls`` Secret, and the caBundle of the
webhook configurations (so the apiserver trusts the webhook's serving certificate)."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from certs.authority import KeyPair


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


async def write_tls_secret(api_client: Any, namespace: str, name: str, pair: KeyPair, ca_pem: bytes) -> None:
    """Create or replace Secret ``namespace/name`` (type kubernetes.io/tls, with ``ca.crt``)."""
    core = client.CoreV1Api(api_client)
    body: Any = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "gpuq"}},
        "data": {
            "tls.crt": _b64(pair.certificate_pem()),
            "tls.key": _b64(pair.private_key_pem()),
            "ca.crt": _b64(ca_pem),
        },
    }
    try:
        await core.create_namespaced_secret(namespace, body)
    except ApiException as err:
        if err.status != 409:
            raise
        await core.replace_namespaced_secret(name, namespace, body)


async def inject_ca_bundle(
    api_client: Any, ca_pem: bytes, *, validating: Iterable[str] = (), mutating: Iterable[str] = ()
) -> list[str]:
    """Set ``clientConfig.caBundle`` of every webhook of the named configurations; returns what was
    patched as ``Kind/name``. A JSON patch with a ``test`` of the resourceVersion would fail on a
    concurrent edit; a merge of the whole ``webhooks`` list is what kubectl does, and the list is read
    just before."""
    api = client.AdmissionregistrationV1Api(api_client)
    bundle = _b64(ca_pem)
    patched: list[str] = []
    targets = [("ValidatingWebhookConfiguration", n) for n in validating]
    targets += [("MutatingWebhookConfiguration", n) for n in mutating]
    for kind, name in targets:
        current: Any
        if kind.startswith("Validating"):
            current = await api.read_validating_webhook_configuration(name)
        else:
            current = await api.read_mutating_webhook_configuration(name)
        ops = [
            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
            for i in range(len(current.webhooks or ()))
        ]
        if not ops:
            continue
        ops.insert(
            0, {"op": "test", "path": "/metadata/resourceVersion", "value": current.metadata.resource_version}
        )
        if kind.startswith("Validating"):
            await api.patch_validating_webhook_configuration(name, ops)
        else:
            await api.patch_mutating_webhook_configuration(name, ops)
        patched.append(f"{kind}/{name}")
    return patched
