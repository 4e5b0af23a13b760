"""common/kube/errors.py: the API's error vocabulary. Every class from its status and from the Status
bodies kube-apiserver sends (copied from its answers), ``Reply.raise_for_status``, and failures on the
way translated to the same TransportError whichever client sent the request (gpuq's own, aiohttp's,
a ``call_api``), against real sockets on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from gpuq_k8s.common.kube.client import ApiClient, GatedClient, request
from gpuq_k8s.common.kube.errors import (
    ApiError,
    BadRequest,
    Conflict,
    ConnectFailed,
    Disconnected,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    ProtocolError,
    RequestFailed,
    RequestTimeout,
    ServerError,
    TooManyRequests,
    TransportError,
    Unauthorized,
    WriteRefused,
    api_error,
    status_error,
    transport_error,
)
from gpuq_k8s.common.kube.http import HttpClient
from gpuq_k8s.common.kube.status import Reply
from gpuq_k8s.common.model.errors import GpuqError


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, BadRequest),
        (401, Unauthorized),
        (403, Forbidden),
        (404, NotFound),
        (409, Conflict),
        (410, Gone),
        (422, Invalid),
        (429, TooManyRequests),
        (500, ServerError),
        (503, ServerError),
        (504, ServerError),
        (405, ApiError),
        (418, ApiError),
        (302, ApiError),
    ],
)
def test_each_status_has_its_class(status: int, cls: type[ApiError]) -> None:
    error = api_error(status)
    assert type(error) is cls
    assert isinstance(error, KubeError) and isinstance(error, GpuqError)
    assert error.status == status and error.message == f"HTTP {status}" and str(error) == f"HTTP {status}"


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


# Bodies as kube-apiserver v1.36 answers them (k8s.io/apimachinery/pkg/api/errors).
APISERVER = [
    (
        _status(404, "NotFound", 'pods "p" not found', {"name": "p", "kind": "pods"}),
        NotFound,
    ),
    (
        _status(
            409,
            "AlreadyExists",
            'secrets "gpuq-webhook-tls" already exists',
            {"name": "gpuq-webhook-tls", "kind": "secrets"},
        ),
        Conflict,
    ),
    (
        _status(
            409,
            "Conflict",
            'Operation cannot be fulfilled on leases.coordination.k8s.io "gpuq-scheduler": the object has '
            "been modified; please apply your changes to the latest version and try again",
            {"name": "gpuq-scheduler", "group": "coordination.k8s.io", "kind": "leases"},
        ),
        Conflict,
    ),
    (_status(410, "Expired", "too old resource version: 5 (1234)"), Gone),
    (
        _status(
            422,
            "Invalid",
            'Pod "p" is invalid: spec.containers: Required value',
            {
                "name": "p",
                "kind": "Pod",
                "causes": [
                    {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}
                ],
            },
        ),
        Invalid,
    ),
    (
        _status(
            403,
            "Forbidden",
            'nodes is forbidden: User "system:serviceaccount:ml:reader" cannot list resource "nodes" in API '
            'group "" at the cluster scope',
            {"kind": "nodes"},
        ),
        Forbidden,
    ),
    (_status(401, "Unauthorized", "Unauthorized"), Unauthorized),
    (
        _status(
            400,
            "BadRequest",
            "the server rejected our request due to an error in our request",
        ),
        BadRequest,
    ),
    (
        _status(
            429, "TooManyRequests", "Too many requests, please try again later.", {"retryAfterSeconds": 1}
        ),
        TooManyRequests,
    ),
    (
        _status(
            500,
            "InternalError",
            "Internal error occurred: etcdserver: request timed out",
            {"causes": [{"message": "etcdserver: request timed out"}]},
        ),
        ServerError,
    ),
    (_status(504, "Timeout", "Timeout: request did not complete within requested timeout"), ServerError),
]


@pytest.mark.parametrize(("body", "cls"), APISERVER, ids=[f"{b['code']}-{b['reason']}" for b, _ in APISERVER])
def test_a_status_body_keeps_its_reason_message_and_details(
    body: dict[str, Any], cls: type[ApiError]
) -> None:
    error = api_error(body["code"], body)
    assert type(error) is cls
    assert (error.status, error.reason, error.message) == (body["code"], body["reason"], body["message"])
    assert error.details == body.get("details", {})
    assert str(error) == body["message"]
    # A watch's ERROR event carries the same Status object without an HTTP status: its code says.
    alone = status_error(body)
    assert type(alone) is cls and (alone.status, alone.reason) == (body["code"], body["reason"])


def test_a_body_that_is_not_a_status_gives_its_message_only() -> None:
    error = api_error(502, {"message": "<html>Bad Gateway</html>"})
    assert type(error) is ServerError and (error.reason, error.message) == ("", "<html>Bad Gateway</html>")
    assert api_error(404, {"details": "not a mapping"}).details == {}
    assert type(status_error({"kind": "Status", "message": "no code"})) is ApiError


def test_raise_for_status_raises_the_typed_error_and_passes_a_success() -> None:
    ok = Reply(201, {"metadata": {"name": "p"}})
    assert ok.ok and ok.error is None and ok.raise_for_status() is ok
    gone = Reply(404, _status(404, "NotFound", 'pods "p" not found'))
    assert not gone.ok and isinstance(gone.error, NotFound)
    with pytest.raises(NotFound) as raised:
        gone.raise_for_status()
    assert str(raised.value) == gone.message == 'pods "p" not found'
    with pytest.raises(ServerError, match="HTTP 503"):
        Reply(503, {}).raise_for_status()
    assert Reply(503, {}).message == "HTTP 503"


@pytest.mark.parametrize(
    ("original", "cls"),
    [
        (TimeoutError(), RequestTimeout),
        (aiohttp.ConnectionTimeoutError("connect timed out"), RequestTimeout),
        (aiohttp.ServerDisconnectedError(), Disconnected),
        (ConnectionResetError(104, "Connection reset by peer"), Disconnected),
        (BrokenPipeError(32, "Broken pipe"), Disconnected),
        (aiohttp.ClientOSError(104, "Connection reset by peer"), Disconnected),
        (ConnectionRefusedError(111, "Connection refused"), ConnectFailed),
        (ssl.SSLCertVerificationError("certificate verify failed"), ConnectFailed),
        (socket.gaierror(-2, "Name or service not known"), ConnectFailed),
        (aiohttp.ClientPayloadError("Response payload is not completed"), ProtocolError),
        (aiohttp.InvalidURL("http://[::1"), TransportError),
    ],
)
def test_a_failure_on_the_way_becomes_a_transport_error_caused_by_it(
    original: BaseException, cls: type[TransportError]
) -> None:
    error = transport_error(original)
    assert type(error) is cls and isinstance(error, RequestFailed)
    assert error.__cause__ is original
    assert str(error) == (str(original) or type(original).__name__)
    assert transport_error(error) is error  # already gpuq's


def test_a_write_refused_is_no_transport_error() -> None:
    """Never sent: certainly not done, where a TransportError may have been (binding tells them apart)."""
    refused = WriteRefused("POST /x not sent: not the leader")
    assert isinstance(refused, RequestFailed) and not isinstance(refused, TransportError)
    assert not isinstance(refused, aiohttp.ClientError)


# ------------------------------------------------------------------ the same types on every path


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.close()


def _answer(data: bytes) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(data)
        await writer.drain()
        writer.close()

    return handler


async def _never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    await asyncio.sleep(60)  # cancelled when the test ends


@contextlib.asynccontextmanager
async def _server(handler: Handler | None) -> AsyncIterator[str]:
    """An HTTP endpoint on loopback answering as ``handler`` does; None: a port nobody listens on."""
    if handler is None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        yield f"http://127.0.0.1:{port}"
        return
    tasks: set[asyncio.Task[Any]] = set()

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(tracked, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


class _CallApi:
    """A client that is no kubernetes_asyncio ApiClient (a test's, the bench's reference): the request
    goes through its ``call_api``, here a real ApiClient's."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    async def call_api(self, *args: Any, **kwargs: Any) -> Any:
        return await self.api.call_api(*args, **kwargs)


