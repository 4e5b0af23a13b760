"""gpuq's own HTTP/1.1 client for its requests to the apiserver: a keep-alive pool, nothing else.

Every bound pod costs the scheduler two writes (the Binding and the Scheduled event), and the same
request (JSON body included) costs about 300 us of CPU on aiohttp's ``ClientSession`` (URL objects,
cookie jar, tracing hooks, timers, stream readers), more than the scheduling decision. This client
sends it (the ApiClient's headers and credentials, TLS set up as kubernetes_asyncio sets it up)
over a pooled connection and parses the answer with :class:`ResponseParser`, llhttp (Node.js's
parser, through ``httptools``, maintained by the uvloop authors) under a thin layer of gpuq's rules
(``tests/bench/bench_requests.py``). Used by :func:`common.kube.status.call`, the one function every
gpuq write goes through; lists and watches stay on aiohttp (streamed bodies).

What it does and does not do:

- one request at a time per connection (no pipelining); idle connections are kept up to
  ``idle_timeout`` (15 s, aiohttp's keep-alive default), so a connection the apiserver closed while
  idle is not reused; a response saying ``Connection: close`` closes its connection; a connection
  goes back to the pool only when its parser is empty (no byte of another response after the one
  asked for: the next request would read it as its own), and a byte arriving on an idle connection
  closes it;
- strict framing (llhttp's own, plus :class:`ResponseParser`'s): ``1xx`` answers are skipped; one
  ``Content-Length`` at most, never with ``Transfer-Encoding``; ``Transfer-Encoding`` only
  ``chunked``; chunk sizes in plain hex; HTTP/1.0 or 1.1 only; no upgrade. Bounded: the head
  (:data:`MAX_HEAD`), the body (:data:`MAX_BODY`) and the chunk-size lines (:data:`MAX_CHUNK_LINE`
  a chunk); past a bound the answer is a :class:`~common.kube.errors.ProtocolError`;
- bodies by ``Content-Length``, ``Transfer-Encoding: chunked`` or, lacking both, up to the close;
  no compression is asked for (the apiserver answers identity);
- header values are sent without surrounding whitespace (client-go trims a token file's content:
  ``strings.TrimSpace`` in ``transport/token_source.go``), and a name or value that still holds a
  control character (CR, LF: request splitting) is refused before anything is sent
  (:class:`~common.kube.errors.InvalidHeader`);
- the leadership gate: :data:`SEND_CHECK` (set by :class:`common.kube.client.GatedClient`) is asked
  once more right before the request's bytes are written, after the auth refresh and the connect;
- no proxy (the ApiClient's aiohttp path is used when one is configured: :func:`for_api`), no
  redirects, no retries: a request that fails on the way raises gpuq's
  :class:`~common.kube.errors.TransportError` (:class:`~common.kube.errors.ConnectFailed`,
  :class:`~common.kube.errors.Disconnected`, :class:`~common.kube.errors.ProtocolError`, or
  :class:`~common.kube.errors.RequestTimeout` past ``timeout``), the types the aiohttp path's
  failures are translated to, and whether a write that failed so took effect is the caller's
  question (a bind reads the pod back);
- a connection whose request was cancelled or timed out is closed, never reused (its answer may
  still arrive).
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, cast
from urllib.parse import urlencode, urlsplit

import httptools

from gpuq_k8s.common.kube.errors import (
    ConnectFailed,
    Disconnected,
    InvalidHeader,
    ProtocolError,
    RequestTimeout,
)

IDLE_TIMEOUT: Final = 15.0
MAX_IDLE: Final = 128
MAX_HEAD: Final = 64 * 1024  # status line and headers
# Ten times the largest object the apiserver stores (its request bodies are capped at 3 MiB).
MAX_BODY: Final = 32 * 1024 * 1024
# Bytes of chunk-size lines (and trailers) a chunk may bring: Go's net/http caps a chunk line at 4 KiB.
MAX_CHUNK_LINE: Final = 4096
MAX_INFORMATIONAL: Final = 8  # 1xx answers before a response

# Asked right before a request's bytes are written: raises (WriteRefused) for a request this process
# may not send now. Set by common.kube.client.GatedClient around its requests.
SendCheck = Callable[[str, str], None]
SEND_CHECK: ContextVar[SendCheck | None] = ContextVar("gpuq_send_check", default=None)

_TOKEN: Final = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CONTROL: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # CTLs but HTAB (RFC 9110 field-value)
_TRIM: Final = " \t\r\n\f\v"  # Go's strings.TrimSpace, ASCII
# Header lines already checked, by name and value: every request carries the same few (the token's
# check is a scan of ~1,000 characters, more than the rest of a request's head costs).
_LINES: dict[tuple[str, str], bytes] = {}
_MAX_LINES: Final = 256


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    keep_alive: bool


class ResponseParser:
    """Incremental HTTP/1.1 response parsing: :meth:`feed` bytes as they arrive, get the responses
    they complete; :meth:`close` at the end of the stream completes a body that runs to the close.

    llhttp (strict: no leniency flag set) does the parsing; this class adds what it lets through or
    leaves to its caller: it skips ``1xx`` answers, refuses a ``Transfer-Encoding`` other than
    ``chunked`` (llhttp reads ``xchunked`` as a body to the close), an HTTP version other than 1.0
    and 1.1, an upgrade, and counts the bounds. The bounds are checked as bytes arrive: the head's
    and the body's exactly; the chunk lines' from what each read holds besides body bytes (llhttp
    keeps no buffer: a long line costs no memory, only the time of one read). After an error the
    parser stays failed (llhttp cannot resume).
    """

    def __init__(self, *, max_head: int = MAX_HEAD, max_body: int = MAX_BODY) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._max_head = max_head
        self._max_body = max_body
        self._done: list[Response] = []
        self._error: ProtocolError | None = None
        self._informational = 0  # 1xx answers before the one awaited
        # Per message ended in the current read: framing bytes of earlier reads, body bytes of this
        # read, head bytes and chunks (to count its framing when the read held nothing else).
        self._ended: list[tuple[int, int, int, int]] = []
        self._new_message()

    def _new_message(self) -> None:
        self._in_message = False
        self._head_done = False
        self._head = 0  # the head's bytes, as far as the callbacks tell (lower bound)
        self._framing = 0  # bytes of this message fed that are not body bytes
        self._status = 0
        self._keep_alive = True
        self._length = False
        self._chunked = False
        self._chunks = 0
        self._body: list[bytes] = []
        self._body_size = 0
        self._feed_body_base = 0  # the body's size when the current read began

    @property
    def idle(self) -> bool:
        """No byte of a response is waiting in the parser: the connection may be reused."""
        return not self._in_message and not self._done and self._error is None

    def feed(self, data: bytes) -> list[Response]:
        if self._error is not None:
            raise self._error
        self._feed_body_base = self._body_size
        self._ended.clear()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as err:
            cause = err.__context__
            self._error = cause if isinstance(cause, ProtocolError) else ProtocolError(str(err))
        except httptools.HttpParserUpgrade:
            self._error = ProtocolError("an upgrade nobody asked for")
        except httptools.HttpParserError as err:
            self._error = ProtocolError(f"malformed response: {err}")
        if self._error is not None:
            self._done.clear()
            raise self._error
        done, self._done = self._done, []
        if not self._ended:
            if self._in_message:  # every byte of this read belongs to the message under way
                self._framing += len(data) - (self._body_size - self._feed_body_base)
                chunks = self._chunks if self._chunked else -1
                self._check_framing(self._framing, self._head, chunks, lines=self._chunks + 1)
        elif len(self._ended) == 1 and not self._in_message:  # and so to the message it ended
            framing, body, head, chunks = self._ended[0]
            self._check_framing(framing + len(data) - body, head, chunks, lines=chunks)
        # Else a read holding the end of a message and the start of another (never an answer the
        # client accepts): the next reads are counted, this one is not.
        return done

    def _check_framing(self, framing: int, head: int, chunks: int, *, lines: int) -> None:
        """``chunks``: -1 for a body that is not chunked; ``lines``: how many chunk-size lines (the last
        one with the trailers) ``framing`` holds."""
        if not self._head_done and self._in_message:
            if framing > self._max_head:
                self._fail(f"response head exceeds {self._max_head} bytes")
        elif chunks >= 0 and framing - head - 2 * chunks > MAX_CHUNK_LINE * max(lines, 1):
            self._fail(f"chunk-size lines exceed {MAX_CHUNK_LINE} bytes a chunk")

    def _fail(self, message: str) -> None:
        self._error = ProtocolError(message)
        raise self._error

    def close(self) -> Response | None:
        """The stream ended: the response whose body runs to the close, else None."""
        if self._error is not None:
            raise self._error
        if not self._in_message:
            return None
        if self._head_done and not self._chunked and not self._length and self._status >= 200:
            response = Response(self._status, b"".join(self._body), False)
            self._new_message()
            return response
        self._fail("connection closed in the middle of a response")  # the parser is done for
        return None

    # -- llhttp's callbacks ------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._in_message = True

    def on_status(self, status: bytes) -> None:
        self._head += len(status) + 15  # "HTTP/1.1 200 " and CRLF

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head += len(name) + len(value) + 4  # ": " and CRLF
        if self._head > self._max_head:
            raise ProtocolError(f"response head exceeds {self._max_head} bytes")
        lower = name.lower()
        if lower == b"transfer-encoding":
            # The apiserver sends only chunked, and we ask for no coding; llhttp would read an unknown
            # coding as a body running to the close.
            if self._chunked or value.strip().lower() != b"chunked":
                raise ProtocolError(f"Transfer-Encoding: {value[:40]!r}: expected one 'chunked'")
            self._chunked = True
        elif lower == b"content-length":
            self._length = True  # llhttp refuses a second one and any but digits

    def on_headers_complete(self) -> None:
        self._head += 2
        parser = self._parser
        version = parser.get_http_version()
        if version not in ("1.1", "1.0"):
            raise ProtocolError(f"HTTP/{version}: expected HTTP/1.1")
        self._status = parser.get_status_code()
        if not 100 <= self._status <= 999:  # llhttp takes any three digits (RFC 9110: 100-599 defined)
            raise ProtocolError(f"status {self._status:03d}: expected a three-digit code from 100")
        if self._status == 101 or parser.should_upgrade():
            raise ProtocolError("an upgrade nobody asked for")
        self._keep_alive = parser.should_keep_alive()
        self._head_done = True

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self._max_body:
            raise ProtocolError(f"response body exceeds {self._max_body} bytes")
        self._body.append(body)

    def on_chunk_header(self) -> None:
        self._chunks += 1

    def on_message_complete(self) -> None:
        status, keep_alive, body = self._status, self._keep_alive, self._body
        chunks = self._chunks if self._chunked else -1
        self._ended.append((self._framing, self._body_size - self._feed_body_base, self._head, chunks))
        self._new_message()
        if status < 200:  # 100 Continue, 103 Early Hints: the answer follows
            self._informational += 1
            if self._informational > MAX_INFORMATIONAL:
                raise ProtocolError(f"more than {MAX_INFORMATIONAL} informational (1xx) answers")
            return
        self._informational = 0
        self._done.append(Response(status, b"".join(body), keep_alive))


def header_value(name: str, value: object) -> str:
    """``value`` as sent: trimmed as client-go trims a token file; raises
    :class:`~common.kube.errors.InvalidHeader` for a name that is not a token or a value that still
    holds a control character (a line break would split the request)."""
    if _TOKEN.fullmatch(name.encode("utf-8", "replace")) is None:
        raise InvalidHeader(f"header name {name[:40]!r}: expected an HTTP token; request not sent")
    text = str(value).strip(_TRIM)
    if _CONTROL.search(text) is not None:
        raise InvalidHeader(
            f"header {name}: a value of {len(text)} characters holding a control character (CR, LF): "
            "expected one line of text; request not sent"
        )
    return text


def header_block(headers: Mapping[str, str]) -> list[bytes]:
    """``Name: value\r\n`` lines of :func:`header_value`."""
    lines = []
    for item in headers.items():
        line = _LINES.get(item)
        if line is None:
            name, value = item
            line = f"{name}: {header_value(name, value)}\r\n".encode()
            if len(_LINES) >= _MAX_LINES:
                _LINES.clear()
            _LINES[item] = line
        lines.append(line)
    return lines


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = ResponseParser()
        self.waiter: asyncio.Future[Response] | None = None
        self.closed = False
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio's or uvloop's (the webhook runs on uvloop): not an asyncio.Transport instance.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            responses = self.parser.feed(data)
        except ProtocolError as err:
            self._fail(err)
            return
        waiter = self.waiter
        if waiter is None or waiter.done():
            # Bytes on an idle connection (a stale answer's tail): never read them as the next one's.
            self._fail(ProtocolError("bytes on the connection that no request asked for"))
            return
        if len(responses) > 1:
            self._fail(ProtocolError("a response nobody asked for"))
        elif responses:
            self.waiter = None
            waiter.set_result(responses[0])

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        try:
            last = self.parser.close()
        except ProtocolError as err:
            last, exc = None, err
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            if last is not None:
                waiter.set_result(last)
            elif isinstance(exc, ProtocolError):
                waiter.set_exception(exc)  # a response cut short
            else:
                lost = Disconnected(str(exc) or type(exc).__name__ if exc else "Server disconnected")
                lost.__cause__ = exc
                waiter.set_exception(lost)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _fail(self, err: Exception) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(err)
        if self.transport is not None:
            self.transport.abort()
        self.closed = True


def ssl_context(configuration: Any) -> ssl.SSLContext:
    """The TLS setup of kubernetes_asyncio's REST client, from the same configuration."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if getattr(configuration, "disable_strict_ssl_verification", False):
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


