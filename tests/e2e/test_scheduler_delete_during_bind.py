"""Delete during bind (issue 11, at a small scale): pods deleted while the scheduler's binds are in
flight are forgotten, not retried, and the pending count returns to 0.

The scheduler talks to the apiserver through a loopback TCP proxy (part of this test) that holds
every chunk it sends for a moment: each request of the scheduler (binds among them) is slowed,
while what the apiserver sends back (watch events, the deletes) is not. 50 pods are created and 25
of them deleted while their binds queue up behind the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.cluster_fixtures import Cluster, eventually, metric_value, node_of
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.test_scheduler_features import BASE_TIER

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster

PODS = 50
DELAY = 0.25  # seconds each chunk from the scheduler waits in the proxy


class SlowProxy:
    """Forwards loopback TCP connections to ``target``; client -> server chunks wait ``delay``."""

    def __init__(self, target_port: int, delay: float) -> None:
        self.target_port = target_port
        self.delay = delay
        self.server: asyncio.Server | None = None
        self.connections: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        pipes = asyncio.gather(
            self._pipe(reader, up_writer, self.delay),
            self._pipe(up_reader, writer, 0.0),
            return_exceptions=True,
        )
        with contextlib.suppress(asyncio.CancelledError):  # stop(): a cancelled connection is done
            await pipes

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
        try:
            while chunk := await reader.read(65536):
                if delay:
                    await asyncio.sleep(delay)
                writer.write(chunk)
                await writer.drain()
        finally:
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in self.connections:
            task.cancel()
        await asyncio.gather(*self.connections, return_exceptions=True)


@pytest_asyncio.fixture
async def slow_kubeconfig(control_plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Path]:
    proxy = SlowProxy(control_plane.apiserver_port, DELAY)
    port = await proxy.start()
    text = control_plane.kubeconfig.read_text()
    assert control_plane.server in text
    path = tmp_path / "slow-kubeconfig"
    path.write_text(text.replace(control_plane.server, f"https://127.0.0.1:{port}"))
    yield path
    await proxy.stop()


async def test_pods_deleted_while_their_binds_are_in_flight_are_forgotten(
    cluster: Cluster, slow_kubeconfig: Path, tmp_path: Path
) -> None:
    name = f"gpuq-{cluster.test_id}"
    await cluster.node("n", {"cpu": "100", "memory": "100Gi", "pods": "200"})
    started: list[fixtures.SchedulerProcess] = []
    start = fixtures.scheduler_starter(slow_kubeconfig, tmp_path, started)
    scheduler = start(name, BASE_TIER, "--bind-concurrency", "2")
    try:
        await scheduler.wait_ready(60)
        ns = cluster.namespace
        await asyncio.gather(*(cluster.pod(f"p{i}", {"cpu": "1"}, scheduler=name) for i in range(PODS)))

        async def some_bound() -> int:
            return sum(1 for p in (await cluster.pods()).values() if node_of(p))

        first = await eventually(some_bound, 60, "a first bind", scheduler.log)
        deleted = [f"p{i}" for i in range(1, PODS, 2)]
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        await asyncio.gather(
            *(cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod}", body) for pod in deleted)
        )
        assert first < PODS // 2, f"{first} bound before the deletes: the binds were not slowed"

        async def survivors_bound() -> bool:
            pods = await cluster.pods()
            return len(pods) == PODS - len(deleted) and all(node_of(p) for p in pods.values())

        await eventually(survivors_bound, 120, "the 25 survivors bound", scheduler.log)

        def pending_total() -> float:
            text = scheduler.metrics()
            return sum(
                float(line.rpartition(" ")[2])
                for line in text.splitlines()
                if line.startswith("gpuq_scheduler_pending_pods")
            )

        async def no_pending() -> bool:
            return pending_total() == 0.0

        await eventually(no_pending, 30, "gpuq_scheduler_pending_pods back to 0", scheduler.log)
        # A deleted pod is forgotten, never retried: at most one attempt per pod ever created
        # (before, a 404 requeued the pod, which was retried forever, reserving each time).
        await asyncio.sleep(3)
        text = scheduler.metrics()
        attempts = sum(
            metric_value(text, "gpuq_scheduler_schedule_attempts_total", {"result": r}) or 0.0
            for r in ("scheduled", "unschedulable", "error")
        )
        assert attempts <= PODS, f"{attempts} attempts for {PODS} pods\n{scheduler.log(200)}"
        assert pending_total() == 0.0
        assert "Traceback" not in scheduler.log(2000)
    finally:
        code = scheduler.terminate()
    assert code == 0, scheduler.log()
