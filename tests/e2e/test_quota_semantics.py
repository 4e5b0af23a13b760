"""Issue 25 on the real control plane: quota semantics where real clusters go.

- **Autoscaling.** The chart's webhook (``gpuq webhook`` as deploy/ runs it, over TLS, registered with
  the apiserver) and ``gpuq scheduler``, both on the shipped configuration (capacity-card's
  ``autoscaledCardTypes`` defaults to true). No node offers NVIDIA-H100; a pod asking for it, whose
  queue has H100 quota, is admitted and waits ("waits for a node offering NVIDIA-H100"); a node with
  H100 cards joins (as a node autoscaler would add it) and the pod binds there. A pod asking more H100
  than the quota holds is denied: only the quota makes it never.
- **Gangs.** Two pods of a 3 x 4-GPU gang fit an 8-GPU node and wait in Permit; the third finds no
  node and no sibling is left to try, so the two are rolled back at once, well before the gang's
  Permit timeout (before, they held the node until it), and a 2 x 2-GPU gang created after binds
  within 5 s; the big gang never binds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuq_k8s.common.kube.status import call
from gpuq_k8s.common.model.annotations import CARD_NAME, GROUP_NAME, QUEUE_NAME
from gpuq_k8s.common.model.config import DEFAULT_CONFIG_YAML
from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.cluster_fixtures import Cluster, SchedulerFactory, eventually, node_of, pending_message
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.deployed_webhook import DeployedWebhook
from tests.testing.builders import MakePodGroup, MakeQueue

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
run_scheduler = fixtures.run_scheduler

GPU = "nvidia.com/gpu"
QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"
DENIED = 'admission webhook "validate.gpuq.io" denied the request'


def _gpu_node(product: str) -> dict[str, str]:
    return {"nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": "81920"}


SCHEDULER = "gpuq-e2e-autoscaled"


@pytest.fixture
def webhook(control_plane: ControlPlane, tmp_path: Path) -> Iterator[DeployedWebhook]:
    """The chart's webhook serving, its pod rules applied to the pods of the test's own scheduler name
    (each e2e test schedules under its own name)."""
    deployed = DeployedWebhook(control_plane, tmp_path, extra_args=(f"--scheduler-name={SCHEDULER}",))
    try:
        deployed.install()
        deployed.start()
        deployed.wait_serving()
        yield deployed
    finally:
        deployed.remove()
        deployed.reset_certificates()


async def test_a_card_type_a_node_autoscaler_adds_is_admitted_waits_and_binds(
    cluster: Cluster, run_scheduler: SchedulerFactory, webhook: DeployedWebhook
) -> None:
    await cluster.node("a100", fixtures.GPU_NODE, labels=_gpu_node("NVIDIA-A100"))
    queue = f"{cluster.test_id}-q"
    quota = (
        MakeQueue(queue)
        .card_quota('{"NVIDIA-A100": 8, "NVIDIA-H100": 4}')
        .capability(cpu="100", memory="1Ti")
    )
    await cluster.create(quota.obj(), QUEUES)
    scheduler = run_scheduler(SCHEDULER, DEFAULT_CONFIG_YAML)
    await scheduler.wait_ready()

    def h100_pod(name: str, gpus: str) -> dict[str, Any]:
        return cluster.pod_body(
            name,
            {"cpu": "1", GPU: gpus},
            limits={GPU: gpus},
            scheduler=SCHEDULER,
            annotations={CARD_NAME: "NVIDIA-H100", QUEUE_NAME: queue},
        )

    # Only the quota makes a pod never: 6 H100 of a quota of 4 is denied by the real webhook.
    path = f"/api/v1/namespaces/{cluster.namespace}/pods"
    too_many = await call(cluster.api, "POST", path, h100_pod("too-many", "6"))
    assert not too_many.ok and DENIED in too_many.message, too_many.message
    assert "can never fit under the current quota: NVIDIA-H100 limit 4 would have to be at least 6" in (
        too_many.message
    )
    # No node offers NVIDIA-H100, yet the queue has quota for it: admitted.
    created = await call(cluster.api, "POST", path, h100_pod("train", "2"))
    assert created.ok, f"the webhook refused a pod a node autoscaler could serve: {created.message}"

    async def waits() -> str | None:
        return await pending_message(cluster, "train", "waits for a node offering NVIDIA-H100")

    message = await eventually(waits, 30, "the pod waiting for an H100 node", scheduler.log)
    assert "can never fit" not in message
    # The node a node autoscaler would add for it.
    h100 = await cluster.node("h100", fixtures.GPU_NODE, labels=_gpu_node("NVIDIA-H100"))

    async def bound() -> str | None:
        return node_of((await cluster.pods()).get("train") or {}) or None

    assert await eventually(bound, 30, "the pod bound to the new H100 node", scheduler.log) == h100


GANG_SCHEDULER = "gpuq-e2e-gangs"
PERMIT_TIMEOUT = 30  # seconds a gang may hold its reservations (the gang argument): not waited for


def _gang_config() -> str:
    config = DEFAULT_CONFIG_YAML.replace(
        "  - name: gang\n", f"  - name: gang\n    arguments: {{permitWaitingTimeSeconds: {PERMIT_TIMEOUT}}}\n"
    )
    assert config != DEFAULT_CONFIG_YAML
    return config


async def test_the_gang_that_fits_binds_within_5_s_of_the_big_gangs_rollback(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    await cluster.node("gpu", fixtures.GPU_NODE, labels=_gpu_node("NVIDIA-A100"))
    ns = cluster.namespace
    groups = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups"
    scheduler = run_scheduler(GANG_SCHEDULER, _gang_config())
    await scheduler.wait_ready()

    async def gang(name: str, size: int, gpus: str) -> list[str]:
        await cluster.create(MakePodGroup(name, ns).min_member(size).obj(), groups)
        names = [f"{name}-{i}" for i in range(size)]
        for pod in names:
            await cluster.pod(
                pod,
                {"cpu": "1", GPU: gpus},
                limits={GPU: gpus},
                scheduler=GANG_SCHEDULER,
                annotations={GROUP_NAME: name},
            )
        return names

    big = await gang("big", 3, "4")
    created = time.monotonic()

    async def rolled_back() -> float | None:
        # Two of the big gang's pods fit the node's 8 GPUs and wait in Permit; the third finds no room
        # and no sibling is left to try: the two are rolled back then, not at the Permit timeout.
        for pod in big:
            if await pending_message(cluster, pod, "PodGroup") and await pending_message(
                cluster, pod, "could be placed"
            ):
                return time.monotonic()
        return None

    rollback = await eventually(rolled_back, 30, "the big gang rolled back", scheduler.log)
    assert rollback - created < PERMIT_TIMEOUT, f"rolled back {rollback - created:.1f} s after its pods came"
    small = await gang("small", 2, "2")
    small_created = time.monotonic()

    async def small_bound() -> float | None:
        pods = await cluster.pods()
        return time.monotonic() if all(node_of(pods.get(p) or {}) for p in small) else None

    bound = await eventually(small_bound, 10, "the small gang bound", scheduler.log)
    assert bound - small_created <= 5.0, f"the small gang bound {bound - small_created:.1f} s after its pods"
    await asyncio.sleep(3)  # the big gang retries (4 GPUs left: one pod's room) and never binds
    pods = await cluster.pods()
    assert not any(node_of(pods[p]) for p in big)
