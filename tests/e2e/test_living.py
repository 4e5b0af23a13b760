"""Pods that live (issue 28), on a cluster of kwok nodes with the controllers of a real cluster
(:mod:`tests.e2e.living.cluster`): gpuq's pods run, finish and terminate, and what a quota system
exists for is checked from the API as it happens.

- a Job's pods run, succeed and give their quota back; the next pod waiting in that quota binds within
  2 s of the quota's return;
- a preemption victim with a 30 s grace period holds its node and its quota until it is gone; its
  preemptor is nominated (``status.nominatedNodeName``), binds only after, is preempted for once, and
  the quota recount never exceeds the limit in between;
- a PodGroup goes Pending -> Inqueue -> Running -> Completed, and its Queue counts it.

The cluster is started once for this module (about 5 s); each test has its nodes, namespace and
``gpuq scheduler`` of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.api_client import ApiClient

from gpuq_k8s.common.kube.status import call
from tests.e2e.cluster_fixtures import SchedulerFactory, SchedulerProcess, eventually, scheduler_starter
from tests.e2e.controlplane.harness import ControlPlaneError, dns_label
from tests.e2e.living.cluster import COMPLETE_AFTER, LivingCluster, add_node, gpu_pod, request, wait_ready
from tests.testing.builders import MakeElasticQuota, MakePodGroup, MakePriorityClass, MakeQueue

pytestmark = pytest.mark.e2e

GPU = "nvidia.com/gpu"
GROUP_NAME = "scheduling.k8s.io/group-name"
QUEUE_NAME = "scheduling.volcano.sh/queue-name"
NODE_LABEL = "gpuq.e2e/living-test"


@pytest.fixture(scope="module")
def living() -> Iterator[LivingCluster]:
    cluster = LivingCluster()
    try:
        cluster.start()
    except ControlPlaneError as error:
        pytest.fail(f"living cluster unavailable: {error}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest_asyncio.fixture
async def api(living: LivingCluster) -> AsyncIterator[ApiClient]:
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(living.plane.kubeconfig), client_configuration=configuration
    )
    async with ApiClient(configuration=configuration) as api_client:
        yield api_client


@pytest.fixture
def start_scheduler(living: LivingCluster, tmp_path: Path) -> Iterator[SchedulerFactory]:
    started: list[SchedulerProcess] = []
    yield scheduler_starter(living.plane.kubeconfig, tmp_path, started)
    for process in started:
        process.terminate()


class Scene:
    """One test's namespace, nodes (labelled for it: its pods select them) and scheduler name."""

    def __init__(self, api: ApiClient, name: str) -> None:
        self.api = api
        self.id = dns_label(name, max_length=30)
        self.namespace = self.id
        self.scheduler = f"gpuq-{self.id}"

    async def setup(self, nodes: Mapping[str, Mapping[str, str]]) -> None:
        await request(self.api, "POST", "/api/v1/namespaces", {"metadata": {"name": self.namespace}})
        names = []
        for suffix, allocatable in nodes.items():
            names.append(f"{self.id}-{suffix}")
            await add_node(self.api, names[-1], allocatable, {NODE_LABEL: self.id})
        await wait_ready(self.api, names)
        # The serviceaccount controller makes the namespace's default ServiceAccount pods need.
        await eventually(self._has_service_account, 30, f"ServiceAccount {self.namespace}/default")

    async def _has_service_account(self) -> bool:
        reply = await call(self.api, "GET", f"/api/v1/namespaces/{self.namespace}/serviceaccounts/default")
        return reply.ok

    def pod(self, name: str, **options: Any) -> dict[str, Any]:
        pod = gpu_pod(name, self.namespace, scheduler=self.scheduler, **options)
        pod["spec"]["nodeSelector"] = {NODE_LABEL: self.id}
        return pod

    async def create_pod(self, pod: Mapping[str, Any]) -> None:
        await request(self.api, "POST", f"/api/v1/namespaces/{self.namespace}/pods", dict(pod))

    async def pods(self) -> dict[str, dict[str, Any]]:
        listing = (await request(self.api, "GET", f"/api/v1/namespaces/{self.namespace}/pods")).body
        return {p["metadata"]["name"]: p for p in listing.get("items") or ()}

    async def get(self, path: str) -> dict[str, Any]:
        return dict((await request(self.api, "GET", path)).body)

    async def cleanup(self) -> None:
        await call(self.api, "DELETE", f"/api/v1/namespaces/{self.namespace}")
        listing = (await request(self.api, "GET", f"/api/v1/nodes?labelSelector={NODE_LABEL}={self.id}")).body
        for node in listing.get("items") or ():
            await call(self.api, "DELETE", f"/api/v1/nodes/{node['metadata']['name']}")


