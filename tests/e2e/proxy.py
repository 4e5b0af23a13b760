"""A fault-injecting HTTP proxy on loopback between a process under test and the e2e apiserver.

The process under test is given a kubeconfig (:meth:`ApiProxy.kubeconfig`) whose server is the proxy's
plain-HTTP address; the proxy forwards each request to the apiserver over TLS as the harness's admin
(client certificate), and streams the answer back. Because it speaks HTTP it sees every request
(method, path, query), every watch event it forwards, and it can disturb one kind of request only::

    proxy = ApiProxy(control_plane)
    await proxy.start()
    path = proxy.kubeconfig(tmp_path / "kubeconfig")   # for ``gpuq scheduler --kubeconfig``
    proxy.delay(is_bind, 0.25)            # each bind waits 0.25 s before it is forwarded
    silent = proxy.stall(is_watch("pods"))  # Pod watches, open and new, forward nothing ...
    silent.clear()                        # ... until cleared; what was held back then flows
    proxy.black_hole(is_lease)            # Lease requests are never forwarded, never answered
    gate = proxy.hold(is_write)           # writes wait (not forwarded) until gate.clear()
    late = proxy.hold(is_bind, outlive_client=True)  # ... and are forwarded even if their client died
    proxy.fail(lists_of("pods"), 503)     # answered 503 by the proxy (a Status), never forwarded
    proxy.exchanges                       # every request: method, path, pod, times, status
    proxy.events                          # every watch event forwarded: time, type, kind, name
    await proxy.stop()

In a test, the fixtures do the set-up: ``proxy`` (started, stopped after the test) and
``run_proxied`` (``run_proxied(name, config, *args)`` starts ``gpuq scheduler`` through ``proxy``;
every process it started is stopped before the proxy is).

A fault is a predicate on :class:`Exchange` and an action; it applies while active (until
:meth:`Fault.clear`). ``delay``, ``hold``, ``black_hole`` and ``fail`` act on requests as they
arrive; ``stall`` holds the response bytes of matching exchanges, including streams already open.
Times are wall-clock (``time.time()``), comparable with a Lease's ``acquireTime`` and with the
scheduler's JSON log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from yarl import URL

from tests.e2e.cluster_fixtures import SchedulerFactory, SchedulerProcess, scheduler_starter
from tests.e2e.controlplane.harness import ControlPlane

# Not forwarded: hop-by-hop headers, the length (re-computed), and the encoding (identity on both
# sides, so watch streams can be read line by line).
_SKIP_HEADERS = frozenset(
    {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "accept-encoding", "te"}
    | {"upgrade", "proxy-connection", "proxy-authorization", "content-encoding"}
)


@dataclass(eq=False)
class Exchange:
    """One request through the proxy. ``received``: when its headers arrived (wall clock);
    ``answered``: when the last byte of the answer was forwarded (None: never, or cut)."""

    method: str
    path: str
    query: Mapping[str, str]
    received: float
    status: int | None = None
    answered: float | None = None

    @property
    def watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")

    @property
    def streaming_list(self) -> bool:
        """A list by a watch (WatchList: ``sendInitialEvents``), not a watch of changes."""
        return self.watch and self.query.get("sendInitialEvents") in ("true", "1")

    @property
    def _parts(self) -> tuple[str, str, str, str]:
        """(namespace, resource, name, subresource) read from the path."""
        parts = [p for p in self.path.split("/") if p]
        rest = parts[2:] if parts[:1] == ["api"] else parts[3:]  # /api/v1/... or /apis/group/version/...
        namespace = ""
        if len(rest) > 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        rest += [""] * (3 - len(rest))
        return namespace, rest[0], rest[1], rest[2]

    @property
    def resource(self) -> str:
        return self._parts[1]

    @property
    def namespace(self) -> str:
        return self._parts[0]

    @property
    def name(self) -> str:
        return self._parts[2]

    @property
    def subresource(self) -> str:
        return self._parts[3]

    @property
    def pod(self) -> str:
        """``namespace/name`` of the pod a pod request is about ("" for other requests)."""
        return f"{self.namespace}/{self.name}" if self.resource == "pods" and self.name else ""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A watch event as the proxy forwarded it (``at``: wall clock, after any stall)."""

    at: float
    exchange: Exchange
    type: str
    kind: str
    namespace: str
    name: str
    resource_version: str = ""  # the object's (a BOOKMARK's: how far the watch has come)


