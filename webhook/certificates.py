"""``gpuq webhook``'s certificate flags: where the serving certificate comes from, and the renewal.

Three ways, by flags (docs/install.md, "Certificates"):

* ``--tls-cert-file``/``--tls-private-key-file``: files, re-read when they change (cert-manager mode,
  or any mounted Secret);
* ``--tls-secret``: the TLS Secret read through the API (:mod:`webhook.tls_secret`);
* ``--tls-secret --renew-certificates``: the same, and the replica holding the Lease
  ``--certificates-lease`` keeps the CA, the caBundle and the serving certificate renewed
  (:mod:`certs.renewer`, decisions in :mod:`certs.renewal`).

They are read once into :class:`CertificateOptions` (part of ``WebhookOptions``, :mod:`webhook.flags`):
the flags alone are checked there, the files (readable, a certificate and its key) by its preflight.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509

from gpuq_k8s.certs.authority import DEFAULT_CA_VALIDITY
from gpuq_k8s.certs.command import service_dns_names
from gpuq_k8s.certs.renewal import DEFAULT_GRACE, DEFAULT_SERVING_VALIDITY, RenewalPolicy
from gpuq_k8s.certs.renewer import CertificateRenewer
from gpuq_k8s.common.kube.leader import LeaderElector, LeaseTimings
from gpuq_k8s.common.model.errors import ConfigError, InvalidValue
from gpuq_k8s.common.process import flags
from gpuq_k8s.webhook.tls import server_context

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
        default=DEFAULT_SERVING_VALIDITY.total_seconds(),
        help="serving certificate validity, seconds (renewed with a third left)",
    )
    group.add_argument(
        "--ca-validity",
        default=DEFAULT_CA_VALIDITY.total_seconds(),
        help="CA validity, seconds (rolled over with a third left)",
    )
    group.add_argument(
        "--rotation-grace",
        default=DEFAULT_GRACE.total_seconds(),
        help="seconds between the steps of a CA rollover and before an old CA leaves the bundle",
    )
    group.add_argument("--renew-interval", default=5.0, help="seconds between renewal rounds")


@dataclass(frozen=True, slots=True)
class CertificateOptions:
    """Where the serving certificate comes from (``cert_file``/``key_file``, or the Secret ``secret`` of
    ``namespace``) and, with ``renewal``, how the replica holding ``lease`` keeps it renewed."""

    cert_file: Path | None = None
    key_file: Path | None = None
    secret: str | None = None
    namespace: str = ""
    renewal: RenewalPolicy | None = None
    renew_interval: float = 5.0
    ca_secret: str = "gpuq-webhook-ca"
    service: str = "gpuq-webhook"
    cluster_domain: str = "cluster.local"
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    webhook_configurations: tuple[str, ...] = ("gpuq-webhook",)
    lease: str = "gpuq-webhook-certs"

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CertificateOptions:
        """The certificate flags alone: one way to get the certificate, and a renewal policy whose
        steps fit (ConfigError or InvalidValue naming the flag)."""
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
        durations = {
            flag: flags.number(flag, getattr(args, flag[2:].replace("-", "_")))
            for flag in ("--certificate-validity", "--ca-validity", "--rotation-grace", "--renew-interval")
        }
        return cls(
            cert_file=Path(args.tls_cert_file) if args.tls_cert_file is not None else None,
            key_file=Path(args.tls_private_key_file) if args.tls_private_key_file is not None else None,
            secret=args.tls_secret or None,
            namespace=args.certs_namespace,
            renewal=_renewal_policy(durations) if args.renew_certificates else None,
            renew_interval=durations["--renew-interval"],
            ca_secret=args.ca_secret,
            service=args.service,
            cluster_domain=args.cluster_domain,
            dns_names=tuple(args.certificate_dns_name),
            ip_addresses=tuple(flags.ip_address("--certificate-ip", ip) for ip in args.certificate_ip),
            webhook_configurations=tuple(args.webhook_configuration) or ("gpuq-webhook",),
            lease=args.certificates_lease,
        )

    def preflight(self) -> None:
        """The certificate files can be read and served: a PEM certificate, and its private key."""
        if self.cert_file is None or self.key_file is None:
            return
        certificate = flags.readable_file("--tls-cert-file", self.cert_file)
        flags.readable_file("--tls-private-key-file", self.key_file)
        try:
            x509.load_pem_x509_certificate(certificate)
        except ValueError:
            raise InvalidValue("--tls-cert-file", str(self.cert_file), "a PEM certificate") from None
        try:
            server_context(self.cert_file, self.key_file)
        except ssl.SSLError as err:
            raise InvalidValue(
                "--tls-private-key-file",
                str(self.key_file),
                f"the PEM private key of --tls-cert-file ({err.reason or err})",
            ) from None


def _renewal_policy(durations: dict[str, float]) -> RenewalPolicy:
    for flag in ("--certificate-validity", "--ca-validity", "--rotation-grace", "--renew-interval"):
        flags.seconds(flag, durations[flag])
    policy = RenewalPolicy(
        serving_validity=dt.timedelta(seconds=durations["--certificate-validity"]),
        ca_validity=dt.timedelta(seconds=durations["--ca-validity"]),
        grace=dt.timedelta(seconds=durations["--rotation-grace"]),
    )
    policy.validate()
    if durations["--renew-interval"] * 2 > durations["--rotation-grace"]:
        raise InvalidValue(
            "--renew-interval", durations["--renew-interval"], "at most half of --rotation-grace"
        )
    return policy


def certificate_renewer(
    options: CertificateOptions, api: Any, policy: RenewalPolicy
) -> tuple[CertificateRenewer, LeaderElector]:
    namespace = options.namespace
    dns = service_dns_names(options.service, namespace, options.cluster_domain) + list(options.dns_names)
    assert options.secret is not None  # --renew-certificates needs --tls-secret (CertificateOptions)
    renewer = CertificateRenewer(
        api,
        namespace=namespace,
        tls_secret=options.secret,
        ca_secret=options.ca_secret,
        webhook_configurations=list(options.webhook_configurations),
        dns_names=dns,
        ip_addresses=list(options.ip_addresses),
        policy=policy,
    )
    identity = f"{socket.gethostname()}_{os.getpid()}"
    elector = LeaderElector(
        api, namespace=namespace, name=options.lease, identity=identity, timings=LEASE_TIMINGS
    )
    return renewer, elector
