"""``bench_side_by_side.py --dra``: gpuq and kube-scheduler allocating DRA devices for pods with template
claims, on the same control plane, alternating (issue 26's benchmark).

Every run gets a fresh control plane (the e2e harness: etcd + kube-apiserver v1.36) with ``--nodes``
fake Ready nodes, each publishing a ResourceSlice of ``--dra-devices`` GPUs (even nodes H100s, odd
nodes A100s), one DeviceClass, the three ResourceClaimTemplates of tests/bench/dra_workload.py (one
GPU by class and CEL selector; two GPUs of one request; ``firstAvailable`` [H100, A100]) and
``--pods`` pending pods, each with one claim from a template, the shapes in turn. Then
kube-controller-manager runs its ``resource-claim-controller`` with ``--kube-api-qps=1000
--kube-api-burst=1000`` (as tests/e2e/test_dra.py: its default 20 qps would pace everything) for
both contenders alike; kube-scheduler runs with client qps/burst 5000 (bench_side_by_side.py).

The controller makes each pod's claim from its template and writes the claim's name into the pod's
``status.resourceClaimStatuses``; a scheduler cannot allocate before that. ``--dra-timing``:

* ``claims-first`` (default): the controller makes every claim before the contender starts; pods/s is
  then counted from the first bind to the last with every claim already there, so the figure is the
  schedulers' alone (the controller's pace, printed apart, is the same for both);
* ``concurrent``: the controller and the contender start together (as in a real burst); pods/s is then
  bounded by the controller's pace when that is the slower, and the printed claim span shows it.

Printed per run: the claims' creation (first to last, claims/s), then bench_side_by_side.py's line for
the contender (pods/s first bind to last, CPU per pod, the control plane's CPU, load average); at the
end the medians, the ratio gpuq/kube-scheduler and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from gpuq_k8s.common.kube.client import new_api_client
from gpuq_k8s.common.kube.diff import Change
from gpuq_k8s.common.kube.informer import Informer
from gpuq_k8s.common.model import kinds
from tests.bench import dra_workload as workload
from tests.bench.bench_cluster import NAME, NODE_ALLOCATABLE, POD_REQUESTS
from tests.e2e.cluster_fixtures import Cluster
from tests.e2e.controlplane.harness import ControlPlane

DRA = "/apis/resource.k8s.io/v1"
TIMINGS = ("claims-first", "concurrent")
CONTROLLER_ARGS = ("--kube-api-qps=1000", "--kube-api-burst=1000")


Contend = Callable[..., Awaitable[Any]]


async def populate(cluster: Cluster, nodes: int, pods: int, devices: int, concurrency: int = 64) -> None:
    """The DeviceClass, the templates, ``nodes`` nodes with their slices, ``pods`` pending pods."""
    gate = asyncio.Semaphore(concurrency)
    ns = cluster.namespace
    await cluster.request("POST", f"{DRA}/deviceclasses", workload.device_class())
    for shape in workload.SHAPES:
        await cluster.request(
            "POST", f"{DRA}/namespaces/{ns}/resourceclaimtemplates", workload.claim_template(shape, ns)
        )

    async def node(i: int) -> None:
        async with gate:
            name = await cluster.node(f"n{i:05d}", dict(NODE_ALLOCATABLE))
            await cluster.request("POST", f"{DRA}/resourceslices", workload.resource_slice(name, i, devices))

    async def pod(i: int) -> None:
        body = cluster.pod_body(f"p{i:05d}", dict(POD_REQUESTS), scheduler=NAME)
        async with gate:
            await cluster.request(
                "POST", f"/api/v1/namespaces/{ns}/pods", workload.use_template(body, workload.shape_of(i))
            )

    began = time.monotonic()
    await asyncio.gather(*(node(i) for i in range(nodes)))
    print(f"created {nodes} nodes with {devices} GPUs each in {time.monotonic() - began:.1f}s", flush=True)
    began = time.monotonic()
    await asyncio.gather(*(pod(i) for i in range(pods)))
    print(f"created {pods} pending pods with template claims in {time.monotonic() - began:.1f}s", flush=True)


@contextlib.asynccontextmanager
async def fresh_dra_cluster(
    nodes: int, pods: int, devices: int
) -> AsyncIterator[tuple[ControlPlane, Any, Path]]:
    plane = ControlPlane()
    plane.start()
    try:
        plane.apply_crds()
        api = await new_api_client(str(plane.kubeconfig))
        try:
            cluster = Cluster(api, "bench", "bench")
            await cluster.request("POST", "/api/v1/namespaces", {"metadata": {"name": "bench"}})
            await cluster.request(
                "POST", "/api/v1/namespaces/bench/serviceaccounts", {"metadata": {"name": "default"}}
            )
            await populate(cluster, nodes, pods, devices)
            yield plane, api, Path(tempfile.mkdtemp(prefix="gpuq-bench-dra-"))
        finally:
            await api.close()
    finally:
        plane.stop()


class ClaimClock:
    """When each pod's claim was first seen, and when each pod's ``resourceClaimStatuses`` was."""

    def __init__(self, pods: int) -> None:
        self.pods = pods
        self.claims: dict[str, float] = {}
        self.statuses: dict[str, float] = {}
        self.all_statuses = asyncio.Event()

    def on_claim(self, change: Change) -> None:
        if change.type != "delete":
            self.claims.setdefault(change.key[1], time.monotonic())

    def on_pod(self, change: Change) -> None:
        if change.type == "delete" or not (change.obj.get("status") or {}).get("resourceClaimStatuses"):
            return
        self.statuses.setdefault(change.key[1], time.monotonic())
        if len(self.statuses) >= self.pods:
            self.all_statuses.set()

    def describe(self, since: float) -> str:
        times = sorted(self.claims.values())
        if len(times) < 2:
            return f"claims: {len(times)} made by the resource-claim-controller"
        span = times[-1] - times[0]
        statuses = max(self.statuses.values(), default=float("nan")) - since
        return (
            f"claims: {len(times)} made by the resource-claim-controller from {times[0] - since:.1f}s to "
            f"{times[-1] - since:.1f}s after it started ({(len(times) - 1) / span:.0f} claims/s); "
            f"the last pod's claim status at {statuses:.1f}s"
        )


async def run_once(contender: str, args: argparse.Namespace, contend: Contend) -> Any:
    """One run of ``contender`` on a fresh control plane (``contend`` is bench_side_by_side.py's)."""
    async with fresh_dra_cluster(args.nodes, args.pods, args.dra_devices) as (plane, api, workdir):
        clock = ClaimClock(args.pods)
        informers = [
            Informer(api, kinds.RESOURCE_CLAIM, handlers=[clock.on_claim]),
            Informer(api, kinds.POD, handlers=[clock.on_pod]),
        ]
        tasks = [asyncio.create_task(i.run()) for i in informers]
        try:
            for informer in informers:
                await informer.synced.wait()
            started = time.monotonic()
            plane.start_controller_manager(("resource-claim-controller",), extra_args=CONTROLLER_ARGS)
            if args.dra_timing == "claims-first":
                await asyncio.wait_for(clock.all_statuses.wait(), timeout=args.timeout)
                print(clock.describe(started), flush=True)
            result = await contend(contender, args, plane, api, workdir, workload=f"dra-{args.dra_timing}")
            if args.dra_timing == "concurrent":
                print(clock.describe(started), flush=True)
            return result
        finally:
            for task in tasks:
                task.cancel()


async def main(args: argparse.Namespace, contend: Contend, summary: Callable[[list[Any]], None]) -> None:
    contenders = args.contenders.split(",")
    wrong = [c for c in contenders if c not in ("gpuq", "kube-scheduler")]
    if wrong:
        raise SystemExit(
            f"--dra: --contenders {','.join(wrong)}: expected gpuq and/or kube-scheduler "
            "(the raw binders allocate no devices)"
        )
    if args.dra_timing not in TIMINGS:
        raise SystemExit(f"--dra-timing {args.dra_timing!r}: expected one of {', '.join(TIMINGS)}")
    results = []
    for repeat in range(args.repeats):
        for contender in contenders:
            print(f"dra ({args.dra_timing}): run {repeat + 1}/{args.repeats}: {contender}", flush=True)
            results.append(await run_once(contender, args, contend))
    summary(results)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average (1, 5, 15 min): {load}")
