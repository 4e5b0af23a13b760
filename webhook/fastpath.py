"""A lean HTTP/1.1 path for the one request the apiserver sends all day, in front of aiohttp.

aiohttp spends about 110 us of Python per request on a keep-alive TLS connection (a task, a request
and a response object, header multidicts, the writer); the review itself costs less than that
(tests/bench/bench_webhook.py). :class:`FastPath` is the connection's protocol: while the
requests it reads are plain, complete reviews (``POST /validate`` or ``/mutate``, HTTP/1.1, a
``Content-Length`` within the body limit, the whole body already received, no ``Expect``,
``Transfer-Encoding`` or ``Connection`` header, a body that parses as an AdmissionReview) it answers
them itself, with the same answer bytes :meth:`webhook.endpoints.Endpoints.answer` gives aiohttp.

A body still arriving is waited for, up to the read timeout (then the same 408 as aiohttp's path).
Anything else (a probe, a malformed or oversized body, an unusual header) hands the connection,
from that request on and for good, to aiohttp's own handler, which was created with the connection
and is fed the bytes not yet answered: every status and message of the contract (design.md, "Webhook
endpoints") still comes from aiohttp. aiohttp's handler also tracks the connection, so a shutdown
closes it; an idle connection is closed after aiohttp's keep-alive timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from email.utils import formatdate
from typing import Final, cast

from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE

from gpuq_k8s.webhook.endpoints import Endpoints
from gpuq_k8s.webhook.review import AdmissionReview, MalformedReview, parse_review

log = logging.getLogger(__name__)

ROUTES: Final = {b"/validate": False, b"/mutate": True}  # path: mutate
MAX_HEAD: Final = 8190  # aiohttp's own limit on a request line and on a header line
MAX_WAITED_BODY: Final = 256 * 1024  # a body still arriving that the fast path waits for
KEEPALIVE_TIMEOUT: Final = 75.0  # aiohttp's default
_PASS: Final = object()  # "not ours: give the connection to aiohttp"


class FastServer(web.Server):
    """aiohttp's low-level server whose connections start on :class:`FastPath`."""

    def __init__(self, endpoints: Endpoints, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.endpoints = endpoints

    def __call__(self) -> FastPath:  # type: ignore[override]
        return FastPath(super().__call__(), self.endpoints)


class FastPath(asyncio.Protocol):
    def __init__(self, handler: asyncio.Protocol, endpoints: Endpoints) -> None:
        self.handler = handler
        self.endpoints = endpoints
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.delegated = False
        self.busy = False
        self.last = 0.0
        self.idle: asyncio.TimerHandle | None = None
        self.late: asyncio.TimerHandle | None = None  # the body read timeout of a request

    # -- asyncio.Protocol, forwarded to aiohttp's handler ------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.handler.connection_made(transport)
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self.idle, self.late):
            if timer is not None:
                timer.cancel()
        self.handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()

    def eof_received(self) -> bool | None:
        return self.handler.eof_received()

    def data_received(self, data: bytes) -> None:
        if self.delegated:
            self.handler.data_received(data)
            return
        self.buffer += data
        self.last = time.monotonic()
        if not self.busy:
            self._serve()

    # -- the fast path -----------------------------------------------------------------------------

    def _serve(self) -> None:
        while self.buffer and not self.delegated:
            request = self._next()
            if request is None:
                return  # the head is still arriving
            if request is _PASS:
                self._delegate()
                return
            assert isinstance(request, tuple)
            review, mutate, start = request
            # A task, as aiohttp gives each request: the admitter may await (a live read).
            task = asyncio.get_running_loop().create_task(
                self.endpoints.answer(review, mutate=mutate, start=start)
            )
            self.busy = True  # requests behind it wait in the buffer: answers keep their order
            task.add_done_callback(self._answered)
            return

    def _answered(self, task: asyncio.Task[bytes]) -> None:
        self.busy = False
        if task.cancelled():  # pragma: no cover - nothing cancels it but the loop's end
            return
        error = task.exception()
        if error is not None:  # pragma: no cover - answer() turns an admitter's error into a denial
            log.error("answering a review failed: %s: %s", type(error).__name__, error)
            if self.transport is not None:
                self.transport.close()
            return
        self._write(task.result())
        if self.buffer and not self.delegated:
            self._serve()

    def _write(self, body: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(_HEAD % (len(body), _date().encode()) + body)
        self.last = time.monotonic()

    def _next(self) -> tuple[AdmissionReview, bool, float] | object | None:
        """The next complete review in the buffer (and take it out), None while the head is still
        arriving, or ``_PASS``."""
        buffer = self.buffer
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            # Still arriving, unless it is long or ends its lines with bare LFs (aiohttp's then).
            return _PASS if len(buffer) > MAX_HEAD or b"\n\n" in buffer or b"\n\r\n" in buffer else None
        head = buffer[:end]
        lines = head.split(b"\r\n")
        if head.count(b"\n") != len(lines) - 1 or head.count(b"\r") != len(lines) - 1:
            return _PASS  # a bare CR or LF: aiohttp's parser judges it
        parts = lines[0].split(b" ")
        if len(parts) != 3 or parts[0] != b"POST" or parts[2] != b"HTTP/1.1":
            return _PASS
        mutate = ROUTES.get(parts[1].partition(b"?")[0])
        if mutate is None:
            return _PASS
        length = -1
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                return _PASS
            name = name.lower()
            if name == b"content-length":
                value = value.strip()
                if length >= 0 or not value.isdigit():
                    return _PASS
                length = int(value)
            elif name in (b"transfer-encoding", b"expect", b"connection") or b" " in name or b"\t" in name:
                return _PASS
        limits = self.endpoints.limits
        start = end + 4
        if length < 0 or length > limits.max_body_bytes:
            return _PASS
        if len(buffer) < start + length:
            if length > MAX_WAITED_BODY:
                return _PASS  # aiohttp gathers a large body without copying it over at each chunk
            # The rest of the body is on its way (a client's writes split a large one): wait for it,
            # as long as aiohttp would.
            if self.late is None:
                self.late = asyncio.get_running_loop().call_later(limits.read_timeout, self._body_late)
            return None
        if self.late is not None:
            self.late.cancel()
            self.late = None
        start_time = time.perf_counter()
        try:
            review = parse_review(buffer[start : start + length])
        except MalformedReview:
            return _PASS
        self.buffer = buffer[start + length :]
        return review, mutate, start_time

    def _body_late(self) -> None:
        """A body not received within the read timeout: aiohttp's 408 (Endpoints._review)."""
        self.late = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        timeout = self.endpoints.limits.read_timeout
        self.endpoints.metrics.malformed.labels("timeout").inc()
        text = f"body not received within {timeout:g}s\n".encode()
        transport.write(_TIMEOUT_HEAD % (len(text), _date().encode()) + text)
        transport.close()

    def _delegate(self) -> None:
        self.delegated = True
        for timer in (self.idle, self.late):
            if timer is not None:
                timer.cancel()
        self.idle = self.late = None
        buffer, self.buffer = self.buffer, b""
        self.handler.data_received(buffer)

    def _arm_idle(self) -> None:
        self.last = time.monotonic()
        self.idle = asyncio.get_running_loop().call_later(KEEPALIVE_TIMEOUT, self._check_idle)

    def _check_idle(self) -> None:
        self.idle = None
        if self.delegated or self.transport is None or self.transport.is_closing():
            return
        left = self.last + KEEPALIVE_TIMEOUT - time.monotonic()
        if left > 0 or self.busy or self.buffer:
            self.idle = asyncio.get_running_loop().call_later(max(left, 1.0), self._check_idle)
            return
        self.transport.close()


_HEAD: Final = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nDate: %s\r\n"
    + f"Server: {SERVER_SOFTWARE}\r\n\r\n".encode()
)
_TIMEOUT_HEAD: Final = (
    b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n"
    + b"Date: %s\r\n"
    + f"Server: {SERVER_SOFTWARE}\r\nConnection: close\r\n\r\n".encode()
)
_dates: dict[int, str] = {}


def _date() -> str:
    now = int(time.time())
    text = _dates.get(now)
    if text is None:
        _dates.clear()
        text = _dates[now] = formatdate(now, usegmt=True)
    return text
