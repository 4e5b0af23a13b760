"""webhook.fastpath under pressure (issue 24), on a real socket: a client that pipelines reviews
without reading its answers is pushed back on (the buffer and the write queue stay bounded, nothing
is lost), and a busy connection outlives the keep-alive timeout while an idle one does not."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest

from gpuq_k8s.webhook import fastpath
from gpuq_k8s.webhook.endpoints import ServerLimits
from gpuq_k8s.webhook.view import StaticView
from tests.testing.builders import GPU
from tests.testing.webhook_server import GPU_POD, NODE, QUEUE, ServerThread, admission_review

ONE_READ = 256 * 1024  # the most one read of the transports brings


def _request(body: bytes) -> bytes:
    head = f"POST /validate?timeout=10s HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def _answers(sock: socket.socket, count: int) -> list[tuple[bytes, bytes, bytes]]:
    """``count`` HTTP answers (status line, head, body) read off ``sock``."""
    data = b""
    answers: list[tuple[bytes, bytes, bytes]] = []
    while len(answers) < count:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            head = data[:end]
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            if len(data) >= end + 4 + length:
                answers.append((head.split(b"\r\n")[0], head, data[end + 4 : end + 4 + length]))
                data = data[end + 4 + length :]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {len(answers)} answers"
        data += chunk
    return answers


def _review(uid: str) -> bytes:
    return json.dumps(admission_review(GPU_POD.copy().lim({GPU: "1"}).obj(), uid=uid)).encode()


def _small_buffers(sock: socket.socket) -> None:
    """Kernel buffers of 32 KiB (no autotuning): what the kernel absorbs must not hide whether the
    server reads and writes when it should."""
    for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        sock.setsockopt(socket.SOL_SOCKET, option, 32 * 1024)


def _connect(port: int) -> socket.socket:
    sock = socket.socket()
    _small_buffers(sock)
    sock.connect(("127.0.0.1", port))
    return sock


def _watch(monkeypatch: pytest.MonkeyPatch) -> tuple[list[fastpath.FastPath], dict[str, int]]:
    """The connections' protocols, and the most unanswered bytes and queued answer bytes seen."""
    protocols: list[fastpath.FastPath] = []
    seen = {"pending": 0, "queued": 0}
    made, received, write = (
        fastpath.FastPath.connection_made,
        fastpath.FastPath.data_received,
        fastpath.FastPath._write,
    )

    def on_made(self: fastpath.FastPath, transport: asyncio.BaseTransport) -> None:
        protocols.append(self)
        _small_buffers(transport.get_extra_info("socket"))
        made(self, transport)

    def on_data(self: fastpath.FastPath, data: bytes) -> None:
        received(self, data)
        seen["pending"] = max(seen["pending"], len(self.buffer) - self.pos)

    def on_write(self: fastpath.FastPath, body: bytes) -> None:
        write(self, body)
        if self.transport is not None:
            seen["queued"] = max(seen["queued"], self.transport.get_write_buffer_size())

    monkeypatch.setattr(fastpath.FastPath, "connection_made", on_made)
    monkeypatch.setattr(fastpath.FastPath, "data_received", on_data)
    monkeypatch.setattr(fastpath.FastPath, "_write", on_write)
    return protocols, seen


def test_a_client_that_does_not_read_is_pushed_back_on_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """5 MB of pipelined reviews, sent while the answers are not read: the server stops reading
    (the unanswered bytes stay under the read limit plus one read) and stops answering (its write
    queue stays near the transport's high-water mark) until the client reads; then every review is
    answered, in order. Before: the buffer held everything sent, and the answers queued without
    bound."""
    _, seen = _watch(monkeypatch)
    count = 8000
    message = b"".join(_request(_review(f"u{n}")) for n in range(count))
    sent = threading.Event()
    with ServerThread(StaticView([QUEUE, NODE])) as server, _connect(server.port) as sock:
        sock.settimeout(60)

        def send() -> None:
            sock.sendall(message)
            sent.set()

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        time.sleep(1.5)  # the client writes and never reads: the server must stop reading
        assert not sent.is_set(), "the server read everything while nobody read its answers"
        stalled = dict(seen)
        answered_while_stalled = server.metrics.requests.labels("Pod", "CREATE", "true")._value.get()
        answers = _answers(sock, count)
        sender.join(30)
    assert stalled["pending"] <= fastpath.READ_LIMIT + ONE_READ
    assert stalled["queued"] <= 1024 * 1024
    assert answered_while_stalled < count
    assert [json.loads(body)["response"]["uid"] for _, _, body in answers] == [f"u{n}" for n in range(count)]


