"""A loopback TCP proxy between ``gpuq scheduler`` and kube-apiserver that can hold watches silent.

The traffic is TLS, so the proxy cannot read URLs; it tells a watch by its shape instead. An HTTP/1.1
connection carries one request at a time and the server only ever answers: bytes the server sends
long after the client last sent anything are a watch's events (or bookmarks). While a stall is on,
such bytes (server -> client, more than ``answer_window`` seconds after the client's last bytes on
that connection) are held until the stall ends, in order; everything else passes. A bind, a read of
a pod or a Lease renew is answered within the window and goes through; the scheduler's watches,
including one opened during the stall once its first window has passed, fall silent. Nothing is
dropped: when the stall ends, what was held is delivered late (the watch "confirms" binds late,
the fault of issue 11), unless the scheduler gave up on the watch first.

While kube-apiserver restarts, a new connection waits (up to ``connect_patience``) for it to listen
again instead of being refused, as behind a load balancer; :meth:`StallProxy.close_gate` holds new
connections the same way while the test writes and compacts etcd. A watch the apiserver ended cleanly
on its way down is then resumed from its old resourceVersion and answered 410 Gone.

``held_chunks`` counts what was held, so a test can show that a stall really stalled something.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

POLL = 0.05  # seconds between looks at whether a held chunk may go


@dataclass(eq=False)
class _Connection:
    last_client_bytes: float = field(default_factory=time.monotonic)


class StallProxy:
    def __init__(self, target_port: int, answer_window: float = 1.0, connect_patience: float = 15.0) -> None:
        self.target_port = target_port
        self.answer_window = answer_window
        self.connect_patience = connect_patience
        self.held_chunks = 0
        self.connections_opened = 0
        self._stalled_until = 0.0
        self._gate = asyncio.Event()  # new connections reach the apiserver only while set
        self._gate.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        """Listen on a free loopback port; returns it."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    def stall(self, seconds: float) -> None:
        """Hold watches silent for ``seconds`` from now (extends a stall already on)."""
        self._stalled_until = max(self._stalled_until, time.monotonic() + seconds)

    def release(self) -> None:
        """End the stall now; what was held goes out."""
        self._stalled_until = 0.0

    def close_gate(self) -> None:
        """Hold new connections (they wait, up to ``connect_patience``) until :meth:`open_gate`."""
        self._gate.clear()

    def open_gate(self) -> None:
        self._gate.set()

    @property
    def stalled(self) -> bool:
        return time.monotonic() < self._stalled_until

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self.connections_opened += 1
        upstream = await self._connect()
        if upstream is None:
            writer.close()
            return
        up_reader, up_writer = upstream
        connection = _Connection()
        pipes = asyncio.gather(
            self._upstream(reader, up_writer, connection),
            self._downstream(up_reader, writer, connection),
            return_exceptions=True,
        )
        with contextlib.suppress(asyncio.CancelledError):
            await pipes

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """The apiserver, waited for while it restarts (as a load balancer in front of it would)."""
        deadline = time.monotonic() + self.connect_patience
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._gate.wait(), self.connect_patience)
        while True:
            try:
                return await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:
                if time.monotonic() > deadline:
                    return None
                await asyncio.sleep(POLL)

    @staticmethod
    async def _upstream(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: _Connection
    ) -> None:
        try:
            while chunk := await reader.read(65536):
                connection.last_client_bytes = time.monotonic()
                writer.write(chunk)
                await writer.drain()
        finally:
            writer.close()

    async def _downstream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: _Connection
    ) -> None:
        try:
            while chunk := await reader.read(65536):
                if self._holds(connection):
                    self.held_chunks += 1
                    while self._holds(connection):
                        await asyncio.sleep(POLL)
                writer.write(chunk)
                await writer.drain()
        finally:
            writer.close()

    def _holds(self, connection: _Connection) -> bool:
        return self.stalled and time.monotonic() - connection.last_client_bytes > self.answer_window
