"""What the chaos soak schedules: the five quota kinds gpuq enforces, the nodes and the pod classes.

One namespace per quota kind, so every pod is governed by exactly the quota its class is about (plus
crossquota, which governs every CPU pod that lands on a GPU node, whatever its namespace):

| kind | object | limit | pods |
|---|---|---|---|
| card | Queue chaos-card, ``card.quota`` | 5 NVIDIA-A100 cards | 1 A100 + 1 cpu, ``card.name`` |
| capability | Queue chaos-cap, ``spec.capability`` | 6 cpu, 12Gi memory | 1-2 cpu, 1-2Gi, no card |
| crossquota | plugin argument ``quota.cpu`` | 3 cpu of CPU pods per GPU node | 1-2 cpu, on GPU nodes |
| elastic | ElasticQuota chaos-eq (min = max) | 5 cpu, 10Gi memory | 1-2 cpu, 1Gi |
| gpu | GPUResourceQuota chaos-gq | 400 TFLOPS, 40Gi requested; 4 workers | tensor-fusion annotations |

ElasticQuota min = max: with one ElasticQuota there is nothing to borrow, so preemption never
deletes pods behind the soak's back and ``max`` is the limit (borrowing and preemption are covered by
``tests/e2e/test_scheduler_features.py``). The capacity-card Queue of cards runs with
``cardUnlimitedCpuMemory``, so it limits cards only, and the other Queue limits cpu and memory only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Final

from tests.testing.builders import MakeElasticQuota, MakeGPUResourceQuota, MakeNode, MakePod, MakeQueue
from tests.testing.config import BASE_TIER

SCHEDULER: Final = "gpuq-chaos"
POOL: Final = "gpuq.e2e/pool"  # node label: "gpu" or "cpu"
GPU: Final = "nvidia.com/gpu"
CARD: Final = "NVIDIA-A100"
QUEUE_ANNOTATION: Final = "scheduling.volcano.sh/queue-name"

CARD_QUEUE: Final = "chaos-card"
CARD_QUOTA: Final = 5
CAP_QUEUE: Final = "chaos-cap"
CAP_CPU: Final = "6"
CAP_MEMORY: Final = "12Gi"
CROSS_CPU: Final = "3"
EQ_NAME: Final = "chaos-eq"
EQ_CPU: Final = "5"
EQ_MEMORY: Final = "10Gi"
GQ_NAME: Final = "chaos-gq"
GQ_TFLOPS: Final = "400"
GQ_VRAM: Final = "40Gi"
GQ_WORKERS: Final = 4

# Namespace of each pod class (the class is also the pods' name prefix).
NAMESPACES: Final = {
    "card": "chaos-card",
    "cap": "chaos-cap",
    "xq": "chaos-xq",
    "eq": "chaos-eq",
    "gq": "chaos-gq",
}

GPU_NODE: Final = {"cpu": "16", "memory": "64Gi", "pods": "110", GPU: "4"}
CPU_NODE: Final = {"cpu": "8", "memory": "32Gi", "pods": "110"}
GPU_LABELS: Final = {POOL: "gpu", f"{GPU}.product": CARD, f"{GPU}.memory": "81920"}
CPU_LABELS: Final = {POOL: "cpu"}

CONFIG: Final = (
    BASE_TIER
    + f"""\
  - name: capacity-card
    arguments: {{cardUnlimitedCpuMemory: true, nodeOrderWeight: 1.0}}
  - name: crossquota
    arguments: {{gpu-resource-names: "{GPU}", quota-resources: "cpu", quota.cpu: "{CROSS_CPU}"}}
  - name: capacity-scheduling
  - name: gpu-quota
"""
)


def quota_objects() -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object) of the quota objects, to create once."""
    gq_ns = NAMESPACES["gq"]
    return [
        (
            "/apis/scheduling.volcano.sh/v1beta1/queues",
            MakeQueue(CARD_QUEUE).card_quota(f'{{"{CARD}": {CARD_QUOTA}}}').weight(1).obj(),
        ),
        (
            "/apis/scheduling.volcano.sh/v1beta1/queues",
            MakeQueue(CAP_QUEUE).capability(cpu=CAP_CPU, memory=CAP_MEMORY).weight(1).obj(),
        ),
        (
            f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NAMESPACES['eq']}/elasticquotas",
            MakeElasticQuota(EQ_NAME, NAMESPACES["eq"])
            .min(cpu=EQ_CPU, memory=EQ_MEMORY)
            .max(cpu=EQ_CPU, memory=EQ_MEMORY)
            .obj(),
        ),
        (
            f"/apis/tensor-fusion.ai/v1/namespaces/{gq_ns}/gpuresourcequotas",
            MakeGPUResourceQuota(GQ_NAME, gq_ns)
            .total(
                requests={"tflops": GQ_TFLOPS, "vram": GQ_VRAM},
                limits={"tflops": GQ_TFLOPS, "vram": GQ_VRAM},
                maxWorkers=GQ_WORKERS,
            )
            .obj(),
        ),
    ]


def node_object(name: str, gpu: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """A fake node (the object to POST) and its allocatable (for the status patch)."""
    allocatable = GPU_NODE if gpu else CPU_NODE
    node = MakeNode(name).labels(dict(GPU_LABELS if gpu else CPU_LABELS))
    return node.obj(), dict(allocatable)


@dataclass(frozen=True)
class PodClass:
    name: str

    @property
    def namespace(self) -> str:
        return NAMESPACES[self.name]

    def body(self, pod_name: str, rng: random.Random) -> dict[str, Any]:
        """A pod of this class with amounts drawn from ``rng``."""
        pod = (
            MakePod(pod_name, self.namespace)
            .image("registry.k8s.io/pause:3.10")
            .scheduler(SCHEDULER)
            .spec(automountServiceAccountToken=False, terminationGracePeriodSeconds=0)
        )
        small = str(rng.choice((1, 2)))
        if self.name == "card":
            pod.req(cpu="1").gpus(1).card(CARD).annotation(QUEUE_ANNOTATION, CARD_QUEUE)
        elif self.name == "cap":
            pod.req(cpu=small, memory=f"{small}Gi").annotation(QUEUE_ANNOTATION, CAP_QUEUE)
        elif self.name == "xq":
            pod.req(cpu=small).node_selector({POOL: "gpu"})
        elif self.name == "eq":
            pod.req(cpu=small, memory="1Gi")
        else:
            tflops = str(rng.choice((50, 100, 150)))
            pod.req(cpu="500m").annotations(
                {
                    "tensor-fusion.ai/tflops-request": tflops,
                    "tensor-fusion.ai/tflops-limit": tflops,
                    "tensor-fusion.ai/vram-request": "10Gi",
                    "tensor-fusion.ai/vram-limit": "10Gi",
                }
            )
        return pod.obj()


POD_CLASSES: Final = tuple(PodClass(name) for name in NAMESPACES)
