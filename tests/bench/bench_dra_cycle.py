"""The whole in-memory scheduling cycle with DRA pods: N nodes x 8 GPUs, P pods each with one claim
(as a ResourceClaimTemplate makes them: one device of the class ``gpu.nvidia.com`` whose
``productName`` contains ``H100``; half the nodes have H100s).

Run: ``python tests/bench/bench_dra_cycle.py [--nodes 5000] [--devices 8] [--pods 5000]``.

The scheduler is gpuq's own (``Scheduler`` on the in-memory backend, as ``gpuq simulate`` runs it,
predicates and nodeorder): PreFilter, Filter over every node row (the DynamicResources per-row free
counts, kept current row by row), Score, Reserve (the ledger, in flight), PreBind (the claim's
finalizer, allocation and reservation written to the in-memory store, the claim re-read as the
informer would) and Bind. Printed: the set-up time, the first pod (cold: every selector over every
slice, every row counted), pods/s over the rest of the burst, and how many were placed. The issue's target
is 2,000 DRA pods/s at 5,000 nodes; figures are the machine's: quote them with the load average.
Importing this module does nothing.
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from typing import Any

from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins import default_registry

DRIVER = "gpu.nvidia.com"
TYPE_GPU = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu"'
CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": DRIVER},
    "spec": {"selectors": [{"cel": {"expression": TYPE_GPU}}]},
}
SELECTOR = f'device.attributes["{DRIVER}"].productName.contains("H100")'


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


def resource_slice(i: int, devices: int) -> dict[str, Any]:
    product = "NVIDIA H100 80GB HBM3" if i % 2 == 0 else "NVIDIA A100-SXM4-80GB"
    name = f"node-{i:05d}"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{d}",
                    "attributes": {"type": {"string": "gpu"}, "productName": {"string": product}},
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for d in range(devices)
            ],
        },
    }


def claim(i: int) -> dict[str, Any]:
    name = f"pod-{i:05d}-gpu"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": f"claim-{i}",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": f"pod-{i:05d}",
                    "uid": f"pod-{i}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": DRIVER,
                            "selectors": [{"cel": {"expression": SELECTOR}}],
                        },
                    }
                ]
            }
        },
    }


def pod(i: int) -> PodInfo:
    return PodInfo.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"pod-{i:05d}", "namespace": "bench", "uid": f"pod-{i}"},
            "spec": {
                "schedulerName": "gpuq-scheduler",
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}],
                "containers": [
                    {"name": "c", "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]}}
                ],
            },
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"pod-{i:05d}-gpu"}]},
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--pods", type=int, default=5000)
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
    sched.put_object(CLASS)
    for i in range(args.nodes):
        sched.set_node(NodeInfo.from_dict(node(i)))
        sched.put_object(resource_slice(i, args.devices))
    for i in range(args.pods):
        sched.put_object(claim(i))
    pods = [pod(i) for i in range(args.pods)]
    for p in pods:
        sched.add_pod(p)
    gc.collect()
    gc.freeze()
    setup = time.perf_counter() - started
    started = time.perf_counter()
    sched.schedule_one()  # the first pod pays for CEL over every slice and every row's count
    first = time.perf_counter() - started
    started = time.perf_counter()
    attempts = 0
    while sched.schedule_one() is not None:
        attempts += 1
    elapsed = time.perf_counter() - started
    placed = len(backend.bindings)
    load = os.getloadavg()[0]
    print(f"nodes={args.nodes} devices/node={args.devices} pods={args.pods} (load average {load:.1f})")
    print(f"set-up {setup:.1f}s; the first pod (cold: selectors over every slice) {first:.2f}s")
    print(f"then {attempts} attempts in {elapsed:.2f}s: {attempts / elapsed:,.0f} pods/s")
    print(f"placed {placed} (at most {(args.nodes + 1) // 2 * args.devices} H100s)")


if __name__ == "__main__":
    main()
