"""What the day runs on and what it runs: the cluster, its tenants and quotas, and the workloads,
arriving in bursts over a simulated day (seeded: the same seed, the same day).

Nodes: :data:`NODES` kwok GPU nodes of 8 cards (two thirds NVIDIA-A100, one third NVIDIA-H100), 64
cpu, 512Gi, labelled for capacity-card's card discovery.

| tenant | namespace | Queue (card quota) | other quota | priority | workload |
|---|---|---|---|---|---|
| training A | day-team-a | training | ElasticQuota (GPUs) | training (100), some 200 | batch/v1 Jobs |
| training B | day-team-b | training | ElasticQuota (GPUs) | as team A | as team A |
| inference | day-serve | inference | | serving (1000) | Deployments, scaled with the daylight |
| notebooks | day-notebooks | interactive | GPUResourceQuota | notebook (500) | pods, deleted (30 s grace) |
| batch ETL | day-etl | (none) | crossquota (CPU pods) | etl (10) | batch/v1 Jobs of CPU pods |

Training gangs are PodGroups of 2-4 pods (minMember all of them, or 2 of 4: elastic); the others
are single pods.

The two training ElasticQuotas guarantee team A and team B a share (min) and let each borrow what
the other leaves (max); capacity-scheduling's preemption takes borrowed GPUs back for a team within
its guarantee. A gang either runs with all its minMember pods or not at all; some training gangs are
elastic (minMember below their parallelism), so their extra pods can be taken back.

Durations are simulated minutes, turned into real seconds by the run's time scale (never below a
few seconds: kwok's stages and the scheduler need that much to be seen).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from typing import Any, Final

from tests.testing.builders import MakeElasticQuota, MakeGPUResourceQuota, MakePodGroup, MakeQueue

SCHEDULER: Final = "gpuq-day"
GPU: Final = "nvidia.com/gpu"
A100: Final = "NVIDIA-A100"
H100: Final = "NVIDIA-H100"
CARD_NAME: Final = "volcano.sh/card.name"
QUEUE_NAME: Final = "scheduling.volcano.sh/queue-name"
GROUP_NAME: Final = "scheduling.k8s.io/group-name"
COMPLETE_AFTER: Final = "gpuq.e2e/complete-after"
TF: Final = "tensor-fusion.ai/"
POOL: Final = "gpuq.e2e/day-pool"
GPUS_PER_NODE: Final = 8
CROSS_CPU: Final = 16  # crossquota's quota.cpu: CPU pods per GPU node

TEAM_A, TEAM_B, SERVE, NOTEBOOKS, ETL = "day-team-a", "day-team-b", "day-serve", "day-notebooks", "day-etl"
NAMESPACES: Final = (TEAM_A, TEAM_B, SERVE, NOTEBOOKS, ETL)
LEASE_NAMESPACE: Final = "day-system"
TRAINING, INFERENCE, INTERACTIVE = "training", "inference", "interactive"
QUEUE_OF_NAMESPACE: Final = {TEAM_A: TRAINING, TEAM_B: TRAINING, SERVE: INFERENCE, NOTEBOOKS: INTERACTIVE}
NO_QUEUE: Final = "(none)"  # the ETL pods name no Queue (Semantics 7: no queue quota)

PRIORITIES: Final = {"serving": 1000, "notebook": 500, "training-high": 200, "training": 100, "etl": 10}


@dataclass(frozen=True)
class Sizes:
    """The cluster and quota sizes, scaled with the node count."""

    nodes: int

    @property
    def a100_nodes(self) -> int:
        return self.nodes * 2 // 3

    @property
    def gpus(self) -> int:
        return self.nodes * GPUS_PER_NODE

    def card_quota(self, queue: str) -> dict[str, int]:
        a100, h100 = self.a100_nodes * GPUS_PER_NODE, (self.nodes - self.a100_nodes) * GPUS_PER_NODE
        share = {TRAINING: 0.75, INFERENCE: 0.35, INTERACTIVE: 0.10}[queue]
        quota = {A100: math.floor(a100 * share)}
        if queue != INTERACTIVE:
            quota[H100] = math.floor(h100 * share)
        return quota

    def elastic(self, namespace: str) -> tuple[int, int]:
        """(min, max) GPUs of a training team's ElasticQuota."""
        guaranteed = self.gpus * (0.25 if namespace == TEAM_A else 0.20)
        return math.floor(guaranteed), math.floor(self.gpus * 0.40)

    @property
    def notebook_workers(self) -> int:
        return max(4, self.gpus // 16)


CONFIG: Final = f"""\
actions: "enqueue, allocate, preempt"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
  - name: capacity-card
    arguments: {{cardUnlimitedCpuMemory: true, nodeOrderWeight: 1.0}}
  - name: crossquota
    arguments: {{gpu-resource-names: "{GPU}", quota-resources: "cpu", quota.cpu: "{CROSS_CPU}"}}
  - name: resource-strategy-fit
    arguments: {{resourceStrategyFitWeight: 10, resources: {{{GPU}: {{type: MostAllocated, weight: 2}}}}}}
  - name: capacity-scheduling
  - name: gpu-quota
"""


def node_objects(sizes: Sizes) -> list[tuple[str, dict[str, str], dict[str, str]]]:
    """(name, allocatable, labels) of every node."""
    out = []
    for i in range(sizes.nodes):
        card = A100 if i < sizes.a100_nodes else H100
        labels = {POOL: "gpu", f"{GPU}.product": card, f"{GPU}.memory": "81920", f"{GPU}.count": "8"}
        allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(GPUS_PER_NODE)}
        out.append((f"day-{card[-4:].lower()}-{i:03d}", allocatable, labels))
    return out


