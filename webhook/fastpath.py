"""A lean HTTP/1.1 path for the one request the apiserver sends all day, in front of aiohttp.

aiohttp spends about 110 us of Python per request on a keep-alive TLS connection (a task, a request
and a response object, header multidicts, the writer); the review itself costs less than that
(tests/bench/bench_webhook.py). :class:`FastPath` is the connection's protocol: while the
requests it reads are plain, complete reviews (``POST /validate`` or ``/mutate``, HTTP/1.1, a
``Content-Length`` within the body limit, the whole body already received, no ``Expect``,
``Transfer-Encoding``, ``Connection`` or ``Upgrade`` header, a body that parses as an AdmissionReview)
it answers them itself, with the same answer bytes :meth:`webhook.endpoints.Endpoints.answer` gives
aiohttp. The head is parsed by llhttp (``httptools``, strict: the parser aiohttp's own C parser is
built on), fed each byte once; a body is located by its ``Content-Length`` and read where it lies in
the buffer (no copy of what follows it).

A body still arriving is waited for, up to the read timeout (then the same 408 as aiohttp's path).
Anything else (a probe, a malformed or oversized body, an unusual header, a head llhttp refuses)
hands the connection, from that request on and for good, to aiohttp's own handler, which was
created with the connection and is fed the bytes not yet answered: every status and message of the
contract (design.md, "Webhook endpoints") still comes from aiohttp.

Bounded, whatever the client does:

- **reading**: past :data:`READ_LIMIT` unanswered bytes (a client pipelining reviews faster than
  they are answered, or not reading its answers) the transport stops reading until the answers
  catch up, so TCP pushes back on the client instead of the buffer growing;
- **writing**: while the transport's write buffer is full (``pause_writing``) no new review is
  started; ``resume_writing`` starts them again;
- **idle connections**: aiohttp's handler arms its keep-alive timer when the connection is made and
  fast-path traffic never touches it, so the fast path cancels it and keeps its own (the same
  ``keepalive_timeout``: ``gpuq webhook --keepalive-timeout``), pushed back by every request and
  answer; a connection handed to aiohttp gets aiohttp's timer back. aiohttp's handler also tracks
  the connection, so a shutdown closes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from email.utils import formatdate
from typing import Final, cast

import httptools
from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE
from aiohttp.web_protocol import RequestHandler

from gpuq_k8s.webhook.endpoints import Endpoints
from gpuq_k8s.webhook.review import AdmissionReview, MalformedReview, parse_review

log = logging.getLogger(__name__)

ROUTES: Final = {b"/validate": False, b"/mutate": True}  # path: mutate
MAX_HEAD: Final = 8190  # aiohttp's own limit on a request line and on a header line
MAX_WAITED_BODY: Final = 256 * 1024  # a body still arriving that the fast path waits for
# Unanswered bytes past which reading stops (one waited-for request fits, with room for a read).
READ_LIMIT: Final = 2 * (MAX_HEAD + MAX_WAITED_BODY)
_COMPACT: Final = 64 * 1024  # answered bytes dropped from the buffer's front in one go
_UNUSUAL: Final = frozenset({b"transfer-encoding", b"expect", b"connection", b"upgrade"})
_PASS: Final = object()  # "not ours: give the connection to aiohttp"


class FastServer(web.Server):
    """aiohttp's low-level server whose connections start on :class:`FastPath`."""

    def __init__(self, endpoints: Endpoints, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.endpoints = endpoints

    def __call__(self) -> FastPath:  # type: ignore[override]
        return FastPath(super().__call__(), self.endpoints)


class FastPath(asyncio.Protocol):
    def __init__(self, handler: RequestHandler, endpoints: Endpoints) -> None:
        self.handler = handler
        self.endpoints = endpoints
        self.keepalive = float(handler.keepalive_timeout or 0)
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.pos = 0  # where the first unanswered request starts in ``buffer``
        self.fed = 0  # what llhttp has been fed of ``buffer``
        self.parser = httptools.HttpRequestParser(self)
        self.delegated = False
        self.busy = False
        self.eof = False
        self.reading_paused = False
        self.writing_paused = False
        self.last = 0.0
        self.idle: asyncio.TimerHandle | None = None
        self.late: asyncio.TimerHandle | None = None  # the body read timeout of a request
        # The request whose head llhttp is reading.
        self.head_done = False
        self.body_done = False
        self.unusual = False
        self.target = b""
        self.length = -1

    @property
    def pending(self) -> bytes:
        """The bytes received and not answered."""
        return bytes(self.buffer[self.pos :])

    # -- asyncio.Protocol, forwarded to aiohttp's handler ------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.handler.connection_made(transport)
        # aiohttp's keep-alive timer, armed now, would close the connection however busy the fast
        # path keeps it (aiohttp sees no request): ours replaces it until a handover.
        handle = self.handler._keepalive_handle
        if handle is not None:
            handle.cancel()
            self.handler._keepalive_handle = None
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self.idle, self.late):
            if timer is not None:
                timer.cancel()
        self.handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self.writing_paused = True
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self.handler.resume_writing()
        if not self.delegated and not self.busy:
            self._serve()

    def eof_received(self) -> bool | None:
        """The client is done sending (a plain-TCP half-close; TLS closes anyway): the fast path
        answers the complete reviews it holds, then closes (aiohttp closes at once)."""
        if self.delegated:
            self.handler.eof_received()
            return None
        self.eof = True
        if not self.busy and self.pos == len(self.buffer):
            return None
        if not self.busy and not self.writing_paused:
            self._serve()
        return True

    def data_received(self, data: bytes) -> None:
        if self.delegated:
            self.handler.data_received(data)
            return
        self.buffer += data
        self.last = time.monotonic()
        if not self.busy and not self.writing_paused:
            self._serve()
        if len(self.buffer) - self.pos > READ_LIMIT and not self.reading_paused and not self.delegated:
            self.reading_paused = True
            assert self.transport is not None
            self.transport.pause_reading()

    # -- llhttp's callbacks ------------------------------------------------------------------------

    def on_url(self, url: bytes) -> None:
        self.target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length":
            self.length = int(value)  # llhttp has checked it: digits, and only one
        elif name in _UNUSUAL:
            self.unusual = True

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_message_complete(self) -> None:
        self.body_done = True

    # -- the fast path -----------------------------------------------------------------------------

    def _serve(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return  # nothing more will be answered, or handed to aiohttp, on this connection
        while self.pos < len(self.buffer) and not self.delegated:
            request = self._next()
            if request is None:
                break  # the head or body is still arriving
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
            break
        self._compact()
        if self.eof and not self.busy and not self.delegated and not self.writing_paused:
            self.transport.close()  # what is left can never be completed

    def _compact(self) -> None:
        """Drop answered bytes (all of them, or a large front at once: each byte moves O(1) times)
        and read again once the unanswered ones are below the limit."""
        if self.pos == len(self.buffer):
            self.buffer.clear()
            self.fed -= self.pos
            self.pos = 0
        elif self.pos >= _COMPACT:
            del self.buffer[: self.pos]
            self.fed -= self.pos
            self.pos = 0
        if (
            self.reading_paused
            and len(self.buffer) - self.pos <= READ_LIMIT // 2
            and not self.writing_paused
            and self.transport is not None
        ):
            self.reading_paused = False
            self.transport.resume_reading()

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
        if not self.delegated and not self.writing_paused:
            self._serve()

    def _write(self, body: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(_HEAD % (len(body), _date().encode()) + body)
        self.last = time.monotonic()

    def _next(self) -> tuple[AdmissionReview, bool, float] | object | None:
        """The next complete review in the buffer (and take it out), None while the head or body is
        still arriving, or ``_PASS``."""
        buffer, pos = self.buffer, self.pos
        if not self.head_done:
            # The head ends at the first CRLFCRLF: llhttp refuses a bare CR or LF before it.
            end = buffer.find(b"\r\n\r\n", max(pos, self.fed - 3))
            upto = len(buffer) if end < 0 else end + 4
            if upto - pos > MAX_HEAD:
                return _PASS  # aiohttp's 431 or 400
            try:
                self.parser.feed_data(memoryview(buffer)[self.fed : upto])
            except httptools.HttpParserError:
                return _PASS  # aiohttp's parser says what is wrong with it
            except httptools.HttpParserUpgrade:
                return _PASS
            self.fed = upto
            if end < 0:
                return None
            if not self.head_done:
                return _PASS  # blank lines before a request line
        length = self._plain_length()
        if length < 0:
            return _PASS
        start = self.fed
        if len(buffer) < start + length:
            if length > MAX_WAITED_BODY:
                return _PASS  # aiohttp gathers a large body without copying it over at each chunk
            # The rest of the body is on its way (a client's writes split a large one): wait for it,
            # as long as aiohttp would.
            if self.late is None:
                self.late = asyncio.get_running_loop().call_later(
                    self.endpoints.limits.read_timeout, self._body_late
                )
            return None
        if self.late is not None:
            self.late.cancel()
            self.late = None
        start_time = time.perf_counter()
        body = memoryview(buffer)[start : start + length]
        try:
            self.parser.feed_data(body)  # no on_body callback: llhttp only counts it
        except httptools.HttpParserError:  # pragma: no cover - a counted body is never refused
            return _PASS
        if not self.body_done:  # pragma: no cover - the same
            return _PASS
        try:
            review = parse_review(bytes(body))
        except MalformedReview:
            return _PASS
        finally:
            body.release()
        self.pos = self.fed = start + length
        mutate = ROUTES[self.target.partition(b"?")[0]]
        self.head_done = self.body_done = self.unusual = False
        self.target = b""
        self.length = -1
        return review, mutate, start_time

    def _plain_length(self) -> int:
        """The body length of the request whose head was read, or -1 when the request is not a
        plain review."""
        parser = self.parser
        if (
            self.unusual
            or parser.get_method() != b"POST"
            or parser.get_http_version() != "1.1"
            or parser.should_upgrade()
        ):
            return -1
        if self.target.partition(b"?")[0] not in ROUTES:
            return -1
        length = self.length
        return length if 0 <= length <= self.endpoints.limits.max_body_bytes else -1

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
        handler = self.handler
        if self.keepalive > 0 and handler._keepalive_handle is None:
            # aiohttp's keep-alive timer back, as its connection_made armed it: a request that never
            # completes is closed after it (aiohttp re-arms it after each answer).
            loop = asyncio.get_running_loop()
            handler._next_keepalive_close_time = loop.time() + self.keepalive
            handler._keepalive_handle = loop.call_at(
                handler._next_keepalive_close_time, handler._process_keepalive
            )
        pending = self.pending
        self.buffer = bytearray()
        self.pos = self.fed = 0
        if self.reading_paused and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()  # aiohttp's handler keeps its own read pressure
        handler.data_received(pending)
        if self.eof:
            handler.close()  # answer the request handed over, then close, as nothing more comes

    def _arm_idle(self) -> None:
        self.last = time.monotonic()
        if self.keepalive > 0:
            self.idle = asyncio.get_running_loop().call_later(self.keepalive, self._check_idle)

    def _check_idle(self) -> None:
        self.idle = None
        if self.delegated or self.transport is None or self.transport.is_closing():
            return
        left = self.last + self.keepalive - time.monotonic()
        # An answer in flight keeps it, and answers held back by a client that does not read them;
        # so does a body awaited (its own read timeout ends that). A head left unfinished for the
        # whole timeout does not (aiohttp closes that one too).
        if left > 0 or self.busy or self.late is not None or self.writing_paused or self.reading_paused:
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
