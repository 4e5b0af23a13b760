"""The webhook served in a thread of its own on 127.0.0.1 (HTTPS when given a certificate), a keep-alive
client for it, AdmissionReview envelopes, and the objects its view holds by default (a Queue of
A100 cards, an A100 node) with a GPU pod template of that queue. The fixtures that start it are in
tests/unit/webhook/conftest.py."""

from __future__ import annotations

import asyncio
import http.client
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from gpuq_k8s.certs import KeyPair, issue_serving_certificate, write_key_pair
from gpuq_k8s.webhook.admission import Admission
from gpuq_k8s.webhook.endpoints import Endpoints, ServerLimits
from gpuq_k8s.webhook.metrics import WebhookMetrics
from gpuq_k8s.webhook.server import create_metrics_app, create_server, start_site
from gpuq_k8s.webhook.tls import CertificateReloader
from gpuq_k8s.webhook.view import StaticView
from tests.testing.builders import MakeNode, MakePod, MakeQueue


def write_serving_pair(ca: KeyPair, directory: Path) -> tuple[Path, Path, KeyPair]:
    pair = issue_serving_certificate(ca, ip_addresses=["127.0.0.1"], dns_names=["localhost"])
    cert, key = directory / "tls.crt", directory / "tls.key"
    write_key_pair(pair, cert, key)
    return cert, key, pair


def client_context(ca: KeyPair) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca.certificate_pem().decode())


class ServerThread:
    """The webhook app (HTTPS when a reloader is given) and its metrics app, in a thread of their own,
    so synchronous clients (and hypothesis) can drive them."""

    def __init__(
        self,
        view: StaticView,
        reloader: CertificateReloader | None = None,
        *,
        limits: ServerLimits | None = None,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self.metrics = WebhookMetrics()
        self.admission = Admission(view)
        self.ready = ready
        self.limits = limits or ServerLimits()
        self.reloader = reloader
        self.port = 0
        self.metrics_port = 0
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._runners: list[web.BaseRunner] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._started.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        context = self.reloader.context if self.reloader else None
        # What `gpuq webhook` serves: the low-level server (it needs the running loop).
        server = create_server(Endpoints(self.admission, self.metrics, self.ready, self.limits))
        runner, self.port = await start_site(server, "127.0.0.1", 0, ssl_context=context)
        metrics_runner, self.metrics_port = await start_site(create_metrics_app(self.metrics), "127.0.0.1", 0)
        self._runners = [runner, metrics_runner]

    def __enter__(self) -> ServerThread:
        self._thread.start()
        assert self._started.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        async def stop() -> None:
            for runner in self._runners:
                await runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


QUEUE = MakeQueue("team-a").card_quota('{"NVIDIA-A100": 2}').capability(cpu="10").obj()
NODE = MakeNode("n1").product("NVIDIA-A100").gpus("8").alloc(cpu="64").obj()
# A pod of queue team-a asking for cards by limits alone (requests default to them): copy() and lim().
GPU_POD = MakePod().queue("team-a")


def admission_review(obj: dict[str, Any], uid: str = "u-1", operation: str = "CREATE") -> dict[str, Any]:
    kind = obj.get("kind", "Pod")
    group = obj.get("apiVersion", "v1").rpartition("/")[0]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
            "namespace": "ns",
            "operation": operation,
            "userInfo": {"username": "admin"},
            "object": obj,
        },
    }


class Client:
    """A keep-alive HTTP(S) client."""

    def __init__(self, port: int, context: ssl.SSLContext | None = None) -> None:
        if context is None:
            self.conn: http.client.HTTPConnection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        else:
            self.conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)

    def post(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        self.conn.request(
            "POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})}
        )
        response = self.conn.getresponse()
        return response.status, response.read()

    def get(self, path: str) -> tuple[int, bytes]:
        self.conn.request("GET", path)
        response = self.conn.getresponse()
        return response.status, response.read()

    def close(self) -> None:
        self.conn.close()
