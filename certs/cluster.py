"""Certificates in the cluster: the ``kubernetes.io/tls`` Secret the webhook mounts, the CA kept in a
Secret of its own (reused by the next rotation, so the caBundle stays), and the caBundle of the
webhook configurations (so the apiserver trusts the webhook's serving certificate)."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpuq_k8s.certs.authority import KeyPair
from gpuq_k8s.certs.files import key_pair_from_pem
from gpuq_k8s.common.model.errors import InvalidValue


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
    await _create_or_replace(core, namespace, name, body)


async def _create_or_replace(core: Any, namespace: str, name: str, body: Any) -> None:
    try:
        await core.create_namespaced_secret(namespace, body)
    except ApiException as err:
        if err.status != 409:
            raise
        await core.replace_namespaced_secret(name, namespace, body)


async def read_ca_secret(api_client: Any, namespace: str, name: str) -> KeyPair | None:
    """The CA kept in Secret ``namespace/name`` (``ca.crt``, ``ca.key``); None if there is none yet.
    A Secret that holds something else raises InvalidValue naming it (nothing is overwritten)."""
    core = client.CoreV1Api(api_client)
    try:
        secret = await core.read_namespaced_secret(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    data = secret.data or {}
    where = f"Secret/{namespace}/{name}"
    if "ca.crt" not in data or "ca.key" not in data:
        raise InvalidValue(where, sorted(data), "data with ca.crt and ca.key (a CA gpuq stored)")
    return key_pair_from_pem(
        base64.b64decode(data["ca.crt"]),
        base64.b64decode(data["ca.key"]),
        f"{where} ca.crt",
        f"{where} ca.key",
    )


async def write_ca_secret(api_client: Any, namespace: str, name: str, ca: KeyPair) -> None:
    """Keep the CA in Secret ``namespace/name`` (Opaque: ``ca.crt``, ``ca.key``) for the next run."""
    body: Any = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "gpuq"}},
        "data": {"ca.crt": _b64(ca.certificate_pem()), "ca.key": _b64(ca.private_key_pem())},
    }
    await _create_or_replace(client.CoreV1Api(api_client), namespace, name, body)


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
