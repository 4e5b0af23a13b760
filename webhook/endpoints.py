"""The webhook's request handlers: ``POST /validate``, ``POST /mutate`` and the probes, and the bounds
they keep. :mod:`webhook.server` serves them over aiohttp; :mod:`webhook.fastpath` answers plain
reviews with the same :meth:`Endpoints.answer`.

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
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from gpuq_k8s.common.model.quoting import cut
from gpuq_k8s.webhook.metrics import WebhookMetrics
from gpuq_k8s.webhook.review import (
    AdmissionRequest,
    AdmissionReview,
    Decision,
    MalformedReview,
    parse_review,
    response_body,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 7 * 1024 * 1024
DEFAULT_KEEPALIVE_TIMEOUT = 75.0  # seconds (aiohttp's AppRunner default; the apiserver's idle is 90 s)
JSON = "application/json"


class Admitter(Protocol):
    """What the server asks about each reviewed object (see :class:`webhook.admission.Admission`)."""

    async def review(self, request: AdmissionRequest, *, mutate: bool) -> Decision: ...


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    read_timeout: float = 5.0
    # An idle keep-alive connection is closed after this (``gpuq webhook --keepalive-timeout``).
    keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT


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
