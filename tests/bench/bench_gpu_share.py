"""The in-memory scheduling cycle with tensor-fusion pods on shared GPUs (design.md Semantics 19), against
the same burst of whole-card pods in the same invocation: N nodes x 8 A100s (100 TFLOPS, 80 GiB each),
P pods each asking either ``nvidia.com/gpu: 1`` (the reference: resource fit alone places it) or 50
TFLOPS and 10Gi by tensor-fusion's annotations (GPUShare: Filter over every row, the per-device choice,
Reserve in the ledger, PreBind's gpu-ids write).

Run: ``python tests/bench/bench_gpu_share.py [--nodes 5000] [--pods 5000]``. Printed: pods/s of each
burst and the ratio; figures are the machine's (quote them with the load average). Importing this module
does nothing.
"""

from __future__ import annotations

import argparse
import gc
import os
import time

from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins import default_registry

CONFIG = (
    "actions: allocate\ntiers:\n- plugins:\n  - name: priority\n"
    "- plugins:\n  - name: predicates\n  - name: gpu-quota\n"
)
LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-A100",
    "nvidia.com/gpu.memory": "81920",
    "nvidia.com/gpu.tflops": "100",
}


def node(i: int) -> NodeInfo:
    return NodeInfo.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"node-{i:05d}", "labels": LABELS},
            "status": {
                "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


def pod(i: int, shared: bool) -> PodInfo:
    requests = {"cpu": "100m"} if shared else {"cpu": "100m", "nvidia.com/gpu": "1"}
    annotations = {"tensor-fusion.ai/tflops-request": "50", "tensor-fusion.ai/vram-request": "10Gi"}
    return PodInfo.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"pod-{i:05d}",
                "namespace": "bench",
                "uid": f"pod-{i}",
                "annotations": annotations if shared else {},
            },
            "spec": {
                "schedulerName": "gpuq-scheduler",
                "containers": [{"name": "c", "resources": {"requests": requests, "limits": requests}}],
            },
        }
    )


def burst(nodes: int, pods: int, *, shared: bool) -> tuple[float, int]:
    """pods/s of one burst (after its first pod) and how many were placed."""
    backend = MemoryBackend()
    sched = Scheduler(SchedulerConfig.from_yaml(CONFIG), default_registry(), backend, clock=time.monotonic)
    backend.objects = sched.objects
    backend.cluster = sched.cluster
    for i in range(nodes):
        sched.set_node(node(i))
    for i in range(pods):
        sched.add_pod(pod(i, shared))
    gc.collect()
    gc.freeze()
    sched.schedule_one()
    started = time.perf_counter()
    attempts = 0
    while sched.schedule_one() is not None:
        attempts += 1
    elapsed = time.perf_counter() - started
    gc.unfreeze()
    return attempts / elapsed, len(backend.bindings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=5000)
    args = parser.parse_args()
    whole, whole_placed = burst(args.nodes, args.pods, shared=False)
    shared, shared_placed = burst(args.nodes, args.pods, shared=True)
    print(f"nodes={args.nodes} x 8 GPUs, pods={args.pods} (load average {os.getloadavg()[0]:.1f})")
    print(f"whole-card pods (reference): {whole:,.0f} pods/s, placed {whole_placed}")
    print(f"shared-GPU pods (GPUShare):  {shared:,.0f} pods/s, placed {shared_placed}")
    print(f"ratio shared / whole: {shared / whole:.2f}")


if __name__ == "__main__":
    main()
