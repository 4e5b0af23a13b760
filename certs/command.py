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
from pathlib import Path
from typing import Any

from gpuq_k8s.certs.authority import KeyPair, ca_still_good, create_ca, issue_serving_certificate
from gpuq_k8s.certs.cluster import inject_ca_bundle, read_ca_secret, write_ca_secret, write_tls_secret
from gpuq_k8s.certs.files import load_key_pair, write_key_pair
from gpuq_k8s.common.kube.client import new_api_client
from gpuq_k8s.common.kube.errors import ApiError
from gpuq_k8s.common.model.errors import GpuqError


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
    commands = parser.add_subparsers(dest="certs_command", required=True)

    issue = commands.add_parser("issue", help="issue a CA (unless given) and a serving certificate")
    issue.add_argument("--service", required=True, help="the webhook Service name")
    issue.add_argument("--namespace", required=True, help="the webhook Service namespace")
    issue.add_argument("--cluster-domain", default="cluster.local")
    issue.add_argument("--dns-name", action="append", default=[], help="extra DNS name (repeatable)")
    issue.add_argument("--ip", action="append", default=[], help="extra IP address (repeatable)")
    issue.add_argument("--out-dir", type=Path, help="write ca.crt, ca.key, tls.crt, tls.key here")
    issue.add_argument("--ca-cert", type=Path, help="reuse this CA certificate")
    issue.add_argument("--ca-key", type=Path, help="and its key")
    issue.add_argument(
        "--ca-secret",
        help="keep the CA in this Secret of --namespace and reuse it while it is valid for another year",
    )
    issue.add_argument("--secret", help="also write a kubernetes.io/tls Secret of this name in --namespace")
    issue.add_argument(
        "--inject-validating", action="append", default=[], help="ValidatingWebhookConfiguration"
    )
    issue.add_argument("--inject-mutating", action="append", default=[], help="its name")
    issue.add_argument("--kubeconfig", default=None)
    issue.set_defaults(func=main)

    inject = commands.add_parser("inject", help="set caBundle on webhook configurations")
    inject.add_argument("--ca-file", type=Path, required=True)
    inject.add_argument("--validating", action="append", default=[])
    inject.add_argument("--mutating", action="append", default=[])
    inject.add_argument("--kubeconfig", default=None)
    inject.set_defaults(func=main)
    return parser


def main(args: argparse.Namespace) -> int:
    try:
        if args.certs_command == "issue":
            return _issue(args)
        return asyncio.run(
            _inject(args.kubeconfig, args.ca_file.read_bytes(), args.validating, args.mutating)
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


def _issue(args: argparse.Namespace) -> int:
    if bool(args.ca_cert) != bool(args.ca_key):
        print("gpuq certs issue: --ca-cert and --ca-key go together", file=sys.stderr)
        return 2
    if args.ca_cert and args.ca_secret:
        print("gpuq certs issue: --ca-cert/--ca-key or --ca-secret, not both", file=sys.stderr)
        return 2
    ca: KeyPair
    if args.ca_secret:
        ca = asyncio.run(_kept_ca(args))
    elif args.ca_cert:
        ca = load_key_pair(args.ca_cert, args.ca_key)
    else:
        ca = create_ca(f"gpuq-webhook-ca.{args.namespace}")
    return _issue_with(args, ca)


async def _kept_ca(args: argparse.Namespace) -> KeyPair:
    """The CA kept in ``--ca-secret`` while it is good for another leaf, else a new one kept there."""
    api = await new_api_client(args.kubeconfig)
    try:
        kept = await read_ca_secret(api, args.namespace, args.ca_secret)
        where = f"Secret {args.namespace}/{args.ca_secret}"
        if kept is not None and ca_still_good(kept):
            ca = kept
            until = kept.certificate.not_valid_after_utc.date().isoformat()
            print(f"reusing the CA kept in {where} (valid until {until}): the caBundle does not change")
        else:
            ca = create_ca(f"gpuq-webhook-ca.{args.namespace}")
            await write_ca_secret(api, args.namespace, args.ca_secret, ca)
            why = "none kept yet" if kept is None else "the kept one is not good for another year"
            print(f"issued a new CA ({why}), kept in {where}")
    finally:
        await api.close()
    return ca


def _issue_with(args: argparse.Namespace, ca: KeyPair) -> int:
    names = service_dns_names(args.service, args.namespace, args.cluster_domain) + list(args.dns_name)
    pair = issue_serving_certificate(ca, dns_names=names, ip_addresses=args.ip)
    if args.out_dir:
        write_key_pair(ca, args.out_dir / "ca.crt", args.out_dir / "ca.key")
        write_key_pair(pair, args.out_dir / "tls.crt", args.out_dir / "tls.key")
        print(f"wrote {args.out_dir}/ca.crt, ca.key, tls.crt, tls.key ({', '.join(names)})")
    if args.secret or args.inject_validating or args.inject_mutating:
        return asyncio.run(_to_cluster(args, ca, pair))
    if not args.out_dir:
        print("gpuq certs issue: nothing to do: give --out-dir and/or --secret/--inject-*", file=sys.stderr)
        return 2
    return 0


async def _to_cluster(args: argparse.Namespace, ca: KeyPair, pair: KeyPair) -> int:
    api = await new_api_client(args.kubeconfig)
    try:
        if args.secret:
            await write_tls_secret(api, args.namespace, args.secret, pair, ca.certificate_pem())
            print(f"wrote Secret {args.namespace}/{args.secret}")
        patched = await inject_ca_bundle(
            api, ca.certificate_pem(), validating=args.inject_validating, mutating=args.inject_mutating
        )
    finally:
        await api.close()
    for name in patched:
        print(f"injected caBundle into {name}")
    return 0


async def _inject(kubeconfig: str | None, ca_pem: bytes, validating: list[str], mutating: list[str]) -> int:
    api = await new_api_client(kubeconfig)
    try:
        patched = await inject_ca_bundle(api, ca_pem, validating=validating, mutating=mutating)
    finally:
        await api.close()
    for name in patched:
        print(f"injected caBundle into {name}")
    return 0
