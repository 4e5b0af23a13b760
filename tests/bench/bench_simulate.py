"""Throughput and latency of the scheduling cycle (prints figures; not a test).

    python tests/bench/bench_simulate.py              # 1,000 and 5,000 nodes x 10,000 pending pods
    python tests/bench/bench_simulate.py --repeat 3   # best of 3 runs per size (a shared machine is noisy)
    python tests/bench/bench_simulate.py --rss        # peak RSS, 5,000 nodes x 50,000 pods

Besides wall-clock pods/s and per-pod p50/p99, each line shows pods per second of this process's CPU
time, which other processes competing for the cores do not inflate.

A realistic mix: 60 % GPU nodes of three card types (A100, H100, T4) with crossquota annotations on
some, 40 % CPU nodes; 70 % CPU pods (some with node selectors or tolerations), 30 % GPU pods;
ten namespaces, six with ElasticQuotas; three team Queues with card quotas (half the GPU pods name
their card type, some as ``A|B`` alternatives); two namespaces with a GPUResourceQuota. The default
configuration (every plugin) schedules them.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import time
from dataclasses import dataclass
from typing import Any

from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.scheduler.simulate.run import VirtualClock

CARDS = ("NVIDIA-A100", "NVIDIA-H100", "NVIDIA-T4")


def _nodes(count: int, rng: random.Random) -> list[NodeInfo]:
    nodes = []
    for i in range(count):
        labels = {"kubernetes.io/hostname": f"node-{i:05d}", "zone": f"z{i % 4}"}
        annotations: dict[str, str] = {}
        allocatable: dict[str, str] = {"cpu": "64", "memory": "512Gi", "pods": "110"}
        taints: list[dict[str, str]] = []
        if i % 5 < 3:
            card = CARDS[i % 3]
            labels["nvidia.com/gpu.product"] = card
            labels["nvidia.com/gpu.memory"] = "81920"
            allocatable["nvidia.com/gpu"] = "8"
            if i % 7 == 0:
                annotations["volcano.sh/crossquota-cpu"] = "16"
            if i % 11 == 0:
                taints.append({"key": "dedicated", "value": "training", "effect": "NoSchedule"})
        obj = {
            "metadata": {"name": f"node-{i:05d}", "labels": labels, "annotations": annotations},
            "spec": {"taints": taints},
            "status": {"allocatable": allocatable},
        }
        nodes.append(NodeInfo.from_dict(obj))
    rng.shuffle(nodes)
    return nodes


def _pods(count: int, rng: random.Random) -> list[PodInfo]:
    pods = []
    for i in range(count):
        ns = f"team-{i % 10}"
        requests: dict[str, Any] = {
            "cpu": f"{rng.choice([250, 500, 1000, 2000])}m",
            "memory": f"{rng.choice([1, 2, 4])}Gi",
        }
        spec: dict[str, Any] = {"schedulerName": "gpuq-scheduler"}
        annotations: dict[str, str] = {}
        if i % 10 < 8:
            annotations["scheduling.volcano.sh/queue-name"] = f"team-{i % 3}"
        if i % 10 < 3:
            requests["nvidia.com/gpu"] = str(rng.choice([1, 1, 2, 4]))
            if i % 2 == 0:
                annotations["volcano.sh/card.name"] = rng.choice(
                    [CARDS[0], CARDS[1], f"{CARDS[0]}|{CARDS[1]}", f"{CARDS[1]}|{CARDS[2]}"]
                )
            if i % 3 == 0:
                spec["affinity"] = {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "nvidia.com/gpu.product",
                                            "operator": "In",
                                            "values": [CARDS[i % 2]],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                }
            if i % 4 == 0:
                spec["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
        elif i % 10 == 5:
            spec["nodeSelector"] = {"zone": f"z{i % 4}"}
        spec["containers"] = [{"name": "c", "resources": {"requests": requests}}]
        meta = {
            "name": f"p-{i:06d}",
            "namespace": ns,
            "annotations": annotations,
            "creationTimestamp": f"2024-01-01T00:{i // 6000 % 60:02d}:{i // 100 % 60:02d}Z",
        }
        pods.append(PodInfo.from_dict({"metadata": meta, "spec": spec}))
    return pods


CONFIG: list[SchedulerConfig] = []  # --config: the configuration to run (default: the default one)


def _scheduler(config: SchedulerConfig | None = None) -> Scheduler:
    backend = MemoryBackend()
    config = config or (CONFIG[0] if CONFIG else SchedulerConfig.default())
    sched = Scheduler(config, default_registry(), backend, clock=VirtualClock())
    for t in range(3):
        quota = dict.fromkeys(CARDS, 4000)
        sched.put_object(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {
                    "name": f"team-{t}",
                    "annotations": {"volcano.sh/card.quota": json.dumps(quota)},
                },
                "spec": {"capability": {"cpu": "200000", "memory": "2000Ti"}},
            }
        )
    for t in (7, 8):
        sched.put_object(
            {
                "apiVersion": "tensor-fusion.ai/v1",
                "kind": "GPUResourceQuota",
                "metadata": {"name": "gpu", "namespace": f"team-{t}"},
                "spec": {"total": {"requests": {"tflops": "200000", "vram": "2000Ti"}, "maxWorkers": 100000}},
            }
        )
    for t in range(6):
        sched.put_object(
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "ElasticQuota",
                "metadata": {"name": "eq", "namespace": f"team-{t}"},
                "spec": {
                    "min": {"cpu": "20000", "nvidia.com/gpu": "4000"},
                    "max": {"cpu": "100000", "nvidia.com/gpu": "100000"},
                },
            }
        )
    return sched


@dataclass(frozen=True, slots=True)
class Figures:
    nodes: int
    pods: int
    rate: float  # attempts per wall-clock second
    cpu_rate: float  # attempts per second of process CPU time
    p50_ms: float
    p99_ms: float
    bound: int
    attempts: int

    def __str__(self) -> str:
        return (
            f"{self.nodes:>6} nodes {self.pods:>6} pods: {self.rate:8.0f} pods/s  "
            f"p50 {self.p50_ms:.3f} ms  p99 {self.p99_ms:.3f} ms  bound {self.bound}/{self.attempts}  "
            f"(cpu {self.cpu_rate:.0f} pods/s)"
        )


def bench(nodes: int, pods: int) -> Figures:
    rng = random.Random(42)
    sched = _scheduler()
    for node in _nodes(nodes, rng):
        sched.set_node(node)
    for pod in _pods(pods, rng):
        sched.add_pod(pod)
    latencies: list[float] = []
    bound = 0
    started = time.perf_counter()
    cpu_started = time.process_time()
    while True:
        t0 = time.perf_counter()
        attempt = sched.schedule_one()
        if attempt is None:
            break
        latencies.append(time.perf_counter() - t0)
        bound += bool(attempt.node)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    latencies.sort()
    return Figures(
        nodes,
        pods,
        len(latencies) / elapsed,
        len(latencies) / cpu,
        statistics.median(latencies) * 1e3,
        latencies[int(len(latencies) * 0.99) - 1] * 1e3,
        bound,
        len(latencies),
    )


def rss(nodes: int, pods: int) -> None:
    rng = random.Random(7)
    sched = _scheduler()
    for node in _nodes(nodes, rng):
        sched.set_node(node)
    for pod in _pods(pods, rng):
        sched.add_pod(pod)
    while sched.schedule_one() is not None:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {nodes} nodes {pods} pods: {peak:.0f} MB ({len(sched.cluster.pods)} pods bound)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rss", action="store_true")
    parser.add_argument("--repeat", type=int, default=1, help="runs per size; the fastest is printed")
    parser.add_argument("--config", help="a scheduler configuration file (default: the default one)")
    args = parser.parse_args()
    if args.config:
        with open(args.config, encoding="utf-8") as conf:
            CONFIG.append(SchedulerConfig.from_yaml(conf.read()))
    if args.rss:
        rss(5000, 50000)
        return
    for nodes in (1000, 5000):
        runs = [bench(nodes, 10000) for _ in range(max(args.repeat, 1))]
        print(max(runs, key=lambda figures: figures.rate))


if __name__ == "__main__":
    main()