def test_the_buffer_is_not_copied_per_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """Answered requests are dropped from the buffer's front in large steps, not by copying the rest
    of the buffer after each request (which made a deep pipeline quadratic)."""
    protocols, _ = _watch(monkeypatch)
    count = 200
    with (
        ServerThread(StaticView([QUEUE, NODE])) as server,
        socket.create_connection(("127.0.0.1", server.port)) as sock,
    ):
        sock.settimeout(20)
        sock.sendall(b"".join(_request(_review(f"u{n}")) for n in range(count)))
        answers = _answers(sock, count)
        (protocol,) = protocols
        buffer = protocol.buffer
    assert len(answers) == count
    assert buffer is protocol.buffer  # one bytearray for the connection's life
    assert protocol.pos == 0 and not buffer  # all answered, all dropped


@pytest.mark.parametrize("interval", [0.05])
def test_a_busy_connection_outlives_the_keepalive_timeout(interval: float) -> None:
    """Reviews every 50 ms for 2 s on one connection with a keep-alive timeout of 0.4 s: every one
    answered. Before, aiohttp's keep-alive timer (armed at connection_made, never pushed back by
    fast-path traffic) closed the connection when it first fired."""
    with (
        ServerThread(StaticView([QUEUE, NODE]), limits=ServerLimits(keepalive_timeout=0.4)) as server,
        socket.create_connection(("127.0.0.1", server.port)) as sock,
    ):
        sock.settimeout(10)
        uids = []
        ends = time.monotonic() + 2.0
        n = 0
        while time.monotonic() < ends:
            sock.sendall(_request(_review(f"u{n}")))
            ((status, _, body),) = _answers(sock, 1)
            assert status == b"HTTP/1.1 200 OK"
            uids.append(json.loads(body)["response"]["uid"])
            n += 1
            time.sleep(interval)
        assert uids == [f"u{k}" for k in range(n)]
        started = time.monotonic()
        assert sock.recv(1) == b""  # and once idle, it is closed
    assert time.monotonic() - started < 3


def test_a_connection_handed_to_aiohttp_gets_aiohttps_keepalive_timer_back() -> None:
    """A head longer than the fast path reads (many short headers), never finished: handed to
    aiohttp, which waits for the rest of it; aiohttp's keep-alive timer (cancelled while the fast
    path owned the connection) closes it."""
    head = b"POST /validate HTTP/1.1\r\nHost: x\r\n" + (b"X-A: " + b"b" * 200 + b"\r\n") * 50
    with (
        ServerThread(StaticView([QUEUE, NODE]), limits=ServerLimits(keepalive_timeout=0.3)) as server,
        socket.create_connection(("127.0.0.1", server.port)) as sock,
    ):
        sock.settimeout(10)
        sock.sendall(head)
        started = time.monotonic()
        assert sock.recv(65536) == b""
    assert time.monotonic() - started < 5


def test_a_head_left_unfinished_is_closed_after_the_keepalive_timeout() -> None:
    with (
        ServerThread(StaticView([QUEUE, NODE]), limits=ServerLimits(keepalive_timeout=0.3)) as server,
        socket.create_connection(("127.0.0.1", server.port)) as sock,
    ):
        sock.settimeout(10)
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        assert sock.recv(65536) == b""
    assert time.monotonic() - started < 5
