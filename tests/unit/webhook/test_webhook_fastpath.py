"""webhook.fastpath on a real socket: it answers plain reviews as aiohttp would, in order, and hands
everything else (and the rest of the connection) to aiohttp."""

from __future__ import annotations

import json
import socket
import time

import pytest

from gpuq_k8s.webhook import fastpath
from gpuq_k8s.webhook.endpoints import ServerLimits
from gpuq_k8s.webhook.view import StaticView
from tests.testing.builders import GPU
from tests.testing.webhook_server import GPU_POD, NODE, QUEUE, ServerThread, admission_review


def _request(body: bytes, path: str = "/validate", extra: str = "") -> bytes:
    return (
        f"POST {path}?timeout=10s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _answers(sock: socket.socket, count: int) -> list[tuple[bytes, dict[bytes, bytes], bytes]]:
    """``count`` HTTP answers (status line, headers, body) read off ``sock``."""
    data = b""
    answers: list[tuple[bytes, dict[bytes, bytes], bytes]] = []
    while len(answers) < count:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            lines = data[:end].split(b"\r\n")
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])
            }
            length = int(headers[b"content-length"])
            if len(data) >= end + 4 + length:
                answers.append((lines[0], headers, data[end + 4 : end + 4 + length]))
                data = data[end + 4 + length :]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {len(answers)} answers"
        data += chunk
    return answers


