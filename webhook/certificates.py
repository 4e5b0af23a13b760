"""``gpuq webhook``'s certificate flags: where the serving certificate comes from, and the renewal.

Three ways, by flags (docs/install.md, "Certificates"):

* ``--tls-cert-file``/``--tls-private-key-file``: files, re-read when they change (cert-manager mode,
  or any mounted Secret);
* ``--tls-secret``: the TLS Secret read through the API (:mod:`webhook.tls_secret`);
* ``--tls-secret --renew-certificates``: the same, and the replica holding the Lease
  ``--certificates-lease`` keeps the CA, the caBundle and the serving certificate renewed
  (:mod:`certs.renewer`, decisions in :mod:`certs.renewal`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import socket
from typing import Any

from gpuq_k8s.certs.authority import DEFAULT_CA_VALIDITY
from gpuq_k8s.certs.command import service_dns_names
from gpuq_k8s.certs.renewal import DEFAULT_GRACE, DEFAULT_SERVING_VALIDITY, RenewalPolicy
from gpuq_k8s.certs.renewer import CertificateRenewer
from gpuq_k8s.common.kube.leader import LeaderElector, LeaseTimings
from gpuq_k8s.common.model.errors import ConfigError, InvalidValue

LEASE_TIMINGS = LeaseTimings(lease_duration=15.0, renew_deadline=10.0, retry_period=2.0)


def add_renewal_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("certificate renewal (with --tls-secret)")
    group.add_argument(
        "--certs-namespace",
        default=os.environ.get("POD_NAMESPACE", ""),
        help="namespace of --tls-secret, --ca-secret and the Lease (default: $POD_NAMESPACE)",
    )
    group.add_argument(
        "--renew-certificates",
        action="store_true",
        help="keep the CA, the caBundle of the webhook configurations and the serving certificate "
        "renewed (one replica writes: the holder of --certificates-lease)",
    )
    group.add_argument("--ca-secret", default="gpuq-webhook-ca", help="Secret keeping the CAs")
    group.add_argument(
        "--service", default="gpuq-webhook", help="the webhook Service (certificate DNS names)"
    )
    group.add_argument("--cluster-domain", default="cluster.local")
    group.add_argument("--certificate-dns-name", action="append", default=[], help="extra DNS name")
    group.add_argument("--certificate-ip", action="append", default=[], help="extra IP address")
    group.add_argument(
        "--webhook-configuration",
        action="append",
        default=[],
        help="Validating- and MutatingWebhookConfiguration whose caBundle is kept (repeatable; "
        "default gpuq-webhook)",
    )
    group.add_argument("--certificates-lease", default="gpuq-webhook-certs", help="Lease of the renewer")
    group.add_argument(
        "--certificate-validity",
        type=float,
        default=DEFAULT_SERVING_VALIDITY.total_seconds(),
        help="serving certificate validity, seconds (renewed with a third left)",
    )
    group.add_argument(
        "--ca-validity",
        type=float,
        default=DEFAULT_CA_VALIDITY.total_seconds(),
        help="CA validity, seconds (rolled over with a third left)",
    )
    group.add_argument(
        "--rotation-grace",
        type=float,
        default=DEFAULT_GRACE.total_seconds(),
        help="seconds between the steps of a CA rollover and before an old CA leaves the bundle",
    )
    group.add_argument("--renew-interval", type=float, default=5.0, help="seconds between renewal rounds")


def check_certificate_arguments(args: argparse.Namespace) -> None:
    files = (args.tls_cert_file is not None, args.tls_private_key_file is not None)
    if args.tls_secret and any(files):
        raise ConfigError(
            "--tls-secret", args.tls_secret, "either --tls-secret or the --tls-*-file pair", "flags"
        )
    if not args.tls_secret and not all(files):
        raise ConfigError(
            "--tls-cert-file",
            args.tls_cert_file,
            "--tls-cert-file and --tls-private-key-file, or --tls-secret",
            "flags",
        )
    if args.tls_secret and not args.certs_namespace:
        raise ConfigError(
            "--certs-namespace", "", "the namespace of --tls-secret (or $POD_NAMESPACE)", "flags"
        )
    if args.renew_certificates and not args.tls_secret:
        raise ConfigError("--renew-certificates", True, "--tls-secret (the Secret it renews)", "flags")


def renewal_policy(args: argparse.Namespace) -> RenewalPolicy | None:
    if not args.renew_certificates:
        return None
    for flag in ("certificate_validity", "ca_validity", "rotation_grace", "renew_interval"):
        value = getattr(args, flag)
        if not value > 0:
            raise InvalidValue(f"--{flag.replace('_', '-')}", value, "a positive number of seconds")
    policy = RenewalPolicy(
        serving_validity=dt.timedelta(seconds=args.certificate_validity),
        ca_validity=dt.timedelta(seconds=args.ca_validity),
        grace=dt.timedelta(seconds=args.rotation_grace),
    )
    policy.validate()
    if args.renew_interval * 2 > args.rotation_grace:
        raise InvalidValue("--renew-interval", args.renew_interval, "at most half of --rotation-grace")
    return policy


def certificate_renewer(
    args: argparse.Namespace, api: Any, policy: RenewalPolicy
) -> tuple[CertificateRenewer, LeaderElector]:
    namespace = args.certs_namespace
    dns = service_dns_names(args.service, namespace, args.cluster_domain) + list(args.certificate_dns_name)
    renewer = CertificateRenewer(
        api,
        namespace=namespace,
        tls_secret=args.tls_secret,
        ca_secret=args.ca_secret,
        webhook_configurations=args.webhook_configuration or ["gpuq-webhook"],
        dns_names=dns,
        ip_addresses=list(args.certificate_ip),
        policy=policy,
    )
    identity = f"{socket.gethostname()}_{os.getpid()}"
    elector = LeaderElector(
        api, namespace=namespace, name=args.certificates_lease, identity=identity, timings=LEASE_TIMINGS
    )
    return renewer, elector