def quota_objects(sizes: Sizes) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object) of the Queues, ElasticQuotas, GPUResourceQuota and PriorityClasses."""
    out: list[tuple[str, dict[str, Any]]] = []
    for name, value in PRIORITIES.items():
        klass = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": f"day-{name}"},
        }
        out.append(("/apis/scheduling.k8s.io/v1/priorityclasses", klass | {"value": value}))
    for queue in (TRAINING, INFERENCE, INTERACTIVE):
        made = MakeQueue(queue).card_quota(json.dumps(sizes.card_quota(queue))).weight(1)
        out.append(("/apis/scheduling.volcano.sh/v1beta1/queues", made.obj()))
    for namespace in (TEAM_A, TEAM_B):
        low, high = sizes.elastic(namespace)
        made_eq = MakeElasticQuota("gpus", namespace).min({GPU: str(low)}).max({GPU: str(high)})
        out.append(
            (f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/elasticquotas", made_eq.obj())
        )
    workers = sizes.notebook_workers
    gq = MakeGPUResourceQuota("notebooks", NOTEBOOKS).total(
        requests={"tflops": str(workers * 100), "vram": f"{workers * 24}Gi"},
        limits={"tflops": str(workers * 150), "vram": f"{workers * 32}Gi"},
        maxWorkers=workers,
    )
    out.append((f"/apis/tensor-fusion.ai/v1/namespaces/{NOTEBOOKS}/gpuresourcequotas", gq.obj()))
    return out


# -- the simulated day --------------------------------------------------------------------------------

DAY: Final = 24 * 3600.0
BURSTS: Final = ((9.0, 3.0), (13.5, 2.5), (21.0, 2.0))  # (hour, height): morning, afternoon, nightly batch


def activity(hour: float) -> float:
    """How busy the hour is (1 on average over the day): a working-day curve plus bursts of
    submissions, each about 40 simulated minutes wide."""
    day = 0.35 + 0.9 * math.exp(-(((hour - 13.0) / 4.0) ** 2))
    bursts = sum(h * math.exp(-(((hour - at) / 0.35) ** 2)) for at, h in BURSTS)
    return (day + bursts) / _MEAN


_MEAN: Final = (
    sum(
        0.35
        + 0.9 * math.exp(-(((h / 10 - 13.0) / 4.0) ** 2))
        + sum(b * math.exp(-(((h / 10 - at) / 0.35) ** 2)) for at, b in BURSTS)
        for h in range(240)
    )
    / 240
)


def serving_replicas(hour: float, peak: int, rng: random.Random) -> int:
    """An inference Deployment's wanted replicas: following the daylight, a little noise."""
    level = 0.25 + 0.75 * math.exp(-(((hour - 14.0) / 5.0) ** 2))
    return max(1, min(peak, round(peak * level + rng.uniform(-0.6, 0.6))))


# Share of the day's jobs per kind (Deployments are services, not jobs).
JOB_MIX: Final = {"training": 0.40, "etl": 0.38, "notebook": 0.22}


@dataclass(frozen=True)
class Scale:
    """Simulated seconds per real second, and the shortest real duration of anything."""

    factor: float
    floor: float = 4.0

    def seconds(self, simulated_minutes: float) -> float:
        return max(self.floor, simulated_minutes * 60.0 / self.factor)


def _pod_template(
    *,
    priority: str,
    requests: dict[str, str],
    annotations: dict[str, str],
    grace: int,
    restart: str,
) -> dict[str, Any]:
    limits = {GPU: requests[GPU]} if GPU in requests else {}
    return {
        "metadata": {"annotations": annotations},
        "spec": {
            "schedulerName": SCHEDULER,
            "priorityClassName": f"day-{priority}",
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": grace,
            "automountServiceAccountToken": False,
            "nodeSelector": {POOL: "gpu"},
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": requests, "limits": limits},
                }
            ],
        },
    }


