"""The webhook's HTTPS server (aiohttp): ``POST /validate``, ``POST /mutate``, probes, and metrics.

Contract (design.md, "Webhook endpoints"): the answer echoes apiVersion, kind and ``request.uid``; a
body that is not an AdmissionReview is an HTTP 400 with a one-line reason; nothing a client sends
produces a 500. Bounds a platform engineer relies on:

* **body size**: ``max_body_bytes`` (default 7 MiB: an object and its old version may each reach the
  apiserver's 3 MiB request limit); larger is a 413 before the body is buffered;
* **time**: reading the body is bounded by ``read_timeout`` (a client trickling bytes gets a 408);
  the decision itself is in-memory work on one object, microseconds, and never waits on the API;
* **errors**: an unexpected exception while evaluating the rules is logged with its traceback,
  counted, and answered as a denial (what ``failurePolicy: Fail`` would do with a 500), so the
  apiserver gets an answer it can show the user instead of a bare error status.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuq_k8s.common.model.quoting import cut
from gpuq_k8s.webhook.fastpath import FastServer
from gpuq_k8s.webhook.metrics import WebhookMetrics
from gpuq_k8s.webhook.review import (
    AdmissionRequest,
    AdmissionReview,
    Decision,
    MalformedReview,
    parse_review,
    response_body,
)

try:
    import uvloop
except ImportError:  # pragma: no cover - a runtime dependency wherever uvloop builds (not Windows)
    uvloop = None  # type: ignore[assignment]

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_MAX_BODY_BYTES = 7 * 1024 * 1024
JSON = "application/json"


class Admitter(Protocol):
    """What the server asks about each reviewed object (see :class:`webhook.admission.Admission`)."""

    async def review(self, request: AdmissionRequest, *, mutate: bool) -> Decision: ...


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    read_timeout: float = 5.0


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

    return FastServer(endpoints, dispatch, request_factory=request_factory, access_log=None)


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


@dataclass(frozen=True, slots=True)
class Endpoints:
    """The webhook's request handlers: what :func:`create_server` and :func:`create_app` serve.

    ``ready`` answers ``/readyz``; ``admitter`` is None for the plain-HTTP metrics port, which only
    serves the probes.
    """

    admitter: Admitter | None
    metrics: WebhookMetrics
    ready: Callable[[], bool] = lambda: True
    limits: ServerLimits = ServerLimits()

    async def livez(self, _: web.BaseRequest) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(self, _: web.BaseRequest) -> web.Response:
        if self.ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="informer watches not live\n")

    async def validate(self, request: web.BaseRequest) -> web.Response:
        return await self._review(request, mutate=False)

    async def mutate(self, request: web.BaseRequest) -> web.Response:
        return await self._review(request, mutate=True)

    async def _review(self, request: web.BaseRequest, *, mutate: bool) -> web.Response:
        length = request.content_length
        if length is not None and length > self.limits.max_body_bytes:
            return self._reject(
                413, "too_large", f"body of {length} bytes exceeds {self.limits.max_body_bytes}"
            )
        try:
            content = request.content
            if content.is_eof():
                # The whole body came with the headers (nearly every review): take it as it is, with
                # no timer to arm and no copy into a second buffer (each costs microseconds a review).
                body = content.read_nowait()
                if len(body) > self.limits.max_body_bytes:
                    raise web.HTTPRequestEntityTooLarge(self.limits.max_body_bytes, len(body))
            else:
                async with asyncio.timeout(self.limits.read_timeout):
                    body = await request.read()
        except TimeoutError:
            return self._reject(408, "timeout", f"body not received within {self.limits.read_timeout:g}s")
        except web.HTTPRequestEntityTooLarge:
            return self._reject(413, "too_large", f"body exceeds {self.limits.max_body_bytes} bytes")
        start = time.perf_counter()
        try:
            review = parse_review(body)
        except MalformedReview as err:
            return self._reject(400, "malformed", str(err))
        return web.Response(body=await self.answer(review, mutate=mutate, start=start), content_type=JSON)

    async def answer(self, review: AdmissionReview, *, mutate: bool, start: float) -> bytes:
        """The AdmissionReview answer to a parsed review (``start``: when its body was read), counted
        in the metrics; what :mod:`webhook.fastpath` also answers with."""
        assert self.admitter is not None  # only the metrics app has none, and it routes no reviews
        req = review.request
        try:
            decision = await self.admitter.review(req, mutate=mutate)
        except Exception as err:
            log.exception("admission of %s %s/%s failed", req.kind.kind, req.namespace, req.name)
            self.metrics.errors.inc()
            # The names and the exception's text may hold what the client sent: quoted bounded.
            where = cut(f"{req.kind.kind} {req.namespace}/{req.name}")
            error = f"{type(err).__name__}: {cut(str(err))}"
            message = f"gpuq webhook internal error reviewing {where}: {error}"
            decision = Decision(allowed=False, message=message)
        body_out = response_body(review, decision)
        self.metrics.count(req.kind.kind, req.operation, decision.allowed)
        histogram = self.metrics.mutate_duration if mutate else self.metrics.validate_duration
        histogram.observe(time.perf_counter() - start)
        return body_out

    def _reject(self, status: int, reason: str, message: str) -> web.Response:
        self.metrics.malformed.labels(reason).inc()
        return web.Response(status=status, text=message.replace("\n", " ") + "\n")


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
