"""``gpuq webhook``'s flags, read once into :class:`WebhookOptions` (typed and checked), what
:mod:`webhook.command` serves with. The certificate flags are :mod:`webhook.certificates`'; the flags
every command shares and their checks, :mod:`common.process.flags`'."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.pods import GPUQ_SCHEDULER
from gpuq_k8s.common.process import flags as shared
from gpuq_k8s.common.process.flags import ClusterOptions, LogOptions, ServingOptions
from gpuq_k8s.webhook.certificates import CertificateOptions, add_renewal_arguments
from gpuq_k8s.webhook.endpoints import DEFAULT_KEEPALIVE_TIMEOUT, DEFAULT_MAX_BODY_BYTES

PORT: Final = 8443
METRICS_PORT: Final = 8080
CERT_RELOAD_INTERVAL: Final = 1.0


@dataclass(frozen=True, slots=True)
class WebhookOptions:
    """Every ``gpuq webhook`` flag, typed; the defaults are the flags' (design.md "Command line")."""

    certificates: CertificateOptions = field(default_factory=CertificateOptions)
    cluster: ClusterOptions = field(default_factory=ClusterOptions)
    serving: ServingOptions = field(default_factory=lambda: ServingOptions(METRICS_PORT))
    log: LogOptions = field(default_factory=LogOptions)
    config: str | None = None
    port: int = PORT
    scheduler_name: str = GPUQ_SCHEDULER
    set_scheduler_name: bool = False
    cert_reload_interval: float = CERT_RELOAD_INTERVAL
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT
    workers: int = 1

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> WebhookOptions:
        """The flags alone, checked (no I/O); an InvalidValue (or ConfigError) names the first wrong one."""
        workers = shared.integer("--workers", args.workers, minimum=1)
        serving = ServingOptions.from_args(args)
        port = shared.port("--port", args.port)
        if serving.metrics_port:
            # Worker k serves its metrics on --metrics-port + k (webhook/workers.py).
            last = serving.metrics_port + workers - 1
            if last > shared.MAX_PORT:
                raise InvalidValue(
                    "--metrics-port",
                    serving.metrics_port,
                    f"at most {shared.MAX_PORT - workers + 1} with --workers {workers} "
                    "(worker k serves on --metrics-port + k)",
                )
            if port and serving.metrics_port <= port <= last:
                taken = "--metrics-port" if workers == 1 else f"--metrics-port to + {workers - 1}"
                raise InvalidValue("--port", port, f"a port other than {taken}")
        return cls(
            certificates=CertificateOptions.from_args(args),
            cluster=ClusterOptions.from_args(args),
            serving=serving,
            log=LogOptions.from_args(args),
            config=args.config,
            port=port,
            scheduler_name=args.scheduler_name,
            set_scheduler_name=args.set_scheduler_name,
            cert_reload_interval=shared.seconds("--cert-reload-interval", args.cert_reload_interval),
            max_body_bytes=shared.integer("--max-body-bytes", args.max_body_bytes, minimum=1),
            keepalive_timeout=shared.seconds("--keepalive-timeout", args.keepalive_timeout),
            workers=workers,
        )

    def preflight(self) -> None:
        """Against this machine, before anything connects: the certificate files (with
        ``--tls-cert-file``) load as a pair, and every port can be listened on (each worker's metrics
        port; the HTTPS port with SO_REUSEPORT when several workers share it)."""
        self.certificates.preflight()
        host = self.serving.bind_address
        if self.serving.metrics_port:
            for index in range(self.workers):
                shared.check_listen("--metrics-port", host, self.serving.metrics_port + index)
        shared.check_listen("--port", host, self.port, reuse_port=self.workers > 1)

    def for_worker(self, index: int) -> WebhookOptions:
        """What worker ``index`` of ``--workers`` serves with: its own metrics port, and only worker 0
        renews certificates (one renewer, one Lease holder per process)."""
        serving = self.serving
        if serving.metrics_port:
            serving = dataclasses.replace(serving, metrics_port=serving.metrics_port + index)
        certificates = self.certificates
        if index:
            certificates = dataclasses.replace(certificates, renewal=None)
        return dataclasses.replace(self, serving=serving, certificates=certificates)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tls-cert-file", type=Path, help="serving certificate (PEM), re-read on change")
    parser.add_argument("--tls-private-key-file", type=Path, help="its private key (PEM)")
    parser.add_argument(
        "--tls-secret",
        metavar="NAME",
        help="serve the certificate of this kubernetes.io/tls Secret of --certs-namespace, read through "
        "the API (instead of --tls-cert-file/--tls-private-key-file)",
    )
    add_renewal_arguments(parser)
    parser.add_argument("--port", default=PORT, metavar="PORT", help=f"HTTPS port (default {PORT})")
    shared.add_serving_flags(
        parser,
        metrics_port=METRICS_PORT,
        metrics_help=f"metrics and probes port (default {METRICS_PORT})",
        bind_help=f"address to listen on (default {shared.ANY_ADDRESS})",
    )
    shared.add_cluster_flags(parser)
    parser.add_argument(
        "--config",
        metavar="CONF.yaml",
        help="the scheduler's configuration (Volcano format, the file `gpuq scheduler --config` reads): "
        "a plugin's admission rules apply only when it is enabled (default: the default configuration)",
    )
    parser.add_argument(
        "--scheduler-name",
        default=GPUQ_SCHEDULER,
        help=f"pods with this schedulerName are subject to queue card quotas (default {GPUQ_SCHEDULER})",
    )
    parser.add_argument(
        "--set-scheduler-name",
        action="store_true",
        help="mutate pods that request a card resource and name no other scheduler to use --scheduler-name",
    )
    parser.add_argument(
        "--cert-reload-interval",
        default=CERT_RELOAD_INTERVAL,
        metavar="SECONDS",
        help="seconds between certificate file checks",
    )
    parser.add_argument(
        "--max-body-bytes", default=DEFAULT_MAX_BODY_BYTES, metavar="N", help="largest request body accepted"
    )
    parser.add_argument(
        "--keepalive-timeout",
        default=DEFAULT_KEEPALIVE_TIMEOUT,
        metavar="SECONDS",
        help="seconds after which an idle keep-alive connection is closed "
        f"(default {DEFAULT_KEEPALIVE_TIMEOUT:g})",
    )
    parser.add_argument(
        "--workers",
        default=1,
        metavar="N",
        help="processes serving the HTTPS port (SO_REUSEPORT), one per core to use; worker k serves its "
        "metrics on --metrics-port + k; a worker that dies stops the webhook with exit 1 (default 1)",
    )
    shared.add_log_flags(parser)
