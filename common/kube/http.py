"""gpuq's own HTTP/1.1 client for its requests to the apiserver: a keep-alive pool, nothing else.

Every bound pod costs the scheduler two writes (the Binding and the Scheduled event), and the same
request (JSON body included) costs about 300 us of CPU on aiohttp's ``ClientSession`` (URL objects,
cookie jar, tracing hooks, timers, stream readers), more than the scheduling decision. This client
sends it (the ApiClient's headers and credentials, TLS set up as kubernetes_asyncio sets it up)
over a pooled connection and parses the answer with :class:`ResponseParser`: 170-190 us
(``tests/bench/bench_requests.py``). Used by :func:`common.kube.status.call`, the one function every
gpuq write goes through; lists and watches stay on aiohttp (streamed bodies).

What it does and does not do:

- one request at a time per connection (no pipelining); idle connections are kept up to
  ``idle_timeout`` (15 s, aiohttp's keep-alive default), so a connection the apiserver closed while
  idle is not reused; a response saying ``Connection: close`` closes its connection;
- bodies by ``Content-Length``, ``Transfer-Encoding: chunked`` or, lacking both, up to the close;
  no compression is asked for (the apiserver answers identity);
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
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, cast
from urllib.parse import urlencode, urlsplit

from gpuq_k8s.common.kube.errors import ConnectFailed, Disconnected, ProtocolError, RequestTimeout

IDLE_TIMEOUT: Final = 15.0
MAX_IDLE: Final = 128
_MAX_HEAD: Final = 64 * 1024  # status line and headers
_NO_BODY: Final = frozenset({204, 304})


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    keep_alive: bool


@dataclass(eq=False)
class ResponseParser:
    """Incremental HTTP/1.1 response parsing (pure): :meth:`feed` bytes as they arrive, get the
    responses they complete; :meth:`close` at the end of the stream completes a body that runs to
    the close."""

    _buffer: bytearray = field(default_factory=bytearray)
    _status: int = 0
    _keep_alive: bool = True
    _length: int | None = None  # Content-Length still to read
    _chunked: bool = False
    _to_close: bool = False
    _in_body: bool = False
    _chunks: list[bytes] = field(default_factory=list)

    def feed(self, data: bytes) -> list[Response]:
        self._buffer += data
        done: list[Response] = []
        while True:
            response = self._step()
            if response is None:
                return done
            done.append(response)

    def close(self) -> Response | None:
        """The stream ended: the response whose body runs to the close, else None."""
        if self._in_body and self._to_close:
            body = bytes(self._buffer)
            self._buffer.clear()
            self._in_body = False
            return Response(self._status, body, False)
        if self._in_body or self._buffer:
            raise ProtocolError("connection closed in the middle of a response")
        return None

    def _step(self) -> Response | None:
        if not self._in_body:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > _MAX_HEAD:
                    raise ProtocolError("response head too large")
                return None
            self._head(bytes(self._buffer[:end]))
            del self._buffer[: end + 4]
            self._in_body = True
            if self._status in _NO_BODY or (self._length == 0 and not self._chunked):
                return self._finish(b"")
        if self._chunked:
            return self._chunk()
        if self._length is not None:
            if len(self._buffer) < self._length:
                return None
            body = bytes(self._buffer[: self._length])
            del self._buffer[: self._length]
            return self._finish(body)
        return None  # to the close

    def _head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
        self._status = int(parts[1])
        self._keep_alive = parts[0] == b"HTTP/1.1"
        self._length, self._chunked, self._to_close = None, False, False
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                raise ProtocolError(f"malformed header line: {line[:80]!r}")
            name, value = name.strip().lower(), value.strip()
            if name == b"content-length":
                if not value.isdigit():
                    raise ProtocolError(f"Content-Length: {value[:20]!r}")
                self._length = int(value)
            elif name == b"transfer-encoding":
                self._chunked = value.lower().endswith(b"chunked")
            elif name == b"connection":
                tokens = {t.strip() for t in value.lower().split(b",")}
                if b"close" in tokens:
                    self._keep_alive = False
                elif b"keep-alive" in tokens:
                    self._keep_alive = True
        if not self._chunked and self._length is None and self._status not in _NO_BODY:
            self._to_close = True
            self._keep_alive = False

    def _chunk(self) -> Response | None:
        while True:
            line_end = self._buffer.find(b"\r\n")
            if line_end < 0:
                return None
            size_text = bytes(self._buffer[:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ProtocolError(f"chunk size: {size_text[:20]!r}") from None
            if size == 0:
                # The last chunk, then optional trailers, then an empty line.
                trailers_end = self._buffer.find(b"\r\n\r\n", line_end)
                if trailers_end == line_end:
                    del self._buffer[: line_end + 4]
                elif trailers_end < 0:
                    if self._buffer[line_end + 2 : line_end + 4] == b"\r\n":
                        del self._buffer[: line_end + 4]
                    else:
                        return None
                else:
                    del self._buffer[: trailers_end + 4]
                body = b"".join(self._chunks)
                self._chunks = []
                return self._finish(body)
            start = line_end + 2
            if len(self._buffer) < start + size + 2:
                return None
            if self._buffer[start + size : start + size + 2] != b"\r\n":
                raise ProtocolError("chunk not followed by CRLF")
            self._chunks.append(bytes(self._buffer[start : start + size]))
            del self._buffer[: start + size + 2]

    def _finish(self, body: bytes) -> Response:
        self._in_body = False
        return Response(self._status, body, self._keep_alive)


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
        for response in responses:
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(response)
                self.waiter = None
            else:
                self._fail(ProtocolError("a response nobody asked for"))

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
        lines = [f"{method} {target} HTTP/1.1\r\n".encode(), self._host_line]
        lines.extend(f"{name}: {value}\r\n".encode() for name, value in headers.items())
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
        if response.keep_alive and not connection.closed and not self._closed:
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
            if not connection.closed and now - connection.idle_since < self._idle_timeout:
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
