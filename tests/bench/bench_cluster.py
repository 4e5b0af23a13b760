"""Scheduler throughput against a real kube-apiserver: ``gpuq scheduler`` binding pending pods.

    python tests/bench/bench_cluster.py [--nodes 1000] [--pods 5000] [--bind-concurrency 64]

Starts its own etcd + kube-apiserver (the e2e harness), creates the fake nodes (half of them A100
GPU nodes) and the pending pods *before* the scheduler starts, then runs ``gpuq scheduler`` (default
configuration: every plugin) as a subprocess. A pod informer in this process stamps the moment each
pod is first seen bound; the figure is pods/s from the first bind to the last. Also prints the
scheduler's own attempt count and mean attempt latency from its /metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuq_k8s.common.kube.client import new_api_client
from gpuq_k8s.common.kube.diff import Change
from gpuq_k8s.common.kube.informer import Informer
from gpuq_k8s.common.model import kinds
from gpuq_k8s.scheduler.kube.backend import DEFAULT_BIND_CONCURRENCY
from tests.e2e.cluster_fixtures import Cluster, metric_value
from tests.e2e.controlplane.harness import ControlPlane, free_ports

NAME = "gpuq-bench"
# The population's shapes, shared by the side-by-side runs (plain and --dra): every node has this
# allocatable (half of them 8 GPUs more), every pending pod asks this (a quarter of them 1 GPU more).
NODE_ALLOCATABLE: Mapping[str, str] = {"cpu": "64", "memory": "512Gi", "pods": "110"}
POD_REQUESTS: Mapping[str, str] = {"cpu": "500m", "memory": "1Gi"}


# The placement workloads (issue 23): every pending pod belongs to an app of APP_SIZE pods and carries
# the workload's rule over its app; nodes carry the hostname and zone labels the rules group by.
WORKLOADS = ("plain", "anti", "spread", "preferred")
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
ZONES = 8
APP_SIZE = 100


def placement_rules(workload: str, app: str) -> dict[str, Any]:
    """The pod spec fields of ``workload`` for a pod of ``app``: ``anti`` required anti-affinity to its
    app on the hostname, ``spread`` a DoNotSchedule zone spread (maxSkew 1) over its app, ``preferred``
    preferred affinity (weight 100) to its app in the zone; ``plain`` none."""
    selector = {"matchLabels": {"app": app}}
    if workload == "anti":
        term = {"labelSelector": selector, "topologyKey": HOSTNAME}
        return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}
    if workload == "spread":
        constraint = {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": selector,
        }
        return {"topologySpreadConstraints": [constraint]}
    if workload == "preferred":
        weighted = {"weight": 100, "podAffinityTerm": {"labelSelector": selector, "topologyKey": ZONE}}
        return {"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [weighted]}}}
    return {}


async def populate(
    cluster: Cluster,
    nodes: int,
    pods: int,
    concurrency: int = 64,
    *,
    existing: int = 0,
    workload: str = "plain",
) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def node(i: int) -> None:
        labels = {"nvidia.com/gpu.product": "NVIDIA-A100", "nvidia.com/gpu.memory": "81920"} if i % 2 else {}
        if workload != "plain":
            # Zones by pairs of nodes: every zone holds GPU and CPU nodes, so a GPU pod's zone spread
            # never hinges on the order the pods come in.
            labels |= {HOSTNAME: f"{cluster.test_id}-n{i:05d}", ZONE: f"zone-{i // 2 % ZONES}"}
        allocatable = dict(NODE_ALLOCATABLE)
        if i % 2:
            allocatable["nvidia.com/gpu"] = "8"
        async with gate:
            await cluster.node(f"n{i:05d}", allocatable, labels=labels)

    async def pod(i: int) -> None:
        requests = dict(POD_REQUESTS)
        limits: dict[str, str] = {}
        if i % 4 == 0:
            requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = "1"
        body = cluster.pod_body(f"p{i:05d}", requests, limits=limits, scheduler=NAME)
        if workload != "plain":
            app = f"app-{i % max(pods // APP_SIZE, 1)}"
            body["metadata"]["labels"] = {**(body["metadata"].get("labels") or {}), "app": app}
            body["spec"].update(placement_rules(workload, app))
        async with gate:
            await cluster.request("POST", f"/api/v1/namespaces/{cluster.namespace}/pods", body)

    began = time.monotonic()
    await asyncio.gather(*(node(i) for i in range(nodes)))
    print(f"created {nodes} nodes in {time.monotonic() - began:.1f}s", flush=True)

    async def bound(i: int) -> None:  # an existing pod, bound already (created with spec.nodeName)
        body = cluster.pod_body(f"e{i:05d}", {"cpu": "100m", "memory": "128Mi"}, scheduler=NAME)
        body["spec"]["nodeName"] = f"{cluster.test_id}-n{i % nodes:05d}"
        async with gate:
            await cluster.request("POST", f"/api/v1/namespaces/{cluster.namespace}/pods", body)

    if existing:
        began = time.monotonic()
        await asyncio.gather(*(bound(i) for i in range(existing)))
        print(f"created {existing} bound pods in {time.monotonic() - began:.1f}s", flush=True)
    began = time.monotonic()
    await asyncio.gather(*(pod(i) for i in range(pods)))
    print(f"created {pods} pending pods in {time.monotonic() - began:.1f}s", flush=True)


async def prepared_cluster(
    api: Any, nodes: int, pods: int, existing: int = 0, workload: str = "plain"
) -> Cluster:
    """The namespace ``bench`` (with its default ServiceAccount), ``nodes`` nodes and ``pods`` pods
    (of ``workload``: :data:`WORKLOADS`)."""
    cluster = Cluster(api, "bench", "bench")
    await cluster.request("POST", "/api/v1/namespaces", {"metadata": {"name": "bench"}})
    await cluster.request(
        "POST", "/api/v1/namespaces/bench/serviceaccounts", {"metadata": {"name": "default"}}
    )
    await populate(cluster, nodes, pods, existing=existing, workload=workload)
    return cluster


@contextlib.asynccontextmanager
async def fresh_cluster(
    nodes: int, pods: int, existing: int = 0, workload: str = "plain"
) -> AsyncIterator[tuple[ControlPlane, Any, Path]]:
    """A fresh control plane with ``nodes`` nodes and ``pods`` pending pods (of ``workload``):
    (plane, client, workdir)."""
    plane = ControlPlane()
    plane.start()
    try:
        plane.apply_crds()
        api = await new_api_client(str(plane.kubeconfig))
        try:
            await prepared_cluster(api, nodes, pods, existing, workload)
            yield plane, api, Path(tempfile.mkdtemp(prefix="gpuq-bench-"))
        finally:
            await api.close()
    finally:
        plane.stop()


async def main(args: argparse.Namespace) -> None:
    async with fresh_cluster(args.nodes, args.pods) as (plane, api, workdir):
        await measure(args, plane, api, workdir)


async def measure(args: argparse.Namespace, plane: ControlPlane, api: Any, workdir: Path) -> None:
    scheduler: subprocess.Popen[bytes] | None = None
    try:
        bound_at: dict[str, float] = {}
        done = asyncio.Event()

        def on_pod(change: Change) -> None:
            if change.type != "delete" and (change.obj.get("spec") or {}).get("nodeName"):
                bound_at.setdefault(change.key[1], time.monotonic())
                if len(bound_at) >= args.pods:
                    done.set()

        watcher = Informer(api, kinds.POD, handlers=[on_pod])
        watch_task = asyncio.create_task(watcher.run())
        await watcher.synced.wait()
        (port,) = free_ports(1)
        log = (workdir / "scheduler.log").open("wb")
        started = time.monotonic()
        scheduler = subprocess.Popen(
            [
                *(sys.executable, *(["-m", "cProfile", "-o", args.profile] if args.profile else [])),
                *(
                    "-m",
                    "gpuq_k8s.cli",
                    "scheduler",
                    "--kubeconfig",
                    str(plane.kubeconfig),
                    "--scheduler-name",
                    NAME,
                ),
                *("--metrics-port", str(port), "--bind-address", "127.0.0.1"),
                *("--bind-concurrency", str(args.bind_concurrency)),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            await asyncio.wait_for(done.wait(), timeout=args.timeout)
        except TimeoutError:
            print(f"timeout: {len(bound_at)} of {args.pods} bound after {args.timeout}s", flush=True)
        watch_task.cancel()
        times = sorted(bound_at.values())
        if len(times) >= 2:
            span = times[-1] - times[0]
            print(f"first bind {times[0] - started:.1f}s after start (includes start-up and informer sync)")
            rate = (len(times) - 1) / span
            print(f"{len(times)} pods bound in {span:.2f}s from first bind to last: {rate:.0f} pods/s")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        attempts = metric_value(text, "gpuq_scheduler_scheduling_attempt_duration_seconds_count") or 0
        total = metric_value(text, "gpuq_scheduler_scheduling_attempt_duration_seconds_sum") or 0
        scheduled = metric_value(text, "gpuq_scheduler_schedule_attempts_total", {"result": "scheduled"})
        # utime + stime of the scheduler process (fields 14 and 15 of /proc/<pid>/stat, in ticks).
        fields = Path(f"/proc/{scheduler.pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        print(f"scheduler CPU time since start: {cpu:.1f}s")
        mean = 1000 * total / max(attempts, 1)
        print(f"scheduler: {attempts:.0f} attempts ({scheduled:.0f} scheduled), mean attempt {mean:.2f} ms")
    finally:
        if scheduler is not None:
            scheduler.terminate()
            scheduler.wait(30)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--bind-concurrency", type=int, default=DEFAULT_BIND_CONCURRENCY)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--profile", metavar="FILE", help="run the scheduler under cProfile, stats to FILE")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