@contextlib.asynccontextmanager
async def _client(path: str, host: str) -> AsyncIterator[Any]:
    configuration = client.Configuration(host=host)
    if path == "gpuq":
        ours = ApiClient(configuration)
        ours.gpuq_http = HttpClient(configuration)
        async with ours:
            yield ours
        return
    async with client.ApiClient(configuration) as theirs:  # no gpuq_http: aiohttp, as with a proxy
        yield theirs if path == "aiohttp" else _CallApi(theirs)


FAULTS: list[tuple[str, Handler | None, type[TransportError]]] = [
    ("refused", None, ConnectFailed),
    ("closed", _close_at_once, Disconnected),
    ("not-http", _answer(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"), ProtocolError),
    ("cut-short", _answer(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}"), ProtocolError),
    ("silent", _never_answer, RequestTimeout),
]


@pytest.mark.parametrize("path", ["gpuq", "aiohttp", "call_api"])
@pytest.mark.parametrize(("fault", "handler", "cls"), FAULTS, ids=[f[0] for f in FAULTS])
async def test_every_request_path_raises_the_same_transport_error(
    path: str, fault: str, handler: Handler | None, cls: type[TransportError]
) -> None:
    async with _server(handler) as host, _client(path, host) as api:
        with pytest.raises(TransportError) as raised:
            await request(
                api, "POST", "/api/v1/x", body={}, content_type="application/json", query=[], timeout=0.5
            )
    assert type(raised.value) is cls, f"{path}/{fault}: {raised.value!r} caused by {raised.value.__cause__!r}"
    assert not isinstance(raised.value, aiohttp.ClientError)


async def test_an_answer_is_returned_on_every_path() -> None:
    """The translation changes failures only: an error status is an answer, not an exception."""
    body = b'{"kind":"Status","code":404,"reason":"NotFound","message":"pods \\"p\\" not found"}'
    head = b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(
        body
    )
    for path in ("gpuq", "aiohttp", "call_api"):
        async with _server(_answer(head + body)) as host, _client(path, host) as api:
            status, raw = await request(
                api, "GET", "/api/v1/x", body=None, content_type="application/json", query=[], timeout=2
            )
        assert (status, raw) == (404, body), path


async def test_a_gated_write_is_refused_before_any_connection() -> None:
    async with _server(None) as host, _client("gpuq", host) as api:
        gated = GatedClient(api, lambda: False)
        with pytest.raises(WriteRefused, match="not the leader"):
            await request(
                gated, "POST", "/api/v1/x", body={}, content_type="application/json", query=[], timeout=1
            )
        with pytest.raises(ConnectFailed):  # a read is sent (and fails: nobody listens)
            await request(
                gated, "GET", "/api/v1/x", body=None, content_type="application/json", query=[], timeout=1
            )
