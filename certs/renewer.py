"""Keeping the webhook's certificates renewed in the cluster (the decisions are :mod:`certs.renewal`).

Runs inside ``gpuq webhook --renew-certificates``; of its replicas only the holder of a Lease writes
(:class:`~common.kube.leader.LeaderElector`, writes gated per request by
:class:`~common.kube.client.GatedClient`). Every ``interval`` the leader:

1. reads the CA Secret (the state: ``ca.crt``/``ca.key`` the signing CA, as ``gpuq certs issue`` keeps
   it, plus ``next-ca.crt``/``next-ca.key`` and ``retiring-ca.crt`` during a rollover, and the
   annotation ``gpuq.io/ca-changed-at``) and the TLS Secret;
2. takes at most one rollover step and writes the CA Secret (a PUT carrying the resourceVersion read:
   two writers never both succeed);
3. sets the caBundle of the webhook configurations to the bundle when it differs;
4. issues a serving certificate when one is due, into the TLS Secret (``tls.crt``, ``tls.key`` and the
   bundle as ``ca.crt``), which every replica reads (:mod:`webhook.tls_secret`).

A step that fails half-way is finished by the next tick: each tick starts from what the API holds.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import ipaddress
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from gpuq_k8s.certs.authority import KeyPair, create_ca, issue_serving_certificate
from gpuq_k8s.certs.files import key_pair_from_pem
from gpuq_k8s.certs.renewal import (
    Authorities,
    RenewalPolicy,
    next_authorities,
    read_time,
    serving_renewal,
)
from gpuq_k8s.common.kube.client import GatedClient
from gpuq_k8s.common.kube.errors import NotFound
from gpuq_k8s.common.kube.leader import LeaderElector
from gpuq_k8s.common.kube.status import Reply, call
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.errors import GpuqError, InvalidValue

log = logging.getLogger(__name__)

CHANGED_AT: Final = "gpuq.io/ca-changed-at"
LONG_AGO: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def bundle_pem(certificates: Sequence[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certificates)


def serving_names(dns_names: Sequence[str], ip_addresses: Sequence[str]) -> list[x509.GeneralName]:
    """The subjectAltName entries :func:`~certs.authority.issue_serving_certificate` writes."""
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    return names + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]


def authorities_from_secret(secret: Mapping[str, Any], where: str) -> Authorities:
    """The state kept in the CA Secret (a Secret of ``gpuq certs issue --ca-secret`` has no rollover
    under way and no time: its grace is long over)."""
    data = secret.get("data") or {}

    def pem(key: str) -> bytes:
        try:
            return base64.b64decode(data[key], validate=True)
        except (binascii.Error, TypeError):
            raise InvalidValue(f"{where} data.{key}", "(not shown)", "base64") from None

    if "ca.crt" not in data or "ca.key" not in data:
        raise InvalidValue(where, sorted(data), "data with ca.crt and ca.key (a CA gpuq stored)")
    signing = key_pair_from_pem(pem("ca.crt"), pem("ca.key"), f"{where} ca.crt", f"{where} ca.key")
    incoming = None
    if "next-ca.crt" in data and "next-ca.key" in data:
        incoming = key_pair_from_pem(
            pem("next-ca.crt"), pem("next-ca.key"), f"{where} next-ca.crt", f"{where} next-ca.key"
        )
    retiring = None
    if "retiring-ca.crt" in data:
        try:
            retiring = x509.load_pem_x509_certificate(pem("retiring-ca.crt"))
        except ValueError:
            raise InvalidValue(f"{where} retiring-ca.crt", "(not shown)", "a PEM certificate") from None
    stamp = ((secret.get("metadata") or {}).get("annotations") or {}).get(CHANGED_AT)
    changed_at = read_time(stamp, f"{where} {CHANGED_AT}") if stamp else LONG_AGO
    return Authorities(signing, changed_at, incoming=incoming, retiring=retiring)


def secret_of_authorities(namespace: str, name: str, authorities: Authorities) -> dict[str, Any]:
    data = {"ca.crt": authorities.signing.certificate_pem(), "ca.key": authorities.signing.private_key_pem()}
    if authorities.incoming is not None:
        data["next-ca.crt"] = authorities.incoming.certificate_pem()
        data["next-ca.key"] = authorities.incoming.private_key_pem()
    if authorities.retiring is not None:
        data["retiring-ca.crt"] = authorities.retiring.public_bytes(serialization.Encoding.PEM)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "gpuq"},
            "annotations": {CHANGED_AT: authorities.changed_at.isoformat()},
        },
        "data": {key: _b64(value) for key, value in data.items()},
    }


@dataclass
class CertificateRenewer:
    """One writer of the webhook's certificates: ``tick()`` does one round (see the module doc)."""

    api_client: Any
    namespace: str
    tls_secret: str
    ca_secret: str
    webhook_configurations: Sequence[str]
    dns_names: Sequence[str]
    ip_addresses: Sequence[str] = ()
    policy: RenewalPolicy = field(default_factory=RenewalPolicy)
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
    ca_name: str = "gpuq-webhook-ca"
    serving_rotations: int = 0
    ca_rotations: int = 0

    def __post_init__(self) -> None:
        self.policy.validate()
        if not self.dns_names and not self.ip_addresses:
            raise InvalidValue("--service", "", "a Service name (the serving certificate's DNS names)")

    def _path(self, name: str) -> str:
        return kinds.SECRET.object_path(self.namespace, name)

    async def tick(self) -> list[str]:
        """One round; returns what it did, one line each."""
        done: list[str] = []
        now = self.clock()
        ca_reply = await self._get(self._path(self.ca_secret))
        where = f"Secret/{self.namespace}/{self.ca_secret}"
        current = authorities_from_secret(ca_reply.body, where) if ca_reply.ok else None
        tls_reply = await self._get(self._path(self.tls_secret))
        serving = _serving_of(tls_reply) if tls_reply.ok else None

        step = next_authorities(
            current, serving.certificate if serving else None, now, self.policy, self._new_ca
        )
        authorities = step.authorities
        if step.reason is not None:
            await self._write(ca_reply, secret_of_authorities(self.namespace, self.ca_secret, authorities))
            if current is None or authorities.signing is not current.signing:
                self.ca_rotations += current is not None
            done.append(f"{where}: {step.reason}")
        bundle = bundle_pem(authorities.bundle())
        done += await self._inject(bundle)

        names = serving_names(self.dns_names, self.ip_addresses)
        why = serving_renewal(serving.certificate if serving else None, authorities, names, now, self.policy)
        tls_where = f"Secret/{self.namespace}/{self.tls_secret}"
        if why is not None:
            serving = issue_serving_certificate(
                authorities.signing,
                dns_names=self.dns_names,
                ip_addresses=self.ip_addresses,
                validity=self.policy.serving_validity,
                now=now,
            )
            self.serving_rotations += 1
            done.append(f"{tls_where}: new serving certificate ({why})")
        assert serving is not None
        if why is not None or _ca_of(tls_reply) != bundle:
            await self._write_tls(tls_reply, serving, bundle)
        return done

    def _new_ca(self) -> KeyPair:
        return create_ca(
            f"{self.ca_name}.{self.namespace}", validity=self.policy.ca_validity, now=self.clock()
        )

    async def _get(self, path: str) -> Reply:
        reply = await call(self.api_client, "GET", path)
        if not reply.ok and not isinstance(reply.error, NotFound):
            raise _failed(f"read {path}", reply)
        return reply

    async def _write_tls(self, previous: Reply, serving: KeyPair, bundle: bytes) -> None:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": self.tls_secret,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/part-of": "gpuq"},
            },
            "data": {
                "tls.crt": _b64(serving.certificate_pem()),
                "tls.key": _b64(serving.private_key_pem()),
                "ca.crt": _b64(bundle),
            },
        }
        await self._write(previous, body)

    async def _write(self, previous: Reply, body: dict[str, Any]) -> None:
        """Create the Secret, or replace the version ``previous`` read (a PUT carrying its
        resourceVersion: a concurrent writer makes it fail, and the next round starts over)."""
        name = body["metadata"]["name"]
        if previous.ok:
            body["metadata"]["resourceVersion"] = previous.body["metadata"]["resourceVersion"]
            reply = await call(self.api_client, "PUT", self._path(name), body)
        else:
            reply = await call(self.api_client, "POST", kinds.SECRET.collection(self.namespace), body)
        if not reply.ok:
            raise _failed(f"write Secret/{self.namespace}/{name}", reply)

    async def _inject(self, bundle: bytes) -> list[str]:
        """Set the caBundle of every webhook of the configurations where it differs (a JSON patch
        that first tests the resourceVersion read)."""
        encoded = _b64(bundle)
        done = []
        for kind in (kinds.VALIDATING_WEBHOOK_CONFIGURATION, kinds.MUTATING_WEBHOOK_CONFIGURATION):
            for name in self.webhook_configurations:
                path = kind.object_path("", name)
                current = await self._get(path)
                if not current.ok:
                    continue  # not installed (yet): nothing trusts the webhook through it
                hooks = current.body.get("webhooks") or []
                stale = [
                    i
                    for i, hook in enumerate(hooks)
                    if (hook.get("clientConfig") or {}).get("caBundle") != encoded
                ]
                if not stale:
                    continue
                version = current.body["metadata"]["resourceVersion"]
                ops: list[dict[str, Any]] = [
                    {"op": "test", "path": "/metadata/resourceVersion", "value": version}
                ]
                ops += [
                    {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": encoded}
                    for i in stale
                ]
                reply = await call(
                    self.api_client, "PATCH", path, ops, content_type="application/json-patch+json"
                )
                if not reply.ok:
                    raise _failed(f"patch {kind.plural}/{name}", reply)
                authorities = bundle.count(b"BEGIN")
                done.append(
                    f"{kind.plural}/{name}: caBundle of {len(stale)} webhook(s) set ({authorities} CA)"
                )
        return done

    async def run(self, elector: LeaderElector, interval: float) -> None:
        """Renew while leading the Lease; stand by otherwise; until cancelled."""
        gated = GatedClient(self.api_client, elector.writes_allowed)
        reads = self.api_client
        while True:
            election = asyncio.create_task(elector.run())
            try:
                await elector.leading.wait()
                self.api_client = gated
                while not elector.lost.is_set():
                    await self._tick_logged()
                    await asyncio.sleep(interval)
            finally:
                self.api_client = reads
                election.cancel()
                await asyncio.gather(election, return_exceptions=True)
            elector.leading.clear()
            elector.lost.clear()

    async def _tick_logged(self) -> None:
        try:
            for line in await self.tick():
                log.info("certificates: %s", line)
        except (RenewalFailed, GpuqError) as err:  # GpuqError: the API's errors (common.kube.errors) too
            log.warning("certificates: renewal round failed, retrying: %s", err)
        except Exception:
            # Anything else is a bug, but it must not end renewal for the life of the process (the
            # replica stays ready and serving while its certificate runs out): logged in full, retried.
            log.exception("certificates: renewal round failed unexpectedly, retrying")


class RenewalFailed(RuntimeError):
    """An API request of a renewal round was refused; the next round starts over."""


def _failed(what: str, reply: Reply) -> RenewalFailed:
    return RenewalFailed(f"{what}: the API server answered {reply.status}: {reply.message}")


def _serving_of(reply: Reply) -> KeyPair | None:
    data = reply.body.get("data") or {}
    if "tls.crt" not in data or "tls.key" not in data:
        return None
    try:
        return key_pair_from_pem(
            base64.b64decode(data["tls.crt"]), base64.b64decode(data["tls.key"]), "tls.crt", "tls.key"
        )
    except (InvalidValue, binascii.Error, TypeError):
        return None  # unreadable: replaced by a fresh one


def _ca_of(reply: Reply) -> bytes | None:
    data = reply.body.get("data") or {} if reply.ok else {}
    try:
        return base64.b64decode(data["ca.crt"], validate=True) if "ca.crt" in data else None
    except (binascii.Error, TypeError):
        return None  # unreadable: rewritten with the bundle