class HttpClient:
    """Requests to one apiserver (``configuration.host``) over pooled keep-alive connections."""

    def __init__(self, configuration: Any, *, idle_timeout: float = IDLE_TIMEOUT) -> None:
        url = urlsplit(str(configuration.host))
        if url.scheme not in ("https", "http") or not url.hostname:
            raise ValueError(f"apiserver URL {configuration.host!r}: expected https://host[:port]")
        self._tls = ssl_context(configuration) if url.scheme == "https" else None
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._prefix = url.path.rstrip("/")
        host_header = url.netloc.rpartition("@")[2]
        self._host_line = f"Host: {host_header}\r\n".encode()
        self._server_hostname = getattr(configuration, "tls_server_name", None) or None
        self._idle_timeout = idle_timeout
        self._idle: list[_Connection] = []
        self._closed = False

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]],
        headers: Mapping[str, str],
        body: bytes | None,
        timeout: float,
    ) -> Response:
        target = self._prefix + path + ("?" + urlencode(query) if query else "")
        if _CONTROL.search(target) is not None or " " in target:
            raise InvalidHeader(f"request target {target[:80]!r}: holds a space or a control character")
        lines = [f"{method} {target} HTTP/1.1\r\n".encode(), self._host_line, *header_block(headers)]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(b"Content-Length: %d\r\n" % len(body or b""))
        lines.append(b"\r\n")
        if body:
            lines.append(body)
        message = b"".join(lines)
        connection: _Connection | None = None
        try:
            async with asyncio.timeout(timeout):
                connection = self._take() or await self._connect()
                check = SEND_CHECK.get()
                if check is not None:
                    try:
                        check(method, path)  # the gate, after the auth refresh and the connect
                    except BaseException:
                        self._put(connection)  # nothing was sent on it
                        connection = None
                        raise
                waiter = connection.waiter = asyncio.get_running_loop().create_future()
                assert connection.transport is not None
                connection.transport.write(message)
                response: Response = await waiter
        except BaseException as err:
            if connection is not None:
                connection.close()  # an answer may still come: never reuse it
            if isinstance(err, TimeoutError):
                raise RequestTimeout(type(err).__name__) from err
            raise
        if response.keep_alive and connection.parser.idle and not connection.closed and not self._closed:
            self._put(connection)
        else:
            connection.close()
        return response

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def _take(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if (
                not connection.closed
                and connection.parser.idle
                and now - connection.idle_since < self._idle_timeout
            ):
                return connection
            connection.close()
        return None

    def _put(self, connection: _Connection) -> None:
        connection.idle_since = time.monotonic()
        if len(self._idle) >= MAX_IDLE:
            connection.close()
            return
        self._idle.append(connection)

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        options: dict[str, Any] = {}
        if self._tls is not None:
            options["ssl"] = self._tls
            options["server_hostname"] = self._server_hostname or self._host
        try:
            _, connection = await loop.create_connection(_Connection, self._host, self._port, **options)
        except (OSError, ssl.SSLError) as err:
            raise ConnectFailed(
                f"cannot connect to {self._host}:{self._port}: {err or type(err).__name__}"
            ) from err
        return connection


def for_api(api_client: Any) -> HttpClient | None:
    """The :class:`HttpClient` of an ApiClient made by :func:`common.kube.client.new_api_client`;
    None for any other client, or one that talks through a proxy."""
    http = getattr(api_client, "gpuq_http", None)
    return http if isinstance(http, HttpClient) else None
