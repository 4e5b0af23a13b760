"""``gpuq webhook``: the admission webhook process (design.md, "Command line").

Start-up order, so the apiserver never gets an answer from an empty cache: the metrics port (with
``/livez`` and ``/readyz``) first, then the informers, and the HTTPS port only once they have synced.
``/readyz`` is then true only while the HTTPS port is open and every watch is live (``InformerView.ready``);
with ``--tls-secret`` the port also waits for the Secret to hold a certificate.
SIGTERM stops accepting connections and lets requests in flight finish.

Before any of that, the flags (:mod:`webhook.flags`), the configuration and the machine (certificate
files, ports) are checked: a mistake is exit 2 with one line on stderr, before anything connects.
``--config`` is read once, at start (as the scheduler reads it): a changed file takes effect on the
next start (the Deployments roll on a changed ConfigMap through their ``checksum/config``
annotation; docs/operations.md).
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

from gpuq_k8s.common.kube.client import KubeconfigError, new_api_client
from gpuq_k8s.common.kube.config_file import read_config
from gpuq_k8s.common.model.errors import GpuqError, InvalidValue
from gpuq_k8s.common.process.flags import listen_error
from gpuq_k8s.webhook.admission import Admission
from gpuq_k8s.webhook.certificates import certificate_renewer
from gpuq_k8s.webhook.cluster import InformerView
from gpuq_k8s.webhook.endpoints import Endpoints, ServerLimits
from gpuq_k8s.webhook.flags import WebhookOptions, add_flags
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
    add_flags(parser)
    parser.set_defaults(func=main)
    return parser


def main(args: argparse.Namespace) -> int:
    """Run until SIGTERM or SIGINT; 0 on a clean stop. Flags, then the configuration, then the machine
    (certificate files, ports): each an exit 2 with one line on stderr, before anything connects."""
    try:
        options = WebhookOptions.from_args(args)
    except GpuqError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    try:
        config = read_config(options.config)
    except GpuqError as err:
        for line in err.lines():  # every problem of the configuration, one line each
            print(f"error: {options.config or 'configuration'}: {line}", file=sys.stderr)
        return EXIT_INVALID
    try:
        options.preflight()
    except GpuqError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    options.log.configure()
    admission = admission_options(
        config, scheduler_name=options.scheduler_name, set_scheduler_name=options.set_scheduler_name
    )
    log.info("admission rules: %s", admission)
    if options.workers == 1:
        return _serve_one(options, admission)
    return supervise(options.workers, lambda index: _serve_one(options.for_worker(index), admission))


def _serve_one(options: WebhookOptions, admission: AdmissionOptions) -> int:
    """One webhook process (the only one, or a worker): 0 on a clean stop; a port lost since the
    preflight or a kubeconfig that does not load is one line on stderr and exit 2."""
    try:
        run(serve(options, admission))
    except (KubeconfigError, InvalidValue) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    return 0


async def serve(options: WebhookOptions, admission: AdmissionOptions) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    metrics = WebhookMetrics()
    host = options.serving.bind_address
    api = await new_api_client(options.cluster.kubeconfig, options.cluster.context)
    view = InformerView(api)
    listening = asyncio.Event()  # the HTTPS port is open (after the first sync and the first certificate)
    try:
        metrics_runner, metrics_port = await _listen(
            "--metrics-port",
            create_metrics_app(metrics, ready=lambda: listening.is_set() and view.ready),
            host,
            options.serving.metrics_port,
        )
    except BaseException:
        await api.close()
        raise
    log.info("metrics and probes on http://%s:%d", host, metrics_port)
    view.informers.start()
    runner = None
    background: list[asyncio.Task[None]] = []
    elector = None
    certificates = options.certificates
    with contextlib.ExitStack() as scratch:
        try:
            if certificates.renewal is not None:
                renewer, elector = certificate_renewer(certificates, api, certificates.renewal)
                background.append(asyncio.create_task(renewer.run(elector, certificates.renew_interval)))
            cert_file, key_file = certificates.cert_file, certificates.key_file
            if certificates.secret:
                directory = Path(scratch.enter_context(tempfile.TemporaryDirectory(prefix="gpuq-tls-")))
                files = SecretFiles(api, certificates.namespace, certificates.secret, directory)
                if not await files.wait_first(options.cert_reload_interval, stop):
                    return
                background.append(asyncio.create_task(files.run(options.cert_reload_interval)))
                cert_file, key_file = files.cert_file, files.key_file
            assert cert_file is not None and key_file is not None  # one way or the other (CertificateOptions)
            reloader = CertificateReloader(cert_file, key_file, interval=options.cert_reload_interval)
            metrics.certificate_expiry.set(reloader.not_after)
            background.append(asyncio.create_task(_watch_certificates(reloader, metrics)))
            served = Served(admission, view, metrics, reloader)
            runner = await _serve_admission(options, served, stop, listening)
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


async def _listen(
    flag: str, app: web.Application | web.Server, host: str, port: int, **site: Any
) -> tuple[web.BaseRunner, int]:
    """:func:`webhook.server.start_site`, a port that cannot be listened on being the one-line
    InvalidValue of the flag that chose it (the preflight checked it; another process may have
    taken it since)."""
    try:
        return await start_site(app, host, port, **site)
    except OSError as err:
        raise listen_error(flag, host, port, err) from None


@dataclass(frozen=True)
class Served:
    """What the HTTPS port serves with."""

    options: AdmissionOptions
    view: InformerView
    metrics: WebhookMetrics
    reloader: CertificateReloader


async def _serve_admission(
    options: WebhookOptions, served: Served, stop: asyncio.Event, listening: asyncio.Event
) -> web.BaseRunner | None:
    """Open the HTTPS port once the caches synced (``listening`` set then), and serve until ``stop``;
    the runner to clean up."""
    rules, view, metrics, reloader = served.options, served.view, served.metrics, served.reloader
    runner = None
    try:
        synced = asyncio.create_task(view.informers.wait_synced())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({synced, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not synced.done():
            synced.cancel()
            return None
        limits = ServerLimits(
            max_body_bytes=options.max_body_bytes, keepalive_timeout=options.keepalive_timeout
        )
        admission = Admission(view, rules, live=view)
        app = create_server(Endpoints(admission, metrics, lambda: view.ready, limits))
        host = options.serving.bind_address
        runner, port = await _listen(
            "--port", app, host, options.port, ssl_context=reloader.context, reuse_port=options.workers > 1
        )
        listening.set()
        log.info("admission webhook on https://%s:%d (caches synced)", host, port)
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
