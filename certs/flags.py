"""``gpuq certs``' flags, read once into :class:`CertsOptions` (typed and checked), what
:mod:`certs.command` runs with. ``--kubeconfig``/``--context`` and the value checks are
:mod:`common.process.flags`'. ``gpuq certs`` runs once and exits, so it takes no log flags (the
renewal that runs for long is ``gpuq webhook --renew-certificates``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.process import flags as shared
from gpuq_k8s.common.process.flags import ClusterOptions


@dataclass(frozen=True, slots=True)
class IssueOptions:
    """``gpuq certs issue``: a serving certificate for ``service`` in ``namespace``, signed by the CA of
    ``ca_cert``/``ca_key``, or the one kept in ``ca_secret``, or a new one; written to ``out_dir``,
    the Secret ``secret``, and the caBundle of the ``inject_*`` webhook configurations."""

    service: str
    namespace: str
    cluster_domain: str = "cluster.local"
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    out_dir: Path | None = None
    ca_cert: Path | None = None
    ca_key: Path | None = None
    ca_secret: str | None = None
    secret: str | None = None
    inject_validating: tuple[str, ...] = ()
    inject_mutating: tuple[str, ...] = ()

    @property
    def to_cluster(self) -> bool:
        return bool(self.secret or self.inject_validating or self.inject_mutating)


@dataclass(frozen=True, slots=True)
class InjectOptions:
    """``gpuq certs inject``: the CA of ``ca_file`` into the caBundle of these webhook configurations."""

    ca_file: Path
    validating: tuple[str, ...] = ()
    mutating: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CertsOptions:
    """Every ``gpuq certs`` flag, typed: ``issue`` or ``inject`` is set, by the sub-command."""

    cluster: ClusterOptions = field(default_factory=ClusterOptions)
    issue: IssueOptions | None = None
    inject: InjectOptions | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CertsOptions:
        """The flags alone, checked (no I/O): an InvalidValue names the first wrong one."""
        cluster = ClusterOptions.from_args(args)
        if args.certs_command == "inject":
            inject = InjectOptions(args.ca_file, tuple(args.validating), tuple(args.mutating))
            return cls(cluster, inject=inject)
        if bool(args.ca_cert) != bool(args.ca_key):
            given, missing = ("--ca-cert", "--ca-key") if args.ca_cert else ("--ca-key", "--ca-cert")
            value = str(args.ca_cert or args.ca_key)
            raise InvalidValue(given, value, f"{missing} with it (--ca-cert and --ca-key go together)")
        if args.ca_cert and args.ca_secret:
            raise InvalidValue("--ca-secret", args.ca_secret, "--ca-cert/--ca-key or --ca-secret, not both")
        issue = IssueOptions(
            service=args.service,
            namespace=args.namespace,
            cluster_domain=args.cluster_domain,
            dns_names=tuple(args.dns_name),
            ip_addresses=tuple(shared.ip_address("--ip", ip) for ip in args.ip),
            out_dir=args.out_dir,
            ca_cert=args.ca_cert,
            ca_key=args.ca_key,
            ca_secret=args.ca_secret or None,
            secret=args.secret or None,
            inject_validating=tuple(args.inject_validating),
            inject_mutating=tuple(args.inject_mutating),
        )
        if not issue.out_dir and not issue.to_cluster:
            raise InvalidValue(
                "--out-dir", None, "a directory, and/or --secret/--inject-* (nothing to do otherwise)"
            )
        return cls(cluster, issue=issue)

    def preflight(self) -> None:
        """The files it reads can be read."""
        if self.inject is not None:
            shared.readable_file("--ca-file", self.inject.ca_file)
        if self.issue is not None and self.issue.ca_cert and self.issue.ca_key:
            shared.readable_file("--ca-cert", self.issue.ca_cert)
            shared.readable_file("--ca-key", self.issue.ca_key)


def add_flags(parser: argparse.ArgumentParser) -> None:
    """``issue`` and ``inject`` under ``parser``; each parsed Namespace has ``certs_command``."""
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
    shared.add_cluster_flags(issue)

    inject = commands.add_parser("inject", help="set caBundle on webhook configurations")
    inject.add_argument("--ca-file", type=Path, required=True)
    inject.add_argument("--validating", action="append", default=[])
    inject.add_argument("--mutating", action="append", default=[])
    shared.add_cluster_flags(inject)
