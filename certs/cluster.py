"""Certificates in the cluster: the ``kubernetes.io/tls`` Secret the webhook mounts, the CA kept in a
Secret of its own (reused by the next rotation, so the caBundle stays), and the caBundle of the
webhook configurations (so the apiserver trusts the webhook's serving certificate).

Every request goes through gpuq's request path (:func:`common.kube.status.call`), as the renewer's do;
an error status raises its :class:`~common.kube.errors.ApiError`, a request that got no answer its
:class:`~common.kube.errors.RequestFailed`."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any, Final

from gpuq_k8s.certs.authority import KeyPair
from gpuq_k8s.certs.files import key_pair_from_pem
from gpuq_k8s.common.kube.errors import Conflict, NotFound
from gpuq_k8s.common.kube.status import call
from gpuq_k8s.common.model.errors import InvalidValue

ADMISSION: Final = "/apis/admissionregistration.k8s.io/v1"
JSON_PATCH: Final = "application/json-patch+json"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _secrets(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/secrets"


async def write_tls_secret(api_client: Any, namespace: str, name: str, pair: KeyPair, ca_pem: bytes) -> None:
    """Create or replace Secret ``namespace/name`` (type kubernetes.io/tls, with ``ca.crt``)."""
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
    await _create_or_replace(api_client, namespace, name, body)


async def _create_or_replace(api_client: Any, namespace: str, name: str, body: Any) -> None:
    try:
        (await call(api_client, "POST", _secrets(namespace), body)).raise_for_status()
    except Conflict:  # AlreadyExists
        (await call(api_client, "PUT", f"{_secrets(namespace)}/{name}", body)).raise_for_status()


async def read_ca_secret(api_client: Any, namespace: str, name: str) -> KeyPair | None:
    """The CA kept in Secret ``namespace/name`` (``ca.crt``, ``ca.key``); None if there is none yet.
    A Secret that holds something else raises InvalidValue naming it (nothing is overwritten)."""
    try:
        secret = (await call(api_client, "GET", f"{_secrets(namespace)}/{name}")).raise_for_status()
    except NotFound:
        return None
    data = secret.body.get("data") or {}
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
    await _create_or_replace(api_client, namespace, name, body)


async def inject_ca_bundle(
    api_client: Any, ca_pem: bytes, *, validating: Iterable[str] = (), mutating: Iterable[str] = ()
) -> list[str]:
    """Set ``clientConfig.caBundle`` of every webhook of the named configurations; returns what was
    patched as ``Kind/name``. A JSON patch with a ``test`` of the resourceVersion would fail on a
    concurrent edit; a merge of the whole ``webhooks`` list is what kubectl does, and the list is read
    just before."""
    bundle = _b64(ca_pem)
    patched: list[str] = []
    targets = [("ValidatingWebhookConfiguration", n) for n in validating]
    targets += [("MutatingWebhookConfiguration", n) for n in mutating]
    for kind, name in targets:
        path = f"{ADMISSION}/{kind.lower()}s/{name}"
        current = (await call(api_client, "GET", path)).raise_for_status().body
        ops: list[dict[str, Any]] = [
            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
            for i in range(len(current.get("webhooks") or ()))
        ]
        if not ops:
            continue
        version = (current.get("metadata") or {}).get("resourceVersion")
        ops.insert(0, {"op": "test", "path": "/metadata/resourceVersion", "value": version})
        (await call(api_client, "PATCH", path, ops, content_type=JSON_PATCH)).raise_for_status()
        patched.append(f"{kind}/{name}")
    return patched