Match = Callable[[Exchange], bool]


def is_bind(x: Exchange) -> bool:
    return x.method == "POST" and x.resource == "pods" and x.subresource == "binding"


def is_lease(x: Exchange) -> bool:
    return x.resource == "leases"


def is_write(x: Exchange) -> bool:
    return x.method not in ("GET", "HEAD")


def is_watch(resource: str) -> Match:
    """The watches of changes to ``resource`` (not its streaming lists)."""
    return lambda x: x.watch and not x.streaming_list and x.resource == resource


def lists_of(resource: str) -> Match:
    """The lists of ``resource``, by pages or streamed (WatchList), each counted once: a list's
    further pages (``continue``) and single-object GETs are not lists."""
    return lambda x: (
        x.method == "GET"
        and x.resource == resource
        and (not x.watch or x.streaming_list)
        and not x.name
        and "continue" not in x.query
    )


def reads_of(resource: str) -> Match:
    """Lists and watches (every GET) of ``resource``."""
    return lambda x: x.method == "GET" and x.resource == resource


@dataclass(eq=False)
class Fault:
    match: Match
    action: Literal["delay", "hold", "stall", "black_hole", "fail"]
    seconds: float = 0.0
    status: int = 0  # fail only: the HTTP status answered
    cleared: asyncio.Event = field(default_factory=asyncio.Event)
    # hold only: forwarded once cleared even when the client has gone meanwhile (a write its sender
    # gave up on, or died with, that still lands: what a slow network or a busy apiserver can do)
    outlive_client: bool = False

    @property
    def active(self) -> bool:
        return not self.cleared.is_set()

    def clear(self) -> None:
        """End the fault: stalled streams flow again; new requests pass."""
        self.cleared.set()


