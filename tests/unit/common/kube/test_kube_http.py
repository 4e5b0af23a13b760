"""common.kube.http.ResponseParser: HTTP/1.1 responses from bytes as they arrive, split anywhere."""

from __future__ import annotations

import pytest

from gpuq_k8s.common.kube.errors import ProtocolError
from gpuq_k8s.common.kube.http import Response, ResponseParser

LENGTH = b'HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{"kind":"x"}\n'
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    b'5\r\n{"a":\r\n3;ext=1\r\n1}\n\r\n0\r\n\r\n'
)
TRAILERS = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-Trailer: 1\r\n\r\n"
CLOSE = b"HTTP/1.1 409 Conflict\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
NO_CONTENT = b"HTTP/1.1 204 No Content\r\n\r\n"


def parse_split(data: bytes, at: list[int]) -> list[Response]:
    parser = ResponseParser()
    out: list[Response] = []
    last = 0
    for cut in [*at, len(data)]:
        out.extend(parser.feed(data[last:cut]))
        last = cut
    return out


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (LENGTH, Response(201, b'{"kind":"x"}\n', True)),
        (CHUNKED, Response(200, b'{"a":1}\n', True)),
        (TRAILERS, Response(200, b"ok", True)),
        (CLOSE, Response(409, b"{}", False)),
        (NO_CONTENT, Response(204, b"", True)),
    ],
    ids=["content-length", "chunked", "trailers", "connection-close", "no-content"],
)
def test_a_response_split_at_every_byte_parses_the_same(data: bytes, expected: Response) -> None:
    assert parse_split(data, []) == [expected]
    for cut in range(1, len(data)):
        assert parse_split(data, [cut]) == [expected], cut
    assert parse_split(data, list(range(1, len(data)))) == [expected]  # one byte at a time


def test_responses_back_to_back_in_one_read() -> None:
    parser = ResponseParser()
    assert [r.status for r in parser.feed(LENGTH + CHUNKED + NO_CONTENT)] == [201, 200, 204]
    assert parser.close() is None


def test_a_body_without_length_runs_to_the_close() -> None:
    parser = ResponseParser()
    assert parser.feed(b"HTTP/1.1 500 Internal Server Error\r\n\r\npart one, ") == []
    assert parser.feed(b"part two") == []
    assert parser.close() == Response(500, b"part one, part two", False)


def test_http_1_0_does_not_keep_the_connection() -> None:
    (response,) = ResponseParser().feed(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert not response.keep_alive


@pytest.mark.parametrize(
    "data",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXX",
    ],
    ids=["not-http", "status", "length", "header", "chunk-size", "chunk-end"],
)
def test_what_is_not_http_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        ResponseParser().feed(data)


def test_a_stream_cut_in_the_middle_of_a_response_is_a_protocol_error() -> None:
    parser = ResponseParser()
    parser.feed(LENGTH[:-4])
    with pytest.raises(ProtocolError, match="in the middle"):
        parser.close()
