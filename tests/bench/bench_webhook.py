"""Webhook throughput and latency: Pod validation over TLS keep-alive, 10 concurrent connections.

    python tests/bench/bench_webhook.py [--seconds 10] [--connections 10] [--client auto|wrk|python]
                                        [--null-admitter]

The server (the real admission server, TLS context and rules, over an in-memory cluster view with a
GPU node and a Queue with a card quota, on uvloop when it is installed, as ``gpuq webhook`` runs) is
a child process pinned to one core; the load comes from another process pinned to another core when
there is one. The load generator is ``wrk`` when it is on the PATH (C, one thread, a Lua script that
POSTs the review and counts every answer that is not a 200 with ``"allowed":true``), else a minimal
HTTP/1.1 client on asyncio TLS streams in this process: on one core a Python client is itself the
ceiling near the target, so its figures are a lower bound. Prints which client ran, req/s and
p50/p99 latency. Target (issue 17): >= 5,000 req/s on one core with p99 <= 3 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuq_k8s.certs import create_ca, issue_serving_certificate, write_key_pair
from gpuq_k8s.webhook.admission import Admission
from gpuq_k8s.webhook.endpoints import Endpoints
from gpuq_k8s.webhook.metrics import WebhookMetrics
from gpuq_k8s.webhook.review import ALLOW
from gpuq_k8s.webhook.server import create_server, run, start_site
from gpuq_k8s.webhook.tls import CertificateReloader
from gpuq_k8s.webhook.view import StaticView

QUEUE = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "Queue",
    "metadata": {"name": "team-a", "annotations": {"volcano.sh/card.quota": '{"NVIDIA-A100": 64}'}},
    "spec": {"capability": {"cpu": "1000", "memory": "4Ti"}},
}
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "n1",
        "labels": {"nvidia.com/gpu.product": "NVIDIA-A100", "nvidia.com/gpu.memory": "81920"},
    },
    "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}},
}
GPU_QUOTA = {
    "apiVersion": "tensor-fusion.ai/v1",
    "kind": "GPUResourceQuota",
    "metadata": {"name": "q", "namespace": "team-a"},
    "spec": {"single": {"maxGPUCount": 8}},
}


def review_body() -> bytes:
    """A realistic Pod AdmissionReview (~3 KB): what the apiserver sends for a training worker."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer-0",
            "namespace": "team-a",
            "uid": "5f1c3a52-8d0e-4a57-9a0e-2b1f1c8e0a11",
            "labels": {"app": "trainer", "job": "resnet", "volcano.sh/job-name": "resnet"},
            "annotations": {
                "volcano.sh/card.name": "NVIDIA-A100",
                "scheduling.volcano.sh/queue-name": "team-a",
                "tensor-fusion.ai/tflops-request": "100",
                "tensor-fusion.ai/vram-request": "40Gi",
            },
        },
        "spec": {
            "schedulerName": "gpuq-scheduler",
            "containers": [
                {
                    "name": "trainer",
                    "image": "registry.example.com/ml/trainer:1.2.3",
                    "command": ["python", "-m", "train", "--epochs", "90"],
                    "env": [{"name": f"VAR_{i}", "value": "x" * 20} for i in range(10)],
                    "resources": {
                        "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
                        "limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
                    },
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0df28fbd-5f5f-11e8-bc74-36e6bb280816",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "trainer-0",
            "namespace": "team-a",
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:volcano:controller",
                "groups": ["system:authenticated"],
            },
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }
    return json.dumps(review).encode()


class _NullAdmitter:
    """Allows everything: measures the HTTP + TLS floor without the admission rules."""

    async def review(self, _: Any, *, mutate: bool) -> Any:
        return ALLOW


def serve(cert: str, key: str, port_queue: Any, core: int | None, null: bool) -> None:
    if core is not None:
        os.sched_setaffinity(0, {core})

    async def main() -> None:
        reloader = CertificateReloader(Path(cert), Path(key))
        admitter = _NullAdmitter() if null else Admission(StaticView([QUEUE, NODE, GPU_QUOTA]))
        app = create_server(Endpoints(admitter, WebhookMetrics()))
        _, port = await start_site(app, "127.0.0.1", 0, ssl_context=reloader.context)
        port_queue.put(port)
        await asyncio.Event().wait()

    run(main())  # on uvloop when installed, as `gpuq webhook` runs


async def connection(
    port: int, context: ssl.SSLContext, request: bytes, until: float, latencies: list[float]
) -> None:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
    )
    while True:
        start = time.perf_counter()
        if start >= until:
            break
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        body = await reader.readexactly(length)
        latencies.append(time.perf_counter() - start)
        if not head.startswith(b"HTTP/1.1 200") or b'"allowed":true' not in body:
            raise RuntimeError(f"unexpected answer: {head[:40]!r} {body[:200]!r}")
    writer.close()