def _spy_on_handovers(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The unanswered bytes of each connection handed to aiohttp, as they are handed."""
    handed: list[bytes] = []
    delegate = fastpath.FastPath._delegate

    def spy(self: fastpath.FastPath) -> None:
        handed.append(self.pending)
        delegate(self)

    monkeypatch.setattr(fastpath.FastPath, "_delegate", spy)
    return handed


def _review(uid: str, gpus: str = "1") -> bytes:
    return json.dumps(admission_review(GPU_POD.copy().lim({GPU: gpus}).obj(), uid=uid)).encode()


def test_pipelined_reviews_are_answered_in_order_then_aiohttp_takes_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three reviews in one write (the middle one denied: 3 cards against a quota of 2), a probe,
    then a review again: each answered, in order, on one connection, the metrics counting each once;
    the connection went to aiohttp at the probe, not before."""
    handed = _spy_on_handovers(monkeypatch)
    with (
        ServerThread(StaticView([QUEUE, NODE])) as server,
        socket.create_connection(("127.0.0.1", server.port)) as sock,
    ):
        sock.settimeout(10)
        sock.sendall(_request(_review("a")) + _request(_review("b", "3")) + _request(_review("c"), "/mutate"))
        first = _answers(sock, 3)
        sock.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n" + _request(_review("d")))
        second = _answers(sock, 2)
        counted = server.metrics.requests.labels("Pod", "CREATE", "true")._value.get()
        denied = server.metrics.requests.labels("Pod", "CREATE", "false")._value.get()
    assert [status for status, _, _ in first + second] == [b"HTTP/1.1 200 OK"] * 5
    uids = [json.loads(body)["response"]["uid"] for _, _, body in first]
    assert uids == ["a", "b", "c"]
    assert [json.loads(body)["response"]["allowed"] for _, _, body in first] == [True, False, True]
    assert "NVIDIA-A100" in json.loads(first[1][2])["response"]["status"]["message"]
    assert second[0][2] == b"ok\n"
    assert json.loads(second[1][2])["response"]["uid"] == "d"
    assert (counted, denied) == (3, 1)
    assert len(handed) == 1 and handed[0].startswith(b"GET /livez ")


@pytest.mark.parametrize("gpus", ["1", "3"])
def test_fast_and_aiohttp_answers_are_the_same_bytes(gpus: str) -> None:
    """A ``Connection`` header sends a review through aiohttp: the answer's status, content type and
    body are those of the fast path."""
    body = _review("same", gpus)
    with ServerThread(StaticView([QUEUE, NODE])) as server:
        answers = []
        for extra in ("", "Connection: keep-alive\r\n"):
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.settimeout(10)
                sock.sendall(_request(body, extra=extra))
                answers.append(_answers(sock, 1)[0])
    (fast_status, fast_headers, fast_body), (slow_status, slow_headers, slow_body) = answers
    assert fast_status == slow_status == b"HTTP/1.1 200 OK"
    assert fast_headers[b"content-type"] == slow_headers[b"content-type"] == b"application/json"
    assert fast_body == slow_body
    assert fast_headers.keys() == slow_headers.keys()


def test_malformed_review_after_fast_ones_gets_aiohttps_400() -> None:
    with (
        ServerThread(StaticView([QUEUE, NODE])) as server,
        socket.create_connection(("127.0.0.1", server.port)) as sock,
    ):
        sock.settimeout(10)
        sock.sendall(_request(_review("a")) + _request(b'{"kind": "AdmissionReview"}'))
        (ok, _, _), (bad, _, text) = _answers(sock, 2)
    assert ok == b"HTTP/1.1 200 OK"
    assert bad == b"HTTP/1.1 400 Bad Request"
    assert text.decode().startswith("invalid AdmissionReview: ")
    assert text.decode().count("\n") == 1


def test_idle_connection_is_closed_after_the_keepalive_timeout() -> None:
    with (
        ServerThread(StaticView([QUEUE, NODE]), limits=ServerLimits(keepalive_timeout=0.2)) as server,
        socket.create_connection(("127.0.0.1", server.port)) as sock,
    ):
        sock.settimeout(10)
        sock.sendall(_request(_review("a")))
        assert _answers(sock, 1)[0][0] == b"HTTP/1.1 200 OK"
        started = time.monotonic()
        assert sock.recv(1) == b""  # closed by the server, not by our 10 s timeout
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    "head",
    [
        b"POST /validate HTTP/1.1\nHost: x\nContent-Length: %d\n\n",  # bare LFs
        b"POST /validate HTTP/1.1\r\nHost: x\r\nBad Name: y\r\nContent-Length: %d\r\n\r\n",
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nContent-Length: %d\r\n\r\n",
    ],
)
def test_unusual_heads_are_judged_by_aiohttp(head: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """A head the fast path does not read the way aiohttp would goes to aiohttp, whatever it answers."""
    handed = _spy_on_handovers(monkeypatch)
    body = _review("a")
    with (
        ServerThread(StaticView([QUEUE, NODE])) as server,
        socket.create_connection(("127.0.0.1", server.port)) as sock,
    ):
        sock.settimeout(10)
        sock.sendall(head.replace(b"%d", str(len(body)).encode()) + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
            if b"\r\n\r\n" in answer:
                break
    assert answer.startswith(b"HTTP/1."), answer[:100]
    assert len(handed) == 1 and handed[0].startswith(b"POST /validate")


@pytest.mark.parametrize(("padding", "handed_over"), [(0, False), (fastpath.MAX_WAITED_BODY, True)])
def test_a_body_in_two_writes_is_waited_for_unless_large(
    padding: int, handed_over: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body still arriving is gathered by the fast path when small, by aiohttp when large; either
    way the review is answered."""
    handed = _spy_on_handovers(monkeypatch)
    review = admission_review(GPU_POD.copy().lim({GPU: "1"}).obj(), uid="split")
    review["request"]["object"]["metadata"]["annotations"]["pad"] = "x" * padding
    message = _request(json.dumps(review).encode())
    with (
        ServerThread(StaticView([QUEUE, NODE])) as server,
        socket.create_connection(("127.0.0.1", server.port)) as sock,
    ):
        sock.settimeout(10)
        sock.sendall(message[: len(message) // 2])
        time.sleep(0.1)
        sock.sendall(message[len(message) // 2 :])
        ((status, _, body),) = _answers(sock, 1)
    assert status == b"HTTP/1.1 200 OK"
    assert json.loads(body)["response"]["uid"] == "split"
    assert bool(handed) is handed_over
