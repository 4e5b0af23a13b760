"""``gpuq certs``: issue the webhook's CA and serving certificate, and inject the CA bundle.

    gpuq certs issue --service gpuq-webhook --namespace gpuq-system --out-dir ./certs
        [--ca-cert F --ca-key F | --ca-secret gpuq-webhook-ca] [--secret gpuq-webhook-tls]
        [--kubeconfig P] [--inject-validating gpuq --inject-mutating gpuq]
    gpuq certs inject --ca-file ca.crt --validating gpuq --mutating gpuq [--kubeconfig P]

The serving certificate covers the Service's DNS names (``svc``, ``svc.ns``, ``svc.ns.svc``,
``svc.ns.svc.cluster.local``) plus any ``--dns-name``/``--ip``. An existing CA (``--ca-cert/--ca-key``,
or the one kept in ``--ca-secret``) is reused so rotating the serving certificate does not change the
caBundle: the apiserver trusts the new certificate the moment the webhook serves it. With
``--ca-secret`` the CA is created and stored there on the first run, and replaced only when it is
within a leaf's validity (a year) of expiring.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from http import HTTPStatus
from typing import Any

from gpuq_k8s.certs.authority import KeyPair, ca_still_good, create_ca, issue_serving_certificate
from gpuq_k8s.certs.cluster import inject_ca_bundle, read_ca_secret, write_ca_secret, write_tls_secret
from gpuq_k8s.certs.files import load_key_pair, write_key_pair
from gpuq_k8s.certs.flags import CertsOptions, IssueOptions, add_flags
from gpuq_k8s.common.kube.client import new_api_client
from gpuq_k8s.common.kube.errors import ApiError
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.process.flags import ClusterOptions


def service_dns_names(service: str, namespace: str, cluster_domain: str = "cluster.local") -> list[str]:
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.{cluster_domain}",
    ]


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``certs`` (with ``issue`` and ``inject``) to the ``gpuq`` sub-commands; args' ``func`` runs it."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "certs", help="issue the webhook's certificates and inject the CA bundle"
    )
    add_flags(parser)
    parser.set_defaults(func=main)
    return parser


def main(args: argparse.Namespace) -> int:
    try:
        options = CertsOptions.from_args(args)
        options.preflight()
        if options.issue is not None:
            return _issue(options.cluster, options.issue)
        assert options.inject is not None
        inject = options.inject
        return asyncio.run(
            _inject(options.cluster, inject.ca_file.read_bytes(), inject.validating, inject.mutating)
        )
    except ApiError as err:
        print(
            f"gpuq certs: the API server answered {err.status} {_phrase(err.status)}: {err}", file=sys.stderr
        )
        return 1
    except (GpuqError, OSError, ValueError) as err:
        print(f"gpuq certs: {err}", file=sys.stderr)
        return 2


def _phrase(status: int) -> str:
    """The HTTP reason phrase of ``status`` (the apiserver's status line says the same)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _issue(cluster: ClusterOptions, options: IssueOptions) -> int:
    ca: KeyPair
    if options.ca_secret:
        ca = asyncio.run(_kept_ca(cluster, options, options.ca_secret))
    elif options.ca_cert and options.ca_key:
        ca = load_key_pair(options.ca_cert, options.ca_key)
    else:
        ca = create_ca(f"gpuq-webhook-ca.{options.namespace}")
    return _issue_with(cluster, options, ca)


async def _kept_ca(cluster: ClusterOptions, options: IssueOptions, ca_secret: str) -> KeyPair:
    """The CA kept in ``--ca-secret`` while it is good for another leaf, else a new one kept there."""
    api = await new_api_client(cluster.kubeconfig, cluster.context)
    try:
        kept = await read_ca_secret(api, options.namespace, ca_secret)
        where = f"Secret {options.namespace}/{ca_secret}"
        if kept is not None and ca_still_good(kept):
            ca = kept
            until = kept.certificate.not_valid_after_utc.date().isoformat()
            print(f"reusing the CA kept in {where} (valid until {until}): the caBundle does not change")
        else:
            ca = create_ca(f"gpuq-webhook-ca.{options.namespace}")
            await write_ca_secret(api, options.namespace, ca_secret, ca)
            why = "none kept yet" if kept is None else "the kept one is not good for another year"
            print(f"issued a new CA ({why}), kept in {where}")
    finally:
        await api.close()
    return ca


def _issue_with(cluster: ClusterOptions, options: IssueOptions, ca: KeyPair) -> int:
    names = service_dns_names(options.service, options.namespace, options.cluster_domain)
    names += list(options.dns_names)
    pair = issue_serving_certificate(ca, dns_names=names, ip_addresses=list(options.ip_addresses))
    if options.out_dir:
        out = options.out_dir
        write_key_pair(ca, out / "ca.crt", out / "ca.key")
        write_key_pair(pair, out / "tls.crt", out / "tls.key")
        print(f"wrote {out}/ca.crt, ca.key, tls.crt, tls.key ({', '.join(names)})")
    if options.to_cluster:
        return asyncio.run(_to_cluster(cluster, options, ca, pair))
    return 0


async def _to_cluster(cluster: ClusterOptions, options: IssueOptions, ca: KeyPair, pair: KeyPair) -> int:
    api = await new_api_client(cluster.kubeconfig, cluster.context)
    try:
        if options.secret:
            await write_tls_secret(api, options.namespace, options.secret, pair, ca.certificate_pem())
            print(f"wrote Secret {options.namespace}/{options.secret}")
        patched = await inject_ca_bundle(
            api, ca.certificate_pem(), validating=options.inject_validating, mutating=options.inject_mutating
        )
    finally:
        await api.close()
    for name in patched:
        print(f"injected caBundle into {name}")
    return 0


async def _inject(
    cluster: ClusterOptions, ca_pem: bytes, validating: tuple[str, ...], mutating: tuple[str, ...]
) -> int:
    api = await new_api_client(cluster.kubeconfig, cluster.context)
    try:
        patched = await inject_ca_bundle(api, ca_pem, validating=validating, mutating=mutating)
    finally:
        await api.close()
    for name in patched:
        print(f"injected caBundle into {name}")
    return 0
