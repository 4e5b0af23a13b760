"""CPU per API request on a real kube-apiserver: the path every write of gpuq takes
(``common.kube.client.request`` on gpuq's own HTTP client, ``common/kube/http.py``), the same
request on kubernetes_asyncio's aiohttp session, and through ``ApiClient.call_api``.

    python tests/bench/bench_requests.py [--requests 3000] [--rounds 3] [--in-flight 32]

Starts its own etcd + kube-apiserver (the e2e harness), then POSTs ``--requests`` events.k8s.io/v1
Events (a Scheduled event, as the scheduler writes one per bound pod), ``--in-flight`` at a time,
alternating the three paths for ``--rounds`` rounds. Prints this process's CPU (user+system) per
request and the request rate of each.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import orjson
from kubernetes_asyncio import client

from gpuq_k8s.common.kube.client import new_api_client, request, resolve_proxy_once, through_call_api
from gpuq_k8s.common.kube.events import event_body
from tests.e2e.controlplane.harness import ControlPlane


async def call_api_path(api_client: Any, path: str, body: Any) -> tuple[int, bytes]:
    return await through_call_api(
        api_client, "POST", path, body=body, content_type="application/json", query=[], timeout=30.0
    )


async def through_request(api_client: Any, path: str, body: Any) -> tuple[int, bytes]:
    return await request(
        api_client, "POST", path, body=body, content_type="application/json", query=[], timeout=30.0
    )


async def measure(args: argparse.Namespace) -> None:
    plane = ControlPlane()
    plane.start()
    try:
        api = await new_api_client(str(plane.kubeconfig))
        plain = client.ApiClient(api.configuration)  # kubernetes_asyncio's, without gpuq's HTTP client
        resolve_proxy_once(plain)  # as gpuq's own (no proxy and netrc lookup in a thread per request)
        paths: list[tuple[str, Any, Any]] = [
            ("call_api", call_api_path, plain),
            ("aiohttp", through_request, plain),
            ("own", through_request, api),
        ]
        try:
            for _ in range(args.rounds):
                for name, send, api_client in paths:
                    gate = asyncio.Semaphore(args.in_flight)

                    async def one(
                        i: int, gate: asyncio.Semaphore = gate, send: Any = send, api_client: Any = api_client
                    ) -> None:
                        body = event_body(
                            f"Pod/default/p{i}",
                            "Normal",
                            "Scheduled",
                            f"Successfully assigned default/p{i} to n1",
                            at=time.time(),
                            controller="bench",
                            instance="bench",
                        )
                        async with gate:
                            status, raw = await send(
                                api_client, "/apis/events.k8s.io/v1/namespaces/default/events", body
                            )
                            orjson.loads(raw)
                        if status != 201:
                            raise SystemExit(f"POST event: HTTP {status}: {raw[:200]!r}")

                    cpu, wall = time.process_time(), time.monotonic()
                    await asyncio.gather(*(one(i) for i in range(args.requests)))
                    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
                    print(
                        f"{name:>9}: {1e6 * cpu / args.requests:.0f} us CPU per request, "
                        f"{args.requests / wall:,.0f} requests/s",
                        flush=True,
                    )
        finally:
            await plain.close()
            await api.close()
    finally:
        plane.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=32)
    asyncio.run(measure(parser.parse_args()))


if __name__ == "__main__":
    main()
