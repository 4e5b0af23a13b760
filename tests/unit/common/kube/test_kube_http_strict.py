"""gpuq's HTTP client is strict (issue 24): llhttp's framing rules plus gpuq's, bounded input, a
connection pooled only with an empty parser, no header that splits a request, and the leadership gate
asked again right before the bytes go out.

Each case here was accepted (or mis-read) by the hand parser this replaced. The peer in the socket
tests is a scripted asyncio server: what matters is the exact bytes it answers, which a real
apiserver never sends on purpose.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes_asyncio import client

from gpuq_k8s.common.kube.client import ApiClient, GatedClient, gate_aiohttp, request
from gpuq_k8s.common.kube.errors import InvalidHeader, ProtocolError, WriteRefused
from gpuq_k8s.common.kube.http import (
    MAX_BODY,
    MAX_CHUNK_LINE,
    MAX_HEAD,
    HttpClient,
    Response,
    ResponseParser,
)

CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def test_a_100_continue_is_skipped_and_the_answer_read() -> None:
    parser = ResponseParser()
    data = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"
    assert parser.feed(data) == [Response(201, b"{}", True)]
    assert parser.idle


def test_a_100_continue_split_from_its_answer_is_skipped() -> None:
    parser = ResponseParser()
    assert parser.feed(b"HTTP/1.1 100 Continue\r\n\r\n") == []
    assert parser.feed(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n") == []
    assert parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") == [Response(200, b"", True)]


def test_an_endless_run_of_1xx_answers_is_refused() -> None:
    parser = ResponseParser()
    with pytest.raises(ProtocolError, match="informational"):
        for _ in range(100):
            parser.feed(b"HTTP/1.1 100 Continue\r\n\r\n")


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        CHUNKED_HEAD + b"0x2\r\nok\r\n0\r\n\r\n",
        CHUNKED_HEAD + b"+2\r\nok\r\n0\r\n\r\n",
        CHUNKED_HEAD + b"1_0\r\n0123456789abcdef\r\n0\r\n\r\n",
        b"HTTP/1.9 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
        b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
        b"HTTP/1.1 200 OK\r\nX: a\r\n folded\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n",
        b"HTTP/1.0 000 \r\n\r\n",
        b"HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n",
    ],
    ids=[
        "duplicate-content-length",
        "content-length-and-transfer-encoding",
        "xchunked",
        "gzip-chunked",
        "two-transfer-encodings",
        "chunk-size-0x2",
        "chunk-size-+2",
        "chunk-size-1_0",
        "http-1.9",
        "http-2.0",
        "content-length-+2",
        "bare-lf",
        "obs-fold",
        "upgrade",
        "status-000",  # found by the fuzz boundary http_response (llhttp takes any three digits)
        "status-099",
    ],
)
def test_lenient_framing_is_refused(data: bytes) -> None:
    parser = ResponseParser()
    with pytest.raises(ProtocolError):
        parser.feed(data)
    with pytest.raises(ProtocolError):  # and stays refused: llhttp cannot resume
        parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")


def test_a_head_in_one_read_is_capped() -> None:
    head = b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * MAX_HEAD + b"\r\nContent-Length: 0\r\n\r\n"
    with pytest.raises(ProtocolError, match="head exceeds"):
        ResponseParser().feed(head)


def test_a_head_arriving_in_many_reads_is_capped() -> None:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\nX-Big: ")
    with pytest.raises(ProtocolError, match="head exceeds"):
        for _ in range(MAX_HEAD // 1000 + 2):
            parser.feed(b"a" * 1000)


def test_many_small_headers_are_capped_too() -> None:
    head = b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * (MAX_HEAD // 6 + 10) + b"\r\n"
    with pytest.raises(ProtocolError, match="head exceeds"):
        ResponseParser().feed(head)


def test_the_body_is_capped_whatever_its_framing() -> None:
    with pytest.raises(ProtocolError, match="body exceeds 1000"):
        ResponseParser(max_body=1000).feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n" + b"x" * 2000)
    parser = ResponseParser(max_body=1000)
    with pytest.raises(ProtocolError, match="body exceeds 1000"):
        parser.feed(CHUNKED_HEAD)
        for _ in range(20):
            parser.feed(b"64\r\n" + b"x" * 100 + b"\r\n")
    parser = ResponseParser(max_body=1000)
    with pytest.raises(ProtocolError, match="body exceeds 1000"):
        parser.feed(b"HTTP/1.1 200 OK\r\n\r\n")  # to the close
        for _ in range(20):
            parser.feed(b"x" * 100)
    assert MAX_BODY >= 3 * 1024 * 1024  # the apiserver's largest request body


def test_a_long_chunk_size_line_is_refused_in_one_read_or_many() -> None:
    with pytest.raises(ProtocolError, match="chunk-size lines"):
        ResponseParser().feed(CHUNKED_HEAD + b"2;ext=" + b"a" * (3 * MAX_CHUNK_LINE) + b"\r\nok\r\n0\r\n\r\n")
    parser = ResponseParser()
    parser.feed(CHUNKED_HEAD + b"2;ext=")
    with pytest.raises(ProtocolError, match="chunk-size lines"):
        for _ in range(2 * MAX_CHUNK_LINE // 100 + 2):
            parser.feed(b"a" * 100)
    parser = ResponseParser()
    with pytest.raises(ProtocolError, match="chunk-size lines"):
        parser.feed(CHUNKED_HEAD + b"0" * (3 * MAX_CHUNK_LINE) + b"2\r\nok\r\n0\r\n\r\n")


def test_ordinary_chunk_lines_pass() -> None:
    body = b"".join(b"%x;name=value\r\n%s\r\n" % (n, b"y" * n) for n in range(1, 200))
    (response,) = ResponseParser().feed(CHUNKED_HEAD + body + b"0\r\nTrailer: 1\r\n\r\n")
    assert len(response.body) == sum(range(1, 200))


def test_the_parser_is_idle_only_between_responses() -> None:
    parser = ResponseParser()
    assert parser.idle
    parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\no")
    assert not parser.idle
    assert parser.feed(b"k") == [Response(200, b"ok", True)]
    assert parser.idle
    parser.feed(b"HTTP/1.1 409")
    assert not parser.idle


# -- the client on a socket ---------------------------------------------------------------------------


@dataclass
class Peer:
    """A scripted server: ``answers[i]`` are the bytes written for the i-th request it reads (on any
    connection); records every request head it reads."""

    answers: list[bytes]
    heads: list[bytes] = field(default_factory=list)
    connections: int = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                self.heads.append(head)
                writer.write(self.answers[len(self.heads) - 1])
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def peer() -> AsyncIterator[Callable[[list[bytes]], Any]]:
    servers: list[asyncio.Server] = []

    async def start(answers: list[bytes]) -> tuple[Peer, str]:
        script = Peer(answers)
        server = await asyncio.start_server(script.serve, "127.0.0.1", 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        return script, f"http://127.0.0.1:{port}"

    yield start
    for server in servers:
        server.close()


def configuration(host: str) -> client.Configuration:
    config = client.Configuration()
    config.host = host
    return config


async def test_a_connection_with_bytes_after_its_answer_is_not_reused(peer: Any) -> None:
    """The desync: the first answer is followed by the head of a stale 409 whose body comes later.
    Pooled, the connection gave the next request that 409 instead of its own 201."""
    stale = b"HTTP/1.1 409 Conflict\r\nContent-Length: 2\r\n\r\n"
    created = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"
    script, host = await peer([created + stale, created])
    http = HttpClient(configuration(host))
    try:
        first = await http.request("POST", "/a", query=[], headers={}, body=b"{}", timeout=5)
        second = await http.request("POST", "/b", query=[], headers={}, body=b"{}", timeout=5)
    finally:
        await http.close()
    assert (first.status, second.status) == (201, 201)
    assert script.connections == 2


async def test_bytes_arriving_on_an_idle_connection_close_it(peer: Any) -> None:
    created = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"
    script, host = await peer([created, created, created])
    http = HttpClient(configuration(host))
    try:
        await http.request("POST", "/a", query=[], headers={}, body=b"{}", timeout=5)
        (idle,) = http._idle
        idle.data_received(b"HTTP/1.1 409 Conflict\r\n")  # late bytes of nobody's answer
        assert idle.closed
        second = await http.request("POST", "/b", query=[], headers={}, body=b"{}", timeout=5)
    finally:
        await http.close()
    assert second.status == 201
    assert script.connections == 2


async def test_a_token_ending_in_a_newline_is_trimmed_as_client_go_trims_it(peer: Any) -> None:
    script, host = await peer([b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"])
    http = HttpClient(configuration(host))
    try:
        headers = {"Authorization": "Bearer abc\n"}
        await http.request("GET", "/a", query=[], headers=headers, body=None, timeout=5)
    finally:
        await http.close()
    (head,) = script.heads
    assert b"\r\nAuthorization: Bearer abc\r\n" in head
    assert head.count(b"\n") == head.count(b"\r\n")


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer abc\r\nX-Injected: 1"},
        {"Authorization": "Bearer abc\nGET /x HTTP/1.1"},
        {"Authorization": "Bearer a\x00b"},
        {"Bad Name": "x"},
        {"X\r\nY": "x"},
    ],
    ids=["crlf", "lf", "nul", "space-in-name", "crlf-in-name"],
)
async def test_a_header_that_would_split_the_request_is_refused_unsent(
    peer: Any, headers: dict[str, str]
) -> None:
    script, host = await peer([b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"])
    http = HttpClient(configuration(host))
    try:
        with pytest.raises(InvalidHeader):
            await http.request("GET", "/a", query=[], headers=headers, body=None, timeout=5)
    finally:
        await http.close()
    assert script.heads == []


# -- the leadership gate at the socket ---------------------------------------------------------------


def slow_auth(config: client.Configuration, gate: list[bool]) -> None:
    """An auth refresh that takes 0.3 s, during which the lease is lost."""
    config.api_key = {"BearerToken": "Bearer abc"}

    async def refresh(_: Any) -> None:
        await asyncio.sleep(0.3)

    async def lose() -> None:
        await asyncio.sleep(0.1)
        gate[0] = False

    config.refresh_api_key_hook = refresh
    asyncio.get_running_loop().create_task(lose())


async def test_the_gate_is_asked_again_after_a_slow_auth_refresh_on_gpuqs_client(peer: Any) -> None:
    script, host = await peer([b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"])
    gate = [True]
    config = configuration(host)
    slow_auth(config, gate)
    api = ApiClient(config)
    api.gpuq_http = HttpClient(config)
    gated = GatedClient(api, lambda: gate[0])
    try:
        with pytest.raises(WriteRefused):
            await request(
                gated, "POST", "/api/v1/x", body={}, content_type="application/json", query=[], timeout=5
            )
    finally:
        await api.close()
    assert script.heads == []
    assert gated.refused == 1


async def test_the_gate_is_asked_again_after_a_slow_auth_refresh_on_aiohttp(peer: Any) -> None:
    script, host = await peer([b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"] * 2)
    gate = [True]
    config = configuration(host)
    slow_auth(config, gate)
    api = client.ApiClient(config)  # kubernetes_asyncio's own: the aiohttp path
    gated = GatedClient(api, lambda: gate[0])
    try:
        with pytest.raises(WriteRefused):
            await request(
                gated, "POST", "/api/v1/x", body={}, content_type="application/json", query=[], timeout=5
            )
        gate[0] = True
        slow_auth(config, gate)
        with pytest.raises(WriteRefused):  # kubernetes_asyncio's generated path
            await gated.call_api("/api/v1/x", "POST", body={}, auth_settings=["BearerToken"])
    finally:
        await api.close()
    assert script.heads == []
    assert gated.refused == 2


async def test_reads_and_allowed_writes_pass_the_socket_gate(peer: Any) -> None:
    ok = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"
    script, host = await peer([ok] * 4)
    config = configuration(host)
    for api in (client.ApiClient(config), ApiClient(config)):
        if isinstance(api, ApiClient):
            api.gpuq_http = HttpClient(config)
        gate_aiohttp(api.rest_client.pool_manager)
        gated = GatedClient(api, lambda: False)
        try:
            status, _ = await request(
                gated, "GET", "/api/v1/x", body=None, content_type="application/json", query=[], timeout=5
            )
            assert status == 201
            allowed = GatedClient(api, lambda: True)
            status, _ = await request(
                allowed, "POST", "/api/v1/x", body={}, content_type="application/json", query=[], timeout=5
            )
            assert status == 201
        finally:
            await api.close()
    assert len(script.heads) == 4


@pytest.mark.parametrize("data", [b"HTTP/1.0 100 ", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"])
def test_a_stream_closed_in_a_response_leaves_the_parser_failed(data: bytes) -> None:
    """Found by the HTTP fuzzing (tests/unit/boundaries/test_fuzz_http.py): close() refused the cut
    response but left the parser able to read on, as if the stream could continue."""
    parser = ResponseParser()
    parser.feed(data)
    with pytest.raises(ProtocolError, match="closed in the middle"):
        parser.close()
    with pytest.raises(ProtocolError):
        parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
