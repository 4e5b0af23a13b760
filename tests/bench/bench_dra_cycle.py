"""The whole in-memory scheduling cycle with DRA pods: N nodes x 8 GPUs (even nodes H100s, odd nodes
A100s), P pods each with one claim as a ResourceClaimTemplate makes it, of the shapes of
tests/bench/dra_workload.py taken in turn: one device by DeviceClass and CEL selector, two devices of
one request, and ``firstAvailable`` [H100, A100] (``--shapes`` one of them only).

Run: ``python tests/bench/bench_dra_cycle.py [--nodes 5000] [--devices 8] [--pods 5000] [--shapes mixed]
[--profile FILE]``.

The scheduler is gpuq's own (``Scheduler`` on the in-memory backend, as ``gpuq simulate`` runs it,
predicates and nodeorder): PreFilter, Filter over every node row (the DynamicResources per-row free
counts, kept current row by row), Score, Reserve (the ledger, in flight), PreBind (the claim's
finalizer, allocation and reservation written to the in-memory store, the claim re-read as the
informer would) and Bind. Printed: the set-up time, the first pod of each shape (cold: every selector
over every slice, every row counted), pods/s over the rest of the burst, and how many were placed.
The issue's target is 2,000 DRA pods/s at 5,000 nodes; figures are the machine's: quote them with the
load average (the rate per second of the process's CPU time is printed too: a busy machine slows the
wall clock, not that). ``--profile FILE`` writes cProfile's stats of the burst (after the cold pods) to FILE.
Importing this module does nothing.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins import default_registry
from tests.bench import dra_workload as workload


def node(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"node-{i:05d}"},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(i: int, shape: str) -> PodInfo:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i:05d}", "namespace": "bench", "uid": f"pod-{i}"},
        "spec": {
            "schedulerName": "gpuq-scheduler",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
        },
        "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"pod-{i:05d}-gpu"}]},
    }
    return PodInfo.from_dict(workload.use_template(body, shape))


def shape_of(i: int, shapes: str) -> str:
    return workload.shape_of(i) if shapes == "mixed" else shapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--shapes", choices=("mixed", *workload.SHAPES), default="mixed")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the burst, stats to FILE")
    args = parser.parse_args()
    from gpuq_k8s.common.model.nodes import NodeInfo  # noqa: PLC0415 - keeps the module import free

    started = time.perf_counter()
    backend = MemoryBackend()
    config = SchedulerConfig.from_yaml(
        "actions: enqueue, allocate\ntiers:\n- plugins:\n  - name: priority\n  - name: gang\n"
        "- plugins:\n  - name: predicates\n  - name: nodeorder\n"
    )
    sched = Scheduler(config, default_registry(), backend, clock=time.monotonic)
    backend.objects = sched.objects
    backend.cluster = sched.cluster
    sched.put_object(workload.device_class())
    for i in range(args.nodes):
        sched.set_node(NodeInfo.from_dict(node(i)))
        sched.put_object(workload.resource_slice(f"node-{i:05d}", i, args.devices))
    shapes = [shape_of(i, args.shapes) for i in range(args.pods)]
    for i, shape in enumerate(shapes):
        sched.put_object(workload.generated_claim(f"pod-{i:05d}", f"pod-{i}", "bench", shape))
    for i, shape in enumerate(shapes):
        sched.add_pod(pod(i, shape))
    gc.collect()
    gc.freeze()
    setup = time.perf_counter() - started
    started = time.perf_counter()
    cold = len(set(shapes))
    for _ in range(cold):  # the first pod of each shape pays for CEL over every slice, every row's count
        sched.schedule_one()
    first = time.perf_counter() - started
    profiler = cProfile.Profile() if args.profile else None
    if profiler is not None:
        profiler.enable()
    started, cpu_started = time.perf_counter(), time.process_time()
    attempts = 0
    while sched.schedule_one() is not None:
        attempts += 1
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    placed = len(backend.bindings)
    load = os.getloadavg()[0]
    print(
        f"nodes={args.nodes} devices/node={args.devices} pods={args.pods} shapes={args.shapes} "
        f"(load average {load:.1f})"
    )
    print(f"set-up {setup:.1f}s; the first pod of each of {cold} shapes (cold) {first:.2f}s")
    print(
        f"then {attempts} attempts in {elapsed:.2f}s: {attempts / elapsed:,.0f} DRA pods/s "
        f"(of process CPU time, which the load does not inflate: {cpu:.2f}s, {attempts / cpu:,.0f} pods/s)"
    )
    print(f"placed {placed} of {args.pods} ({args.nodes * args.devices} GPUs, half of them H100s)")


if __name__ == "__main__":
    main()
