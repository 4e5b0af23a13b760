"""The webhook's HTTPS server (aiohttp): ``POST /validate``, ``POST /mutate``, probes, and metrics.

The request handlers and the bounds they keep (design.md, "Webhook endpoints") are
:mod:`webhook.endpoints`; this module serves them: the aiohttp application, the low-level server
whose connections start on :mod:`webhook.fastpath`, the plain-HTTP metrics port, the listening sites
and the event loop.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuq_k8s.webhook.endpoints import Endpoints
from gpuq_k8s.webhook.fastpath import FastServer
from gpuq_k8s.webhook.metrics import WebhookMetrics

try:
    import uvloop
except ImportError:  # pragma: no cover - a runtime dependency wherever uvloop builds (not Windows)
    uvloop = None  # type: ignore[assignment]

T = TypeVar("T")


def create_app(endpoints: Endpoints) -> web.Application:
    """The admission application (serve it over TLS; see :func:`webhook.command.run`)."""
    app = web.Application(client_max_size=endpoints.limits.max_body_bytes)
    app.router.add_post("/validate", endpoints.validate)
    app.router.add_post("/mutate", endpoints.mutate)
    app.router.add_get("/livez", endpoints.livez)
    app.router.add_get("/readyz", endpoints.readyz)
    return app


def create_server(endpoints: Endpoints) -> web.Server:
    """The admission endpoints of :func:`create_app` on aiohttp's low-level server: what
    ``gpuq webhook`` serves. Call it with the event loop running.

    Four fixed endpoints need no router, URL dispatch objects or per-request application context;
    skipping them takes about a tenth off the cost of a review (tests/bench/bench_webhook.py).
    Connections start on :class:`webhook.fastpath.FastPath`, which answers plain reviews itself.
    """
    limits = endpoints.limits
    routes: dict[str, tuple[str, Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]]] = {
        "/validate": ("POST", endpoints.validate),
        "/mutate": ("POST", endpoints.mutate),
        "/livez": ("GET", endpoints.livez),
        "/readyz": ("GET", endpoints.readyz),
    }

    async def dispatch(request: web.BaseRequest) -> web.StreamResponse:
        route = routes.get(request.path)
        if route is None:
            return web.Response(status=404, text="not found\n")
        method, handler = route
        if request.method != method and not (method == "GET" and request.method == "HEAD"):
            return web.Response(status=405, text=f"use {method}\n", headers={"Allow": method})
        if request.headers.get("Expect", "").lower() == "100-continue":
            # What aiohttp's router does for a client that waits before sending its body.
            await request.writer.write(b"HTTP/%d.%d 100 Continue\r\n\r\n" % request.version)
        return await handler(request)

    def request_factory(message: Any, payload: Any, protocol: Any, writer: Any, task: Any) -> web.BaseRequest:
        loop = asyncio.get_running_loop()
        return web.BaseRequest(
            message, payload, protocol, writer, task, loop, client_max_size=limits.max_body_bytes
        )

    return FastServer(
        endpoints,
        dispatch,
        request_factory=request_factory,
        access_log=None,
        keepalive_timeout=limits.keepalive_timeout,
    )


def create_metrics_app(metrics: WebhookMetrics, ready: Callable[[], bool] = lambda: True) -> web.Application:
    """Plain-HTTP ``/metrics`` (plus the probes, for kubelets that probe the metrics port)."""

    async def serve_metrics(_: web.Request) -> web.Response:
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    endpoints = Endpoints(None, metrics, ready)
    app = web.Application()
    app.router.add_get("/metrics", serve_metrics)
    app.router.add_get("/livez", endpoints.livez)
    app.router.add_get("/readyz", endpoints.readyz)
    return app


async def start_site(
    app: web.Application | web.Server,
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    shutdown_timeout: float = 10.0,
    reuse_port: bool = False,
) -> tuple[web.BaseRunner, int]:
    """Serve ``app`` (an application or a :func:`create_server` server) on ``host:port`` (0 = any
    free port); returns the runner and the bound port. ``reuse_port``: SO_REUSEPORT, so that
    several processes serve the port (``gpuq webhook --workers``).

    No access log: at thousands of reviews per second it would cost more than the reviews, and the
    metrics already count every answer.
    """
    runner: web.BaseRunner
    if isinstance(app, web.Application):
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=shutdown_timeout)
    else:
        runner = web.ServerRunner(app, handle_signals=False, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    site = web.TCPSite(
        runner, host, port, ssl_context=ssl_context, backlog=1024, reuse_address=True, reuse_port=reuse_port
    )
    await site.start()
    addresses = runner.addresses
    bound = addresses[0][1] if addresses else port
    return runner, int(bound)


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on uvloop when it is installed, else on asyncio's default loop.

    uvloop's transports and TLS are what let one core answer thousands of reviews per second
    (tests/bench/bench_webhook.py); the server does not depend on it otherwise.
    """
    if uvloop is None:
        return asyncio.run(main)  # pragma: no cover
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
