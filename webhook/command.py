"""``gpuq webhook``: the admission webhook process (design.md, "Command line").

Start-up order, so the apiserver never gets an answer from an empty cache: the metrics port (with
``/livez`` and ``/readyz``) first, then the informers, and the HTTPS port only once they have synced.
``/readyz`` is then true only while the HTTPS port is open and every watch is live (``InformerView.ready``);
with ``--tls-secret`` the port also waits for the Secret to hold a certificate.
SIGTERM stops accepting connections and lets requests in flight finish.

``--config`` is read once, at start (as the scheduler reads it): an invalid file is exit 2 before
anything listens, and a changed file takes effect on the next start (the Deployments roll on a
changed ConfigMap through their ``checksum/config`` annotation; docs/operations.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from gpuq_k8s.certs.renewal import RenewalPolicy
from gpuq_k8s.common.kube.client import new_api_client
from gpuq_k8s.common.kube.config_file import read_config
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.pods import GPUQ_SCHEDULER
from gpuq_k8s.webhook.admission import Admission
from gpuq_k8s.webhook.certificates import (
    add_renewal_arguments,
    certificate_renewer,
    check_certificate_arguments,
    renewal_policy,
)
from gpuq_k8s.webhook.cluster import InformerView
from gpuq_k8s.webhook.endpoints import DEFAULT_MAX_BODY_BYTES, Endpoints, ServerLimits
from gpuq_k8s.webhook.metrics import WebhookMetrics
from gpuq_k8s.webhook.options import AdmissionOptions, admission_options
from gpuq_k8s.webhook.server import create_metrics_app, create_server, run, start_site
from gpuq_k8s.webhook.tls import CertificateReloader
from gpuq_k8s.webhook.tls_secret import SecretFiles
from gpuq_k8s.webhook.workers import supervise

log = logging.getLogger("gpuq.webhook")
EXIT_INVALID = 2


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``webhook`` to the ``gpuq`` sub-commands; the parsed args' ``func`` runs it."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "webhook",
        help="run the validating and mutating admission webhook (HTTPS)",
        description="Serve POST /validate and /mutate over TLS, /metrics on a plain-HTTP port.",
    )
    parser.add_argument("--tls-cert-file", type=Path, help="serving certificate (PEM), re-read on change")
    parser.add_argument("--tls-private-key-file", type=Path, help="its private key (PEM)")
    parser.add_argument(
        "--tls-secret",
        metavar="NAME",
        help="serve the certificate of this kubernetes.io/tls Secret of --certs-namespace, read through "
        "the API (instead of --tls-cert-file/--tls-private-key-file)",
    )
    add_renewal_arguments(parser)
    parser.add_argument("--port", type=int, default=8443, help="HTTPS port (default 8443)")
    parser.add_argument(
        "--metrics-port", type=int, default=8080, help="metrics and probes port (default 8080)"
    )
    parser.add_argument("--bind-address", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    parser.add_argument(
        "--kubeconfig", default=None, help="kubeconfig (default: in-cluster, else ~/.kube/config)"
    )
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
        "--cert-reload-interval", type=float, default=1.0, help="seconds between certificate file checks"
    )
    parser.add_argument(
        "--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, help="largest request body accepted"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes serving the HTTPS port (SO_REUSEPORT), one per core to use; worker k serves its "
        "metrics on --metrics-port + k; a worker that dies stops the webhook with exit 1 (default 1)",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    parser.set_defaults(func=main)
    return parser


def main(args: argparse.Namespace) -> int:
    """Run until SIGTERM or SIGINT; 0 on a clean stop."""
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = read_config(args.config)
    except GpuqError as err:
        print(f"error: {args.config or 'configuration'}: {err}", file=sys.stderr)
        return EXIT_INVALID
    options = admission_options(
        config, scheduler_name=args.scheduler_name, set_scheduler_name=args.set_scheduler_name
    )
    log.info("admission rules: %s", options)
    if args.workers < 1:
        print(f"error: --workers: invalid value {args.workers}: expected at least 1", file=sys.stderr)
        return EXIT_INVALID
    try:
        check_certificate_arguments(args)
        renewal = renewal_policy(args)
    except GpuqError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    if args.workers == 1:
        run(serve(args, options, renewal))
        return 0

    def worker(index: int) -> int:
        mine = argparse.Namespace(**vars(args))
        if args.metrics_port:
            mine.metrics_port = args.metrics_port + index
        run(serve(mine, options, renewal if index == 0 else None))
        return 0

    return supervise(args.workers, worker)


async def serve(args: argparse.Namespace, options: AdmissionOptions, renewal: RenewalPolicy | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    metrics = WebhookMetrics()
    api = await new_api_client(args.kubeconfig)
    view = InformerView(api)
    listening = asyncio.Event()  # the HTTPS port is open (after the first sync and the first certificate)
    metrics_runner, metrics_port = await start_site(
        create_metrics_app(metrics, ready=lambda: listening.is_set() and view.ready),
        args.bind_address,
        args.metrics_port,
    )
    log.info("metrics and probes on http://%s:%d", args.bind_address, metrics_port)
    view.informers.start()
    runner = None
    background: list[asyncio.Task[None]] = []
    elector = None
    with contextlib.ExitStack() as scratch:
        try:
            if renewal is not None:
                renewer, elector = certificate_renewer(args, api, renewal)
                background.append(asyncio.create_task(renewer.run(elector, args.renew_interval)))
            cert_file, key_file = args.tls_cert_file, args.tls_private_key_file
            if args.tls_secret:
                directory = Path(scratch.enter_context(tempfile.TemporaryDirectory(prefix="gpuq-tls-")))
                files = SecretFiles(api, args.certs_namespace, args.tls_secret, directory)
                if not await files.wait_first(args.cert_reload_interval, stop):
                    return
                background.append(asyncio.create_task(files.run(args.cert_reload_interval)))
                cert_file, key_file = files.cert_file, files.key_file
            reloader = CertificateReloader(cert_file, key_file, interval=args.cert_reload_interval)
            metrics.certificate_expiry.set(reloader.not_after)
            background.append(asyncio.create_task(_watch_certificates(reloader, metrics)))
            runner = await _serve_admission(args, Served(options, view, metrics, reloader), stop, listening)
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            if elector is not None:
                await elector.release()
            if runner is not None:
                await runner.cleanup()
            await metrics_runner.cleanup()
            await view.informers.stop()
            await api.close()


@dataclass(frozen=True)
class Served:
    """What the HTTPS port serves with."""

    options: AdmissionOptions
    view: InformerView
    metrics: WebhookMetrics
    reloader: CertificateReloader


async def _serve_admission(
    args: argparse.Namespace, served: Served, stop: asyncio.Event, listening: asyncio.Event
) -> web.BaseRunner | None:
    """Open the HTTPS port once the caches synced (``listening`` set then), and serve until ``stop``;
    the runner to clean up."""
    options, view, metrics, reloader = served.options, served.view, served.metrics, served.reloader
    runner = None
    try:
        synced = asyncio.create_task(view.informers.wait_synced())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({synced, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not synced.done():
            synced.cancel()
            return None
        limits = ServerLimits(max_body_bytes=args.max_body_bytes)
        admission = Admission(view, options, live=view)
        app = create_server(Endpoints(admission, metrics, lambda: view.ready, limits))
        runner, port = await start_site(
            app, args.bind_address, args.port, ssl_context=reloader.context, reuse_port=args.workers > 1
        )
        listening.set()
        log.info("admission webhook on https://%s:%d (caches synced)", args.bind_address, port)
        await stop.wait()
        log.info("stopping")
    except BaseException:
        if runner is not None:
            await runner.cleanup()
        raise
    return runner


async def _watch_certificates(reloader: CertificateReloader, metrics: WebhookMetrics) -> None:
    while True:
        await asyncio.sleep(reloader.interval)
        if reloader.check():
            metrics.certificate_reloads.inc()
            metrics.certificate_expiry.set(reloader.not_after)
