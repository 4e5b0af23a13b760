"""``gpuq webhook --workers N`` against a real kube-apiserver: req/s and p99 for 1, 2, ... workers.

    python tests/bench/bench_webhook_workers.py [--workers 1,2] [--repeats 2] [--seconds 10]

Starts its own etcd + kube-apiserver (the e2e harness) with the CRDs, the Queue, GPU node and
GPUResourceQuota the review names (tests/bench/bench_webhook.py's objects), then, for each worker
count in turn (alternating over the repeats), runs ``gpuq webhook --workers N`` as a process (its
informers on the real apiserver, TLS from files) and drives its HTTPS port with Debian's ``wrk``
(one thread, 10 connections, a Lua script POSTing a Pod AdmissionReview over TLS keep-alive and
counting every answer that is not a 200 with ``"allowed":true``). Nothing is pinned: the workers,
wrk, the apiserver and etcd share the machine's cores. Prints req/s, p50/p99, the workers' CPU per
request (all workers' user+system time over the run, from /proc), the cores the workers kept busy
and wrk's own, then the medians per worker count and how they scale against one worker: the req/s
(on a 2-core machine wrk takes part of the second core) and the req/s per busy worker core, which
near-linear scaling keeps flat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuq_k8s.certs import create_ca, issue_serving_certificate, write_key_pair
from gpuq_k8s.common.kube.client import new_api_client
from gpuq_k8s.common.kube.status import MERGE_PATCH, call
from tests.bench.bench_side_by_side import cpu_seconds
from tests.bench.bench_webhook import GPU_QUOTA, NODE, QUEUE, load, run_wrk
from tests.e2e.controlplane.harness import ControlPlane, free_ports


async def create_objects(kubeconfig: Path) -> None:
    api = await new_api_client(str(kubeconfig))
    try:
        quota: dict[str, Any] = GPU_QUOTA
        node: dict[str, Any] = NODE
        namespace = quota["metadata"]["namespace"]
        writes: list[tuple[str, str, Any, str]] = [
            ("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}, "application/json"),
            ("POST", "/apis/scheduling.volcano.sh/v1beta1/queues", QUEUE, "application/json"),
            ("POST", "/api/v1/nodes", {k: v for k, v in node.items() if k != "status"}, "application/json"),
            (
                "PATCH",
                f"/api/v1/nodes/{node['metadata']['name']}/status",
                {"status": node["status"]},
                MERGE_PATCH,
            ),
            (
                "POST",
                f"/apis/tensor-fusion.ai/v1/namespaces/{namespace}/gpuresourcequotas",
                GPU_QUOTA,
                "application/json",
            ),
        ]
        for method, path, body, content_type in writes:
            reply = await call(api, method, path, body, content_type=content_type)
            if not reply.ok:
                raise SystemExit(f"{method} {path}: {reply.message}")
    finally:
        await api.close()


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as reply:
            return int(reply.status) == 200
    except (OSError, urllib.error.URLError):
        return False


def children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def measure(
    plane: ControlPlane, workdir: Path, ca_pem: str, workers: int, args: argparse.Namespace
) -> dict[str, float]:
    wrk = shutil.which("wrk")
    assert wrk is not None
    port = free_ports(1)[0]
    metrics = free_ports(1)[0]
    argv = [
        *(sys.executable, "-m", "gpuq_k8s.cli", "webhook", "--kubeconfig", str(plane.kubeconfig)),
        *("--tls-cert-file", str(workdir / "tls.crt"), "--tls-private-key-file", str(workdir / "tls.key")),
        *("--port", str(port), "--metrics-port", str(metrics), "--bind-address", "127.0.0.1"),
        *("--workers", str(workers), "--log-level", "WARNING"),
    ]
    log = (workdir / f"webhook-{workers}.log").open("wb")
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not all(ready(metrics + k) for k in range(workers)):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(
                    f"gpuq webhook --workers {workers} not ready; see {workdir}/webhook-{workers}.log"
                )
            time.sleep(0.2)
        asyncio.run(load(port, ca_pem, 0.2, 1))  # one verified request first: wrk checks no certificate
        pids = children(process.pid) if workers > 1 else [process.pid]
        shape: dict[str, Any] = {
            "seconds": args.warmup,
            "connections": args.connections,
            "warmup": 0,
            "core": None,
        }
        run_wrk(wrk, port, server_pid=process.pid, **shape)
        before = sum(cpu_seconds(pid) for pid in pids)
        wrk_before = resource.getrusage(resource.RUSAGE_CHILDREN)  # wrk is the one child waited for
        began = time.monotonic()
        result = run_wrk(wrk, port, server_pid=process.pid, **(shape | {"seconds": args.seconds}))
        wall = time.monotonic() - began
        wrk_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        result["cpu"] = sum(cpu_seconds(pid) for pid in pids) - before
        result["cores"] = result["cpu"] / wall  # the workers' busy cores over the run
        result["wrk_cores"] = (
            wrk_after.ru_utime + wrk_after.ru_stime - wrk_before.ru_utime - wrk_before.ru_stime
        ) / wall
        return result
    finally:
        process.terminate()
        process.wait(30)
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2", help="worker counts to compare, comma-separated")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--connections", type=int, default=10)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not on the PATH: apt-get install -y wrk")
    counts = [int(n) for n in args.workers.split(",")]
    plane = ControlPlane()
    plane.start()
    try:
        plane.apply_crds()
        asyncio.run(create_objects(plane.kubeconfig))
        with tempfile.TemporaryDirectory(prefix="gpuq-bench-workers-") as tmp:
            workdir = Path(tmp)
            ca = create_ca("bench-ca")
            write_key_pair(
                issue_serving_certificate(ca, ip_addresses=["127.0.0.1"]),
                workdir / "tls.crt",
                workdir / "tls.key",
            )
            ca_pem = ca.certificate_pem().decode()
            results: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
            for repeat in range(args.repeats):
                for workers in counts:
                    r = measure(plane, workdir, ca_pem, workers, args)
                    results[workers].append(r)
                    print(
                        json.dumps({"workers": workers, "repeat": repeat + 1}),
                        f"{r['rate']:,.0f} req/s, p50 {r['p50']:.2f} ms, p99 {r['p99']:.2f} ms, "
                        f"{r['cpu'] / r['count'] * 1e6:.0f} us worker CPU per request, workers busy "
                        f"{r['cores']:.2f} cores ({r['rate'] / r['cores']:,.0f} req/s per busy core), "
                        f"wrk {r['wrk_cores']:.2f} cores, load average {os.getloadavg()[0]:.2f}",
                        flush=True,
                    )
            summarize(results)
    finally:
        plane.stop()


def summarize(results: dict[int, list[dict[str, float]]]) -> None:
    """Medians per worker count, and how each scales against one worker: req/s (bounded here by the
    cores wrk, the apiserver and the workers share) and req/s per busy worker core (near-linear
    scaling keeps this flat: each added worker serves as much per core as the first)."""
    print("\nworkers  req/s (median)  p99 ms  busy cores  req/s per busy core  wrk cores")
    rate = {n: statistics.median(r["rate"] for r in rs) for n, rs in results.items()}
    per_core = {n: statistics.median(r["rate"] / r["cores"] for r in rs) for n, rs in results.items()}
    for n, rs in results.items():
        p99 = statistics.median(r["p99"] for r in rs)
        cores = statistics.median(r["cores"] for r in rs)
        wrk_cores = statistics.median(r["wrk_cores"] for r in rs)
        print(f"{n:7d}  {rate[n]:14,.0f}  {p99:6.2f}  {cores:10.2f}  {per_core[n]:19,.0f}  {wrk_cores:9.2f}")
    first = min(results)
    for n in sorted(results):
        if n != first:
            print(
                f"{n} workers / {first}: req/s x{rate[n] / rate[first]:.2f}, "
                f"req/s per busy core x{per_core[n] / per_core[first]:.2f}"
            )


if __name__ == "__main__":
    main()
