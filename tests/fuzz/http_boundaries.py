"""The HTTP boundaries fuzzed (issue 24): bytes an apiserver (or whatever answers in its place) sends
gpuq's client, and bytes any client sends the webhook's port.

* ``http_response``: arbitrary and near-HTTP response bytes, split into reads at arbitrary points,
  through :class:`~common.kube.http.ResponseParser` and its end-of-stream. Clean: every read gives
  responses or a :class:`~common.kube.errors.ProtocolError` (and the parser stays failed after one);
  no 1xx is ever returned, no body is over the cap.
* ``http_request``: arbitrary and near-HTTP request streams (pipelined reviews, probes, lenient or
  hostile framing, mangled bytes), in arbitrary writes, through the webhook's real server (the fast
  path in front of aiohttp, ``webhook.server.create_server``) on a real socket; the client then
  closes its side. Clean: nothing is logged at ERROR and the loop saw no exception, and what came
  back is a sequence of whole HTTP responses, each an answer (200) or a refusal (4xx).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from typing import Any, Final

import httptools
from aiohttp.http_exceptions import HttpProcessingError
from hypothesis import strategies as st

from gpuq_k8s.common.kube.errors import ProtocolError
from gpuq_k8s.common.kube.http import MAX_BODY, Response, ResponseParser
from gpuq_k8s.webhook.admission import Admission
from gpuq_k8s.webhook.endpoints import Endpoints, ServerLimits
from gpuq_k8s.webhook.metrics import WebhookMetrics
from gpuq_k8s.webhook.server import create_server
from gpuq_k8s.webhook.view import StaticView
from tests.fuzz.boundaries import Boundary
from tests.testing.builders import GPU
from tests.testing.webhook_server import GPU_POD, NODE, QUEUE, admission_review


def _splits(data: st.SearchStrategy[bytes]) -> st.SearchStrategy[list[bytes]]:
    """``data`` cut into reads (or writes) at arbitrary points."""

    @st.composite
    def cut(draw: st.DrawFn) -> list[bytes]:
        raw = draw(data)
        points = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=6)))
        pieces, last = [], 0
        for point in [*points, len(raw)]:
            pieces.append(raw[last:point])
            last = point
        return pieces

    return cut()


def _mangled(data: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """``data``, sometimes with bytes inserted, replaced or cut."""

    @st.composite
    def mangle(draw: st.DrawFn) -> bytes:
        raw = draw(data)
        for _ in range(draw(st.integers(0, 2))):
            at = draw(st.integers(0, len(raw)))
            action = draw(st.sampled_from(["insert", "cut", "replace"]))
            if action == "insert":
                raw = raw[:at] + draw(st.binary(min_size=1, max_size=8)) + raw[at:]
            elif action == "cut":
                raw = raw[:at] + raw[at + draw(st.integers(1, 8)) :]
            else:
                raw = raw[:at] + draw(st.binary(min_size=1, max_size=1)) + raw[at + 1 :]
        return raw

    return mangle()


def _chunked(body: bytes, sizes: list[int]) -> bytes:
    out, at = [], 0
    for size in sizes:
        piece = body[at : at + size]
        at += size
        if piece:
            out.append(b"%x\r\n%s\r\n" % (len(piece), piece))
    if at < len(body):
        out.append(b"%x\r\n%s\r\n" % (len(body) - at, body[at:]))
    return b"".join(out) + b"0\r\n\r\n"


_FRAMING_VALUES: Final = [
    b"0", b"2", b"13", b"+2", b"-1", b"2, 2", b" 2", b"99999999999999999999", b"0x2",
    b"chunked", b"xchunked", b"gzip, chunked", b"chunked, gzip", b"identity", b"close", b"keep-alive",
    b"upgrade", b"100-continue", b"h2c", b"a\rb", b"a\nb", b"a\x00b", b"",
]  # fmt: skip
_HEADER_NAMES: Final = [
    b"Content-Length", b"Transfer-Encoding", b"Connection", b"Expect", b"Upgrade", b"Host",
    b"Content-Type", b"X-Any", b"Bad Name", b"", b"content-length ", b"Transfer-Encoding\x00",
]  # fmt: skip
_LINE_ENDS: Final = [b"\r\n", b"\r\n", b"\r\n", b"\n", b"\r"]


@st.composite
def _head_fields(draw: st.DrawFn) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 4))):
        name = draw(st.sampled_from(_HEADER_NAMES) | st.binary(max_size=12))
        value = draw(st.sampled_from(_FRAMING_VALUES) | st.binary(max_size=20))
        lines.append(name + b":" + draw(st.sampled_from([b" ", b"", b"  "])) + value)
    end = draw(st.sampled_from(_LINE_ENDS))
    return b"".join(line + end for line in lines)


@st.composite
def _response(draw: st.DrawFn) -> bytes:
    version = draw(
        st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/1.9", b"HTTP/2.0", b"http/1.1", b"HTTP/1.1 "])
    )
    status = draw(
        st.sampled_from(
            [b"100", b"101", b"103", b"200", b"201", b"204", b"304", b"409", b"999", b"2000", b"abc"]
        )
    )
    body = draw(st.binary(max_size=64))
    framing = draw(st.sampled_from(["length", "chunked", "close", "fields"]))
    head = version + b" " + status + b" Reason\r\n"
    if framing == "length":
        head += b"Content-Length: %d\r\n" % len(body)
    elif framing == "chunked":
        head += b"Transfer-Encoding: chunked\r\n"
        body = _chunked(body, draw(st.lists(st.integers(1, 20), max_size=4)))
    elif framing == "fields":
        head += draw(_head_fields())
    return head + draw(_head_fields()) + b"\r\n" + body


RESPONSE_CASES: Final = _splits(
    st.binary(max_size=300)
    | _mangled(st.lists(_response(), min_size=1, max_size=3).map(b"".join))
    | st.lists(_response(), min_size=1, max_size=3).map(b"".join)
)


def check_response(reads: list[bytes]) -> None:
    parser = ResponseParser()
    responses: list[Response] = []
    try:
        for data in reads:
            responses.extend(parser.feed(data))
        last = parser.close()
        if last is not None:
            responses.append(last)
    except ProtocolError:
        try:
            parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        except ProtocolError:
            pass
        else:
            raise AssertionError("a failed parser read on") from None
    for response in responses:
        assert 200 <= response.status <= 999, response
        assert len(response.body) <= MAX_BODY


# -- requests through the webhook's server ---------------------------------------------------------

_REVIEWS: Final = [
    json.dumps(admission_review(GPU_POD.copy().lim({GPU: gpus}).obj(), uid=f"u{gpus}")).encode()
    for gpus in ("1", "3")
]


@st.composite
def _request(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from([b"POST", b"POST", b"GET", b"PUT", b"P0ST", b"post", b""]))
    path = draw(
        st.sampled_from(
            [b"/validate", b"/mutate", b"/validate?timeout=10s", b"/livez", b"/readyz", b"/x", b"*", b""]
        )
    )
    version = draw(
        st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/1.9", b"HTTP/2.0", b"HTTP/1.1 x"])
    )
    body = draw(st.sampled_from(_REVIEWS) | st.binary(max_size=64) | st.just(b'{"kind": "AdmissionReview"}'))
    framing = draw(st.sampled_from(["length", "length", "chunked", "none", "short", "fields"]))
    end = draw(st.sampled_from(_LINE_ENDS))
    head = method + b" " + path + b" " + version + end + b"Host: x" + end
    if framing in ("length", "short"):
        head += b"Content-Length: %d" % (len(body) + (7 if framing == "short" else 0)) + end
    elif framing == "chunked":
        head += b"Transfer-Encoding: chunked" + end
        body = _chunked(body, draw(st.lists(st.integers(1, 200), max_size=3)))
    return head + draw(_head_fields()) + end + body


REQUEST_CASES: Final = _splits(
    st.binary(max_size=300)
    | _mangled(st.lists(_request(), min_size=1, max_size=3).map(b"".join))
    | st.lists(_request(), min_size=1, max_size=4).map(b"".join)
)
_CLEAN: Final = frozenset({200, 400, 404, 405, 408, 413, 417, 431})


# aiohttp.server does not propagate while a harness runs (see WebhookHarness): it gets the handler too.
_LOGGERS: Final = ("aiohttp", "aiohttp.server", "gpuq_k8s", "asyncio")


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, (HttpProcessingError, ConnectionResetError)):
            # aiohttp's log line for a request it refused with a 400, or for a client that closed
            # while its body was being read: a clean refusal, a client gone.
            return
        self.records.append(record)


class WebhookHarness:
    """The webhook's real server (``create_server``: the fast path in front of aiohttp) on an event
    loop of its own; :meth:`exchange` opens a connection over a socket pair, writes, half-closes and
    reads everything that comes back."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop_errors: list[dict[str, Any]] = []
        self.loop.set_exception_handler(lambda _, context: self.loop_errors.append(context))
        self.errors = _Errors()
        for name in _LOGGERS:
            logging.getLogger(name).addHandler(self.errors)
        # aiohttp logs each request it refuses with a 400 at ERROR, traceback included: kept from the
        # run's own output (the handler above still sees every record).
        self.server_log = logging.getLogger("aiohttp.server")
        self.server_log.propagate = False
        endpoints = Endpoints(
            Admission(StaticView([QUEUE, NODE])), WebhookMetrics(), limits=ServerLimits(read_timeout=2.0)
        )
        self.server = self.loop.run_until_complete(self._create(endpoints))

    @staticmethod
    async def _create(endpoints: Endpoints) -> Any:
        return create_server(endpoints)

    def close(self) -> None:
        self.server_log.propagate = True
        for name in _LOGGERS:
            logging.getLogger(name).removeHandler(self.errors)
        self.loop.run_until_complete(self.server.shutdown(1.0))
        self.loop.close()

    def exchange(self, writes: list[bytes]) -> bytes:
        return self.loop.run_until_complete(asyncio.wait_for(self._exchange(writes), 30))

    async def _exchange(self, writes: list[bytes]) -> bytes:
        loop = self.loop
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        await loop.connect_accepted_socket(self.server, theirs)
        received = b""
        try:
            for data in writes:
                if data:
                    await loop.sock_sendall(ours, data)
                await asyncio.sleep(0)
            ours.shutdown(socket.SHUT_WR)
            while chunk := await loop.sock_recv(ours, 65536):
                received += chunk
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed the connection on a request it refused
        finally:
            ours.close()
        return received

    def check(self, writes: list[bytes]) -> None:
        self.loop_errors.clear()
        self.errors.records.clear()
        received = self.exchange(writes)
        assert not self.loop_errors, self.loop_errors[0]
        assert not self.errors.records, self.errors.format(self.errors.records[0])
        answers = _Answers()
        answers.parser.feed_data(received)  # an HttpParserError here is a mangled answer: a failure
        assert not answers.in_message, f"an answer cut short: {received[-200:]!r}"
        for status in answers.statuses:
            assert status in _CLEAN, (status, received[:300])


class _Answers:
    """The statuses of the whole responses in a stream (llhttp's reading, not gpuq's client's: aiohttp
    answers a request in its own HTTP version, ``HTTP/2.0`` included)."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.in_message = False
        self.parser = httptools.HttpResponseParser(self)

    def on_message_begin(self) -> None:
        self.in_message = True

    def on_message_complete(self) -> None:
        self.in_message = False
        self.statuses.append(self.parser.get_status_code())


_HARNESS: Final[list[WebhookHarness]] = []  # one server for a whole run, made on first use


def check_request(writes: list[bytes]) -> None:
    if not _HARNESS:
        _HARNESS.append(WebhookHarness())
    _HARNESS[0].check(writes)


HTTP_BOUNDARIES: Final = (
    Boundary("http_response", RESPONSE_CASES, check_response),
    Boundary("http_request", REQUEST_CASES, check_request),
)