@pytest_asyncio.fixture
async def test(api: ApiClient, request: pytest.FixtureRequest) -> AsyncIterator[Scene]:
    made = Scene(api, request.node.name.removeprefix("test_"))
    yield made
    await made.cleanup()


def gpus_held(pods: Mapping[str, Mapping[str, Any]]) -> int:
    """The recount: GPUs requested by the pods bound and not finished (terminating ones included:
    they still hold their node's room and their quota)."""
    total = 0
    for pod in pods.values():
        if not (pod.get("spec") or {}).get("nodeName"):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for container in pod["spec"]["containers"]:
            total += int(((container.get("resources") or {}).get("requests") or {}).get(GPU, 0))
    return total


def phase(pod: Mapping[str, Any] | None) -> str:
    return str(((pod or {}).get("status") or {}).get("phase") or "")


async def test_a_jobs_pods_succeed_and_the_next_pod_binds_on_the_quota_they_return(
    test: Scene, start_scheduler: SchedulerFactory
) -> None:
    """A batch/v1 Job of two pods (1 GPU each, running 3 s) fills its namespace's ElasticQuota (max 2
    GPUs) while the node has room for more; a pod created after it waits on the quota. The Job's pods
    run and succeed (kube-controller-manager's job controller sees the Job complete), their quota is
    returned at Succeeded (the pods still exist), and the waiting pod binds within 2 s of that."""
    await test.setup({"n": {"cpu": "16", "memory": "64Gi", "pods": "110", GPU: "8"}})
    ns = test.namespace
    await request(
        test.api,
        "POST",
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/elasticquotas",
        MakeElasticQuota("quota", ns).min({GPU: "2"}).max({GPU: "2"}).obj(),
    )
    template = test.pod("worker", gpus=1, annotations={COMPLETE_AFTER: "3s"})
    template["spec"]["restartPolicy"] = "Never"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": ns},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": template["metadata"]["annotations"]},
                "spec": template["spec"],
            },
        },
    }
    scheduler = start_scheduler(test.scheduler)
    await scheduler.wait_ready()
    await request(test.api, "POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job)

    async def job_pods_running() -> bool:
        pods = await test.pods()
        workers = [p for n, p in pods.items() if n.startswith("train-")]
        return len(workers) == 2 and all(phase(p) == "Running" for p in workers)

    await eventually(job_pods_running, 30, "the Job's two pods running", scheduler.log)
    await test.create_pod(test.pod("next", gpus=1))
    returned_at: float | None = None
    bound_at: float | None = None
    deadline = time.monotonic() + 60
    while bound_at is None and time.monotonic() < deadline:
        pods = await test.pods()
        now = time.monotonic()
        assert gpus_held(pods) <= 2, f"quota recount over its max of 2: {gpus_held(pods)}"
        workers = [p for n, p in pods.items() if n.startswith("train-")]
        bound = bool((pods["next"].get("spec") or {}).get("nodeName"))
        if returned_at is None and any(phase(p) == "Succeeded" for p in workers):
            returned_at = now  # a worker finished: its GPU is back in the quota (the pod still exists)
        assert not bound or returned_at is not None, "bound before any quota came back"
        if bound:
            bound_at = now
        await asyncio.sleep(0.05)
    assert returned_at is not None and bound_at is not None, scheduler.log()
    assert bound_at - returned_at <= 2.0, f"bound {bound_at - returned_at:.2f}s after the quota's return"

    async def both_succeeded() -> bool:
        workers = [p for n, p in (await test.pods()).items() if n.startswith("train-")]
        return len(workers) == 2 and all(phase(p) == "Succeeded" for p in workers)

    # Their quota came back while they still exist (Succeeded, not deleted).
    await eventually(both_succeeded, 30, "both workers Succeeded and still there", scheduler.log)

    # The Job controller sees its pods succeed: the Job completes.
    async def job_complete() -> dict[str, Any] | None:
        done = await test.get(f"/apis/batch/v1/namespaces/{ns}/jobs/train")
        status = done.get("status") or {}
        return status if status.get("succeeded") == 2 else None

    await eventually(
        job_complete, 30, "the Job's status.succeeded 2 (kube-controller-manager)", scheduler.log
    )

    async def used_is_one() -> dict[str, Any] | None:
        quota = await test.get(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/elasticquotas/quota")
        used = (quota.get("status") or {}).get("used") or {}
        return used if used.get(GPU) == "1" else None

    await eventually(used_is_one, 10, "ElasticQuota status.used of 1 GPU: the next pod only", scheduler.log)


async def test_a_victim_with_a_grace_period_holds_its_quota_until_it_is_gone(
    test: Scene, start_scheduler: SchedulerFactory
) -> None:
    """A node of 2 GPUs and an ElasticQuota of max 2 GPUs, both full with two low-priority pods that
    take 30 s to terminate. A high-priority pod preempts one of them (ElasticQuota preemption within
    the namespace): the victim is Terminating for its grace period, still holding its GPU; the
    preemptor is nominated to the node and stays unbound until the victim is gone, then binds; the
    other low pod is never evicted (no second preemption), a lower-priority pod created meanwhile
    does not take the room, and the recount from the API never exceeds 2 GPUs."""
    await test.setup({"n": {"cpu": "16", "memory": "64Gi", "pods": "110", GPU: "2"}})
    ns = test.namespace
    for name, value in (("low", 10), ("high", 1000)):
        klass = MakePriorityClass(f"{test.id}-{name}", value).obj()
        await request(test.api, "POST", "/apis/scheduling.k8s.io/v1/priorityclasses", klass)
    await request(
        test.api,
        "POST",
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/elasticquotas",
        MakeElasticQuota("quota", ns).min({GPU: "2"}).max({GPU: "2"}).obj(),
    )
    scheduler = start_scheduler(test.scheduler)
    await scheduler.wait_ready()
    for name in ("low-a", "low-b"):
        await test.create_pod(test.pod(name, gpus=1, grace=30, priority_class=f"{test.id}-low"))

    async def both_running() -> bool:
        pods = await test.pods()
        return all(phase(pods.get(n)) == "Running" for n in ("low-a", "low-b"))

    await eventually(both_running, 30, "the two low pods running", scheduler.log)
    await test.create_pod(test.pod("high", gpus=1, priority_class=f"{test.id}-high"))
    node = f"{test.id}-n"
    terminating: str | None = None
    nominated_seen = False
    sneaked = False
    gone_at: float | None = None
    bound_at: float | None = None
    deadline = time.monotonic() + 90
    while bound_at is None and time.monotonic() < deadline:
        pods = await test.pods()
        now = time.monotonic()
        assert gpus_held(pods) <= 2, f"quota recount over its max of 2: {gpus_held(pods)}"
        deleting = sorted(n for n, p in pods.items() if p["metadata"].get("deletionTimestamp"))
        assert len(deleting) <= 1, f"preempted twice: {deleting}"
        if deleting and terminating is None:
            terminating = deleting[0]
        high = pods["high"]
        if (high.get("status") or {}).get("nominatedNodeName") == node:
            nominated_seen = True
        if terminating is not None and not sneaked:
            # Created while the victim terminates: lower priority, it must not take the room.
            await test.create_pod(test.pod("sneak", gpus=1, priority_class=f"{test.id}-low"))
            sneaked = True
        if terminating is not None and terminating not in pods and gone_at is None:
            gone_at = now
        if high["spec"].get("nodeName"):
            bound_at = now
            assert terminating is not None and terminating not in pods, "bound before its victim left"
        await asyncio.sleep(0.1)
    assert terminating is not None, f"no victim was evicted\n{scheduler.log()}"
    assert nominated_seen, f"status.nominatedNodeName never showed {node}\n{scheduler.log()}"
    assert gone_at is not None and bound_at is not None, scheduler.log()
    assert bound_at - gone_at <= 5.0, f"bound {bound_at - gone_at:.1f}s after its victim left"
    pods = await test.pods()
    survivor = "low-b" if terminating == "low-a" else "low-a"
    assert phase(pods[survivor]) == "Running" and not pods[survivor]["metadata"].get("deletionTimestamp")
    assert not pods["sneak"]["spec"].get("nodeName"), "the lower-priority pod took the preemptor's room"


async def test_a_podgroup_goes_pending_inqueue_running_completed(
    test: Scene, start_scheduler: SchedulerFactory
) -> None:
    """A PodGroup (minMember 2) created before its pods, as Volcano's job controller creates them: it
    is admitted (Inqueue), its two pods run (Running, status.running 2), succeed after 4 s
    (Completed, status.succeeded 2), and its Queue counts it in status.running, then status.completed."""
    await test.setup({"n": {"cpu": "16", "memory": "64Gi", "pods": "110", GPU: "4"}})
    ns = test.namespace
    queue = f"{test.id}-q"
    made = MakeQueue(queue).weight(1).capability(cpu="8", memory="16Gi").obj()
    await request(test.api, "POST", "/apis/scheduling.volcano.sh/v1beta1/queues", made)
    group = MakePodGroup("pg", ns).queue(queue).min_member(2).obj()
    path = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups/pg"
    await request(test.api, "POST", path.rsplit("/", 1)[0], group)
    scheduler = start_scheduler(test.scheduler)
    await scheduler.wait_ready()
    phases: list[str] = []
    statuses: dict[str, dict[str, Any]] = {}
    queue_counts: dict[str, dict[str, Any]] = {}
    created = False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not phases or phases[-1] != "Completed"):
        status = (await test.get(path)).get("status") or {}
        current = str(status.get("phase") or "Pending")
        if not phases or phases[-1] != current:
            phases.append(current)
            statuses[current] = status
            queue_status = (await test.get(f"/apis/scheduling.volcano.sh/v1beta1/queues/{queue}")).get(
                "status"
            )
            queue_counts[current] = dict(queue_status or {})
        if current == "Inqueue" and not created:
            for i in range(2):
                pod = test.pod(f"m-{i}", annotations={GROUP_NAME: "pg", COMPLETE_AFTER: "4s"})
                pod["spec"]["restartPolicy"] = "Never"
                await test.create_pod(pod)
            created = True
        await asyncio.sleep(0.05)
    assert phases == ["Pending", "Inqueue", "Running", "Completed"], f"{phases}\n{scheduler.log()}"
    assert statuses["Running"].get("running") in (0, 1, 2)  # the pods turn Running one by one
    assert statuses["Completed"].get("succeeded") == 2 and statuses["Completed"].get("running") == 0

    async def counted(field: str) -> dict[str, Any] | None:
        status = (await test.get(f"/apis/scheduling.volcano.sh/v1beta1/queues/{queue}")).get("status") or {}
        return status if status.get(field) == 1 else None

    # Counted per phase as Volcano's queue controller counts (the write follows within a flush).
    assert await eventually(lambda: counted("completed"), 10, "Queue status.completed 1", scheduler.log)
    running = await test.pods()
    assert all(phase(p) == "Succeeded" for p in running.values()), [phase(p) for p in running.values()]