class ApiProxy:
    def __init__(self, plane: ControlPlane, *, keepalive_timeout: float = 75.0) -> None:
        self.plane = plane
        self.keepalive_timeout = keepalive_timeout  # the proxy closes a connection idle this long
        self.port = 0
        self.exchanges: list[Exchange] = []
        self.events: list[WatchEvent] = []
        self.faults: list[Fault] = []
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._outliving: set[asyncio.Task[web.StreamResponse]] = set()

    # -- set-up -----------------------------------------------------------------------------------
    async def start(self) -> ApiProxy:
        context = ssl.create_default_context(cafile=str(self.plane.pki / "ca.crt"))
        context.load_cert_chain(self.plane.pki / "admin.crt", self.plane.pki / "admin.key")
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context, limit=0),
            skip_auto_headers=("Accept-Encoding",),
            auto_decompress=False,
        )
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, keepalive_timeout=self.keepalive_timeout
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    def kubeconfig(self, path: Path) -> Path:
        """Write the harness's kubeconfig with the server replaced by this proxy; return ``path``."""
        text = self.plane.kubeconfig.read_text()
        assert self.plane.server in text
        path.write_text(text.replace(self.plane.server, f"http://127.0.0.1:{self.port}"))
        return path

    async def stop(self) -> None:
        for fault in self.faults:
            fault.clear()
        for task in list(self._outliving):
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, aiohttp.ClientError):
                await task
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    # -- faults -----------------------------------------------------------------------------------
    def delay(self, match: Match, seconds: float) -> Fault:
        """Matching requests wait ``seconds`` before they are forwarded."""
        return self._add(Fault(match, "delay", seconds))

    def hold(self, match: Match, *, outlive_client: bool = False) -> Fault:
        """Matching requests arriving while active wait until cleared, then are forwarded; with
        ``outlive_client`` even when their client went away meanwhile (the request was sent: it
        lands late, after its sender stopped waiting for it or exited)."""
        return self._add(Fault(match, "hold", outlive_client=outlive_client))

    def stall(self, match: Match) -> Fault:
        """Matching exchanges, open and new, forward no byte of their answer until cleared."""
        return self._add(Fault(match, "stall"))

    def black_hole(self, match: Match) -> Fault:
        """Matching requests arriving while active are never forwarded and never answered (the
        client's own timeout ends them)."""
        return self._add(Fault(match, "black_hole"))

    def fail(self, match: Match, status: int = 503) -> Fault:
        """Matching requests arriving while active are not forwarded: the proxy answers ``status``
        with a Kubernetes Status body, as kube-apiserver answers when etcd fails it."""
        return self._add(Fault(match, "fail", status=status))

    def _add(self, fault: Fault) -> Fault:
        self.faults.append(fault)
        return fault

    def _active(self, action: str, exchange: Exchange) -> list[Fault]:
        return [f for f in self.faults if f.action == action and f.active and f.match(exchange)]

    async def _hold(self, exchange: Exchange) -> None:
        while stalls := self._active("stall", exchange):
            await stalls[0].cleared.wait()

    # -- forwarding -------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        exchange = Exchange(request.method, request.path, dict(request.query), time.time())
        self.exchanges.append(exchange)
        if self._active("black_hole", exchange):
            await asyncio.Event().wait()  # ends when the client goes (handler cancelled) or at stop()
        if failing := self._active("fail", exchange):
            exchange.status = status = failing[0].status
            exchange.answered = time.time()
            reason = "ServiceUnavailable" if status == 503 else "InternalError"
            body_out = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "the e2e proxy failed this request",
                "reason": reason,
                "code": status,
            }
            return web.json_response(body_out, status=status)
        for fault in self._active("delay", exchange):
            await asyncio.sleep(fault.seconds)
        holds = self._active("hold", exchange)
        if any(f.outlive_client for f in holds):
            # Shielded from the handler's cancellation (the client going away): it still lands.
            task = asyncio.ensure_future(self._forward_late(request, exchange, body, holds))
            self._outliving.add(task)
            task.add_done_callback(self._outliving.discard)
            return await asyncio.shield(task)
        for fault in holds:
            await fault.cleared.wait()
        return await self._forward(request, exchange, body)

    async def _forward_late(
        self, request: web.Request, exchange: Exchange, body: bytes, holds: list[Fault]
    ) -> web.StreamResponse:
        for fault in holds:
            await fault.cleared.wait()
        try:
            return await self._forward(request, exchange, body)
        except ConnectionError:  # the answer has nobody to go to; the request was forwarded
            return web.StreamResponse()

    async def _forward(self, request: web.Request, exchange: Exchange, body: bytes) -> web.StreamResponse:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _SKIP_HEADERS}
        async with self._session.request(
            request.method,
            URL(f"https://127.0.0.1:{self.plane.apiserver_port}{request.raw_path}", encoded=True),
            data=body or None,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
        ) as upstream:
            exchange.status = upstream.status
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in _SKIP_HEADERS:
                    response.headers[key] = value
            await self._hold(exchange)
            await response.prepare(request)
            pending = b""
            try:
                async for chunk in upstream.content.iter_any():
                    await self._hold(exchange)
                    if exchange.watch:
                        pending = self._record_events(exchange, pending + chunk)
                    await response.write(chunk)
                await response.write_eof()
            except (ConnectionError, aiohttp.ClientError):
                return response  # the client went away (or the apiserver did): nothing to answer
            exchange.answered = time.time()
        return response

    def _record_events(self, exchange: Exchange, data: bytes) -> bytes:
        *lines, rest = data.split(b"\n")
        now = time.time()
        for line in lines:
            if not line.strip():
                continue
            with contextlib.suppress(ValueError):
                event: dict[str, Any] = json.loads(line)
                obj = event.get("object") or {}
                meta = obj.get("metadata") or {}
                self.events.append(
                    WatchEvent(
                        now,
                        exchange,
                        str(event.get("type")),
                        str(obj.get("kind") or ""),
                        str(meta.get("namespace") or ""),
                        str(meta.get("name") or ""),
                        str(meta.get("resourceVersion") or ""),
                    )
                )
        return rest


@pytest_asyncio.fixture
async def proxy(control_plane: ControlPlane) -> AsyncIterator[ApiProxy]:
    proxy = await ApiProxy(control_plane).start()
    yield proxy
    await proxy.stop()


@pytest.fixture
def run_proxied(proxy: ApiProxy, tmp_path: Path) -> Iterator[SchedulerFactory]:
    """``run_proxied(name, config=None, *extra_args)``: ``gpuq scheduler`` reaching the apiserver
    through ``proxy``; every process started is stopped after the test."""
    started: list[SchedulerProcess] = []
    yield scheduler_starter(proxy.kubeconfig(tmp_path / "proxied.kubeconfig"), tmp_path, started)
    for process in started:
        process.terminate()