async def load(port: int, ca_pem: str, seconds: float, connections: int) -> list[float]:
    context = ssl.create_default_context(cadata=ca_pem)
    body = review_body()
    request = (
        f"POST /validate?timeout=10s HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    latencies: list[float] = []
    until = time.perf_counter() + seconds
    await asyncio.gather(*(connection(port, context, request, until, latencies) for _ in range(connections)))
    return latencies


WRK_SCRIPT = """
local f = assert(io.open(%(body)s, "rb"))
wrk.method = "POST"
wrk.path = "/validate?timeout=10s"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json"
bad = 0
local threads = {}
function setup(thread) table.insert(threads, thread) end
function response(status, headers, body)
  if status ~= 200 or not string.find(body, '"allowed":true', 1, true) then bad = bad + 1 end
end
function done(summary, latency, requests)
  local total = 0
  for _, t in ipairs(threads) do total = total + t:get("bad") end
  io.write(string.format("gpuq-bad-answers: %%d\\n", total))
end
"""
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([0-9.]+)([a-z]+)", text).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc), to tell the server's own cost per
    request from what a busy machine takes away from it."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(
    wrk: str,
    port: int,
    *,
    seconds: float,
    connections: int,
    warmup: float,
    core: int | None,
    server_pid: int,
) -> dict[str, float]:
    """Drive the server with wrk; returns req/s, requests, p50/p75/p90/p99 in ms, server CPU seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        body, script = Path(tmp) / "review.json", Path(tmp) / "post.lua"
        body.write_bytes(review_body())
        script.write_text(WRK_SCRIPT % {"body": json.dumps(str(body))})
        pin = ["taskset", "-c", str(core)] if core is not None and shutil.which("taskset") else []
        url = f"https://127.0.0.1:{port}/validate"

        def wrk_for(duration: float) -> str:
            command = [
                *pin,
                wrk,
                "-t1",
                f"-c{connections}",
                f"-d{duration:g}s",
                "--latency",
                "-s",
                str(script),
                url,
            ]
            done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=duration + 60)
            return done.stdout

        if warmup > 0:
            wrk_for(warmup)
        cpu = cpu_seconds(server_pid)
        out = wrk_for(seconds)
        cpu = cpu_seconds(server_pid) - cpu
    bad = re.search(r"gpuq-bad-answers: (\d+)", out)
    rate = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    count = re.search(r"(\d+) requests in", out)
    if bad is None or rate is None or count is None:
        raise RuntimeError(f"cannot read wrk's output:\n{out}")
    if int(bad.group(1)) or "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk got unexpected answers:\n{out}")
    result = {"rate": float(rate.group(1)), "count": float(count.group(1)), "cpu": cpu}
    for percent in ("50", "75", "90", "99"):
        found = re.search(rf"^\s+{percent}%\s+([0-9.]+[a-z]+)", out, re.MULTILINE)
        if found is None:
            raise RuntimeError(f"no {percent}% latency in wrk's output:\n{out}")
        result[f"p{percent}"] = _ms(found.group(1))
    return result


def python_client(
    port: int,
    ca_pem: str,
    *,
    seconds: float,
    connections: int,
    warmup: float,
    core: int | None,
    server_pid: int,
) -> dict[str, float]:
    if core is not None:
        os.sched_setaffinity(0, {core})
    if warmup > 0:
        asyncio.run(load(port, ca_pem, warmup, connections))
    cpu = cpu_seconds(server_pid)
    latencies = asyncio.run(load(port, ca_pem, seconds, connections))
    cpu = cpu_seconds(server_pid) - cpu
    latencies.sort()
    count = len(latencies)
    result = {"rate": count / seconds, "count": float(count), "max": latencies[-1] * 1000, "cpu": cpu}
    result["mean"] = statistics.fmean(latencies) * 1000
    for percent in (50, 75, 90, 99):
        result[f"p{percent}"] = latencies[min(count - 1, int(count * percent / 100))] * 1000
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--null-admitter", action="store_true", help="allow everything: the HTTP+TLS floor")
    parser.add_argument(
        "--client",
        choices=("auto", "wrk", "python"),
        default="auto",
        help="load generator (auto: wrk if on PATH)",
    )
    args = parser.parse_args()

    wrk = shutil.which("wrk") if args.client in ("auto", "wrk") else None
    if args.client == "wrk" and wrk is None:
        parser.error("--client wrk: wrk is not on the PATH (Debian package wrk)")
    cores = sorted(os.sched_getaffinity(0))
    server_core = cores[0] if len(cores) > 1 else None
    client_core = cores[1] if len(cores) > 1 else None
    with tempfile.TemporaryDirectory() as tmp:
        ca = create_ca("bench-ca")
        pair = issue_serving_certificate(ca, ip_addresses=["127.0.0.1"])
        cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        write_key_pair(pair, cert, key)
        ports: Any = multiprocessing.get_context("spawn").Queue()
        server = multiprocessing.get_context("spawn").Process(
            target=serve, args=(str(cert), str(key), ports, server_core, args.null_admitter), daemon=True
        )
        server.start()
        try:
            port = ports.get(timeout=30)
            ca_pem = ca.certificate_pem().decode()
            shape: dict[str, Any] = {
                "seconds": args.seconds,
                "connections": args.connections,
                "warmup": args.warmup,
                "core": client_core,
                "server_pid": server.pid,
            }
            if wrk is not None:
                # One verified request first: wrk does not check the certificate, this does.
                asyncio.run(load(port, ca_pem, 0.2, 1))
                result = run_wrk(wrk, port, **shape)
            else:
                result = python_client(port, ca_pem, **shape)
        finally:
            server.terminate()
            server.join(10)
    client = "wrk -t1" if wrk is not None else "Python asyncio client"
    extra = f", max {result['max']:.2f} ms, mean {result['mean']:.2f} ms" if "max" in result else ""
    print(
        f"webhook Pod validation over TLS keep-alive, {args.connections} connections, {args.seconds:g}s, "
        f"server on {'1 core' if server_core is not None else 'a shared core'}, load from {client}"
        f"{' on another core' if client_core is not None else ''}: "
        f"{result['rate']:,.0f} req/s, p50 {result['p50']:.2f} ms, p90 {result['p90']:.2f} ms, "
        f"p99 {result['p99']:.2f} ms{extra}, {int(result['count'])} requests, "
        f"server CPU {result['cpu'] / result['count'] * 1e6:.0f} us/request"
        f"{' (null admitter)' if args.null_admitter else ''}"
    )


if __name__ == "__main__":
    main()
