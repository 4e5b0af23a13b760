"""Preemption's cost in the in-memory cycle (prints figures; not a test).

    python tests/bench/bench_preemption.py [--nodes 100,1000,5000] [--preemptors 50] [--repeat 2]

Every node (8 cpu) is full of four 2-cpu pods of low priorities (10..13, some covered by a
PodDisruptionBudget allowing one disruption); ``--preemptors`` pods of priority 1000 asking 4 cpu
each must evict two of them. Two configurations: Volcano's preempt action (priority, gang,
predicates: kube-scheduler's DefaultPreemption walk, ``scheduler/actions/victims.py``) and gpuq's
default configuration (capacity-scheduling's ElasticQuota PostFilter answers for every pod). Printed
per size: the time per preemptor (its failed attempt with the preemption, and its retry that binds),
the evictions, and how many times the real filters were asked (``Framework.fits_without``) per
preemption: the candidates are chosen on the nodes' room and verified best first, so a few.
"""

from __future__ import annotations

import argparse
import statistics
import time

from gpuq_k8s.common.model.config import DEFAULT_CONFIG_YAML, SchedulerConfig
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.scheduler.simulate.run import VirtualClock

VOLCANO = """\
actions: "enqueue, allocate, preempt"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
"""
CONFIGS = {"volcano-preempt": VOLCANO, "default (capacity-scheduling)": DEFAULT_CONFIG_YAML}


def pod(name: str, cpu: str, priority: int, node: str = "", labels: dict[str, str] | None = None) -> PodInfo:
    spec: dict[str, object] = {
        "schedulerName": "gpuq-scheduler",
        "priority": priority,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
    }
    if node:
        spec["nodeName"] = node
    meta = {
        "name": name,
        "namespace": "bench",
        "labels": labels or {},
        "creationTimestamp": "2024-01-01T00:00:00Z",
    }
    return PodInfo.from_dict({"metadata": meta, "spec": spec})


def once(config: str, nodes: int, preemptors: int) -> tuple[float, int, float]:
    backend = MemoryBackend()
    sched = Scheduler(SchedulerConfig.from_yaml(config), default_registry(), backend, clock=VirtualClock())
    backend.objects = sched.objects
    sched.put_object(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guarded", "namespace": "bench"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"guarded": "yes"}}},
            "status": {"disruptionsAllowed": 1},
        }
    )
    for i in range(nodes):
        name = f"node-{i:05d}"
        node = {
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110"}},
        }
        sched.set_node(NodeInfo.from_dict(node))
        for j in range(4):
            labels = {"guarded": "yes"} if (i + j) % 5 == 0 else {}
            sched.add_pod(pod(f"f-{i}-{j}", "2", 10 + j, name, labels))
    for k in range(preemptors):
        sched.add_pod(pod(f"urgent-{k:04d}", "4", 1000))
    asked = 0
    fits_without = sched.framework.fits_without

    def counted(*args: object, **kwargs: object) -> bool:
        nonlocal asked
        asked += 1
        return fits_without(*args, **kwargs)  # type: ignore[arg-type]

    sched.framework.fits_without = counted  # type: ignore[method-assign]
    began = time.perf_counter()
    while sched.schedule_one() is not None:
        pass
    seconds = time.perf_counter() - began
    return seconds / preemptors, len(backend.evictions), asked / preemptors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,1000,5000")
    parser.add_argument("--preemptors", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=2, help="runs per size; the median is printed")
    args = parser.parse_args()
    header = f"{'configuration':<30} {'nodes':>6} {'ms/preemptor':>13} {'evictions':>10}"
    print(f"{header} {'filter runs/preemption':>23}")
    for label, config in CONFIGS.items():
        for nodes in (int(n) for n in args.nodes.split(",")):
            runs = [once(config, nodes, args.preemptors) for _ in range(args.repeat)]
            per = statistics.median(r[0] for r in runs)
            print(
                f"{label:<30} {nodes:>6} {1000 * per:>13.1f} {runs[0][1]:>10} {runs[0][2]:>23.1f}", flush=True
            )


if __name__ == "__main__":
    main()
