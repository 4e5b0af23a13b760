"""Issue 12, stale cache: the webhook's ``/readyz`` follows its watches on the real apiserver.

The webhook's view (``webhook.cluster.InformerView``, as ``gpuq webhook`` builds it) reaches the
apiserver through a TCP relay the test can cut: every open connection is reset and new ones are
refused. ``/readyz`` (the metrics app ``gpuq webhook`` serves, on the view's ``ready``) turns false
within the bound while ``synced`` (the old signal) stays true, and turns true again once the relay is
back and the informers have listed again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from gpuq_k8s.common.kube.client import new_api_client
from gpuq_k8s.common.kube.status import call
from gpuq_k8s.common.model.annotations import QUEUE_NAME
from gpuq_k8s.common.model.pods import GPUQ_SCHEDULER
from gpuq_k8s.webhook import jsonpatch
from gpuq_k8s.webhook.admission import Admission
from gpuq_k8s.webhook.cluster import InformerView
from gpuq_k8s.webhook.metrics import WebhookMetrics
from gpuq_k8s.webhook.review import AdmissionRequest
from gpuq_k8s.webhook.server import create_metrics_app, start_site
from tests.e2e.controlplane.harness import ControlPlane
from tests.testing.builders import MakePod, MakePodGroup, MakeQueue

pytestmark = pytest.mark.e2e

QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"
BOUND = 5.0  # seconds from the cut to /readyz false (a reset watch fails at once)


class Relay:
    """A TCP relay to ``port`` on loopback that can be cut (connections reset, new ones refused)."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            self._writers.discard(writer)

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        for writer in list(self._writers):
            transport = writer.transport
            transport.abort()
        self._writers.clear()


async def _until(what: str, check: Callable[[], Awaitable[bool]], timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if await check():
            return time.monotonic() - start
        await asyncio.sleep(0.05)
    pytest.fail(f"{what} not within {timeout:g}s")
    return timeout  # not reached: pytest.fail raises


async def test_readyz_is_false_while_a_watch_is_cut(control_plane: ControlPlane, tmp_path: Path) -> None:
    relay = Relay(control_plane.apiserver_port)
    await relay.start()
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{relay.port}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    api = await new_api_client(str(kubeconfig))
    view = InformerView(api, backoff=(0.2, 1.0))
    runner, port = await start_site(
        create_metrics_app(WebhookMetrics(), ready=lambda: view.ready), "127.0.0.1", 0
    )
    view.informers.start()
    try:
        async with aiohttp.ClientSession() as session:

            async def readyz() -> int:
                async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                    return response.status

            async def ready() -> bool:
                return await readyz() == 200

            async def unready() -> bool:
                return await readyz() == 503

            await view.informers.wait_synced(30)
            # A watch of a just-created CRD may still restart once on a fresh control plane.
            await _until("/readyz true after the first sync", ready, 10)
            await relay.cut()
            took = await _until("/readyz false after the cut", unready, BOUND)
            assert view.synced, "synced stays set: it is not what readiness may report"
            await asyncio.sleep(1.0)
            assert await readyz() == 503, "ready again while the apiserver is unreachable"
            await relay.start()  # the same port: the informers reconnect and list again
            back = await _until("/readyz true after the relay is back", ready, 20)
            print(f"readyz false {took:.2f}s after the cut; true {back:.2f}s after the relay came back")
    finally:
        await runner.cleanup()
        await view.informers.stop()
        await api.close()


async def test_objects_the_cache_has_not_seen_are_read_live_before_refusing(
    control_plane: ControlPlane, api_client: Any, namespace: str
) -> None:
    """With the view's watches stopped after the first sync (a cache that lags), a Queue and a PodGroup
    created since are read from the real apiserver: the PodGroup naming the new Queue is admitted, and
    the Pod naming the new PodGroup gets that PodGroup's queue. A Queue that does not exist is still
    refused, after one read."""
    api = await new_api_client(str(control_plane.kubeconfig))
    view = InformerView(api)
    view.informers.start()
    try:
        await view.informers.wait_synced(30)
        await view.informers.stop()  # the cache is frozen from here on
        admission = Admission(view, live=view)
        queue = f"live-{namespace[-20:]}"
        reply = await call(
            api_client, "POST", QUEUES, MakeQueue(queue).card_quota('{"NVIDIA-A100": 4}').obj()
        )
        assert reply.ok, reply.message
        group = MakePodGroup("pg", namespace).queue(queue).min_member(1).card_request('{"NVIDIA-A100": 1}')
        reply = await call(
            api_client,
            "POST",
            f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{namespace}/podgroups",
            group.obj(),
        )
        assert reply.ok, reply.message
        assert view.informers["Queue"].get("", queue) is None  # not in the frozen cache

        decision = await admission.review(_request(group.obj(), namespace), mutate=False)
        assert decision.allowed, decision.message
        pod = MakePod("p", namespace).scheduler(GPUQ_SCHEDULER).group("pg").req(cpu="1").obj()
        decision = await admission.review(_request(pod, namespace), mutate=True)
        assert jsonpatch.apply(pod, decision.patch)["metadata"]["annotations"][QUEUE_NAME] == queue
        reads = view.live_reads
        assert reads == 2  # the Queue, then the PodGroup

        missing = group.copy().name("pg-missing").queue(f"{queue}-nope")
        decision = await admission.review(_request(missing.obj(), namespace), mutate=False)
        assert not decision.allowed and f"{queue}-nope" in decision.message
        assert view.live_reads == reads + 1
    finally:
        await view.informers.stop()
        await api.close()
        await call(api_client, "DELETE", f"{QUEUES}/live-{namespace[-20:]}")


def _request(obj: dict[str, Any], namespace: str) -> AdmissionRequest:
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    kind = {"group": group, "version": version, "kind": obj["kind"]}
    return AdmissionRequest.model_validate(
        {"uid": "u", "kind": kind, "namespace": namespace, "operation": "CREATE", "object": obj}
    )