@dataclass(frozen=True)
class TrainingJob:
    """A batch/v1 Job of ``pods`` pods of ``gpus`` cards each; a PodGroup (minMember ``min_member``)
    when ``pods`` > 1, created before the Job as Volcano's job controller creates it."""

    namespace: str
    name: str
    pods: int
    min_member: int
    gpus: int
    cards: str
    priority: str
    seconds: float

    def objects(self) -> list[tuple[str, dict[str, Any]]]:
        annotations = {CARD_NAME: self.cards, COMPLETE_AFTER: f"{self.seconds:.1f}s", QUEUE_NAME: TRAINING}
        out: list[tuple[str, dict[str, Any]]] = []
        if self.pods > 1:
            group = MakePodGroup(self.name, self.namespace).queue(TRAINING).min_member(self.min_member)
            out.append(
                (f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{self.namespace}/podgroups", group.obj())
            )
            annotations[GROUP_NAME] = self.name
        requests = {"cpu": "4", "memory": "32Gi", GPU: str(self.gpus)}
        template = _pod_template(
            priority=self.priority, requests=requests, annotations=annotations, grace=20, restart="Never"
        )
        job = _job(self.name, self.namespace, self.pods, template)
        return [*out, (f"/apis/batch/v1/namespaces/{self.namespace}/jobs", job)]


def _job(name: str, namespace: str, pods: int, template: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 6,  # a preempted pod is replaced
            "ttlSecondsAfterFinished": 30,
            "template": template,
        },
    }


def training_job(serial: int, rng: random.Random, scale: Scale) -> TrainingJob:
    namespace = TEAM_A if rng.random() < 0.55 else TEAM_B
    shape = rng.random()
    if shape < 0.35:
        pods, min_member = 1, 1
    elif shape < 0.8:
        pods = rng.choice((2, 3, 4))
        min_member = pods
    else:  # elastic: half its pods are enough to start; the rest can be taken back
        pods = 4
        min_member = 2
    gpus = rng.choice((1, 2, 4, 8)) if pods == 1 else rng.choice((1, 2, 2, 4))
    cards = rng.choice((A100, f"{A100}|{H100}", f"{A100}|{H100}", H100))
    priority = "training-high" if rng.random() < 0.1 else "training"
    return TrainingJob(
        namespace,
        f"train-{serial}",
        pods,
        min_member,
        gpus,
        cards,
        priority,
        scale.seconds(rng.uniform(20, 120)),
    )


def etl_job(serial: int, rng: random.Random, scale: Scale) -> tuple[str, dict[str, Any]]:
    cpu = rng.choice((2, 4, 6, 8))
    annotations = {COMPLETE_AFTER: f"{scale.seconds(rng.uniform(5, 30)):.1f}s"}
    template = _pod_template(
        priority="etl",
        requests={"cpu": str(cpu), "memory": f"{2 * cpu}Gi"},
        annotations=annotations,
        grace=0,
        restart="Never",
    )
    name = f"etl-{serial}"
    return f"/apis/batch/v1/namespaces/{ETL}/jobs", _job(name, ETL, rng.choice((1, 1, 2)), template)


def notebook_pod(serial: int, rng: random.Random) -> dict[str, Any]:
    tflops = rng.choice((50, 100, 150))
    annotations = {
        CARD_NAME: A100,
        QUEUE_NAME: INTERACTIVE,
        f"{TF}tflops-request": str(tflops),
        f"{TF}tflops-limit": str(tflops + 50),
        f"{TF}vram-request": "16Gi",
        f"{TF}vram-limit": "24Gi",
    }
    template = _pod_template(
        priority="notebook",
        requests={"cpu": "2", "memory": "8Gi", GPU: "1"},
        annotations=annotations,
        grace=30,
        restart="Always",
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"nb-{serial}", "namespace": NOTEBOOKS} | template["metadata"],
        "spec": template["spec"],
    }


def deployment(index: int, replicas: int, gpus: int) -> dict[str, Any]:
    name = f"svc-{index}"
    annotations = {CARD_NAME: f"{A100}|{H100}", QUEUE_NAME: INFERENCE}
    template = _pod_template(
        priority="serving",
        requests={"cpu": "4", "memory": "16Gi", GPU: str(gpus)},
        annotations=annotations,
        grace=15,
        restart="Always",
    )
    template["metadata"]["labels"] = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": SERVE},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template},
    }
