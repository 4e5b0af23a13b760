"""kube-apiserver's share of a cold start: the pods' streaming list (WatchList) read by a bare client.

    python tests/bench/bench_stream.py [--nodes 5000] [--existing 50000] [--repeats 3]

A fresh control plane (the harness's kube-apiserver and etcd, tests/bench/bench_cluster.py) with
``--nodes`` nodes and ``--existing`` bound pods; then, ``--repeats`` times each, alternating, the pods'
streaming list as gpuq's informer asks for it (``watch=true&sendInitialEvents=true&
resourceVersionMatch=NotOlderThan``, JSON) read by a consumer that does nothing with the bytes
("raw") and by one that decodes each event with the pod informer's decoder ("decoded",
scheduler/kube/pod_cache.py); then the nodes' alone, and both at once. Each line: the wall time to the
initial-events-end bookmark, this process's CPU, kube-apiserver's and etcd's CPU meanwhile (/proc), the
reads the stream came in and the load average. What gpuq's start adds to the raw figure is its own
(tests/bench/bench_start.py measures that in-process); issue 29 in the README reads these.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuq_k8s.scheduler.kube.pod_cache import PodDecoder
from tests.bench.bench_cluster import fresh_cluster
from tests.bench.bench_side_by_side import cpu_seconds

PARAMS = (
    ("watch", "true"),
    ("sendInitialEvents", "true"),
    ("resourceVersionMatch", "NotOlderThan"),
    ("allowWatchBookmarks", "true"),
    ("timeoutSeconds", "600"),
)
END = b"k8s.io/initial-events-end"


async def stream(api: Any, path: str, decode: Callable[[bytes], Any] | None) -> tuple[float, float, int, int]:
    """(wall seconds, this process's CPU seconds, events, reads) of one streaming list of ``path``."""
    began, cpu = time.monotonic(), time.process_time()
    response = await api.call_api(
        path,
        "GET",
        query_params=list(PARAMS),
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=aiohttp.ClientTimeout(total=None, connect=30),
    )
    events = reads = 0
    rest = b""
    try:
        while True:
            chunk = await response.content.readany()
            if not chunk:
                raise RuntimeError(f"{path}: the stream ended before the initial-events-end bookmark")
            reads += 1
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            events += len(lines)
            if decode is not None:
                for line in lines:
                    decode(line)
            if any(END in line for line in lines[-1:]):
                break
    finally:
        response.close()
    return time.monotonic() - began, time.process_time() - cpu, events, reads


async def main(args: argparse.Namespace) -> None:
    async with fresh_cluster(args.nodes, 0, args.existing) as (plane, api, _):

        def plane_cpu() -> dict[str, float]:
            return {name: cpu_seconds(pid) for name, pid in plane.pids.items()}

        async def measured(label: str, *streams: tuple[str, Callable[[bytes], Any] | None]) -> None:
            before = plane_cpu()
            began = time.monotonic()
            results = await asyncio.gather(*(stream(api, path, decode) for path, decode in streams))
            wall = time.monotonic() - began
            after = plane_cpu()
            served = ", ".join(f"{name} {after[name] - before[name]:.2f}s" for name in sorted(after))
            parts = "; ".join(
                f"{path.rsplit('/', 1)[-1]} {r[0]:.2f}s, {r[2]} events in {r[3]} reads, our CPU {r[1]:.2f}s"
                for (path, _), r in zip(streams, results, strict=True)
            )
            print(
                f"{label:>12}: {wall:.2f}s ({parts}); CPU meanwhile: {served}; "
                f"load average {os.getloadavg()[0]:.2f}",
                flush=True,
            )

        decoder = PodDecoder()
        for _ in range(args.repeats):
            await measured("pods raw", ("/api/v1/pods", None))
            await measured("pods decoded", ("/api/v1/pods", decoder.event))
        await measured("nodes raw", ("/api/v1/nodes", None))
        await measured("both raw", ("/api/v1/pods", None), ("/api/v1/nodes", None))


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--existing", type=int, default=50000, help="bound pods")
    parser.add_argument("--repeats", type=int, default=3)
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
