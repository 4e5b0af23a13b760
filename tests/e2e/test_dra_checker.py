"""DRA under an independent checker (issue 26 "Done when"), on the real control plane with
kube-controller-manager's resource-claim-controller: the workload of :mod:`tests.e2e.dra_workload`
(whole GPUs of two types by selector, ``firstAvailable``, MIG partitions over shared counters, shares of
a GPU by consumable capacity, a claim shared by two pods), more than the devices can hold.

* through kube-scheduler 1.36: the checker (:mod:`tests.e2e.dra_checker`, its own CEL library) finds
  nothing wrong: it accepts what the reference does;
* through gpuq: the same checks pass, and the workload's tensor-fusion pods (placed by gpuq's GPUShare
  on shared device-plugin GPUs: a gpuq feature, so the kube-scheduler run leaves them out; its device
  checks are the same) over-share no GPU (:func:`~tests.e2e.dra_checker.gpu_share_violations`, from
  their ``tensor-fusion.ai/gpu-ids``);
* through gpuq under a Queue's card quotas and the namespace's GPUResourceQuota: the checker's own
  recount of the quotas (:func:`~tests.e2e.dra_checker.quota_violations`, and for the GPUResourceQuota's
  TFLOPS, VRAM and workers with the tensor-fusion pods :func:`~tests.e2e.dra_checker.gpu_quota_violations`)
  finds none exceeded;
* gpuq killed with SIGKILL mid-burst, then started again: it rebuilds its ledger from the claims and
  finishes the burst; no device is allocated twice and every claim's allocation matches its pod's node.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.cluster_fixtures import Cluster, SchedulerFactory, eventually, node_of, scheduled_condition
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.dra_checker import (
    QUEUE_NAME,
    extended_violations,
    gpu_quota_violations,
    gpu_share_violations,
    quota_violations,
    violations,
)
from tests.e2e.dra_workload import (
    DRA,
    POD_COUNT,
    RUN_LABEL,
    TF_LABELS,
    TF_NODE,
    TF_PODS,
    TF_ROLE,
    Workload,
    tf_pods,
)
from tests.testing.builders import MakeGPUResourceQuota, MakeQueue

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
run_scheduler = fixtures.run_scheduler
NODE = {"cpu": "8", "memory": "16Gi", "pods": "110"}


@pytest.fixture(scope="module")
def claim_controller(control_plane: ControlPlane) -> Iterator[None]:
    stop = control_plane.start_controller_manager(
        ("resource-claim-controller",), extra_args=("--kube-api-qps=1000", "--kube-api-burst=1000")
    )
    yield
    stop()


async def _setup(cluster: Cluster, tag: str, scheduler: str, *, tensor_fusion: bool = True) -> Workload:
    """The run's nodes, slices, classes, templates and shared claim (no pods yet); with
    ``tensor_fusion``, the node of the tensor-fusion pods' shared GPUs too."""
    run = f"{cluster.test_id}-{tag}"
    workload = Workload(run, cluster.namespace, scheduler)
    nodes = {
        role: await cluster.node(f"{tag}-{role}", NODE, labels={RUN_LABEL: run})
        for role in workload.node_names()
    }
    for obj in workload.classes():
        await cluster.create(obj, f"{DRA}/deviceclasses")
    for obj in workload.slices(nodes):
        await cluster.create(obj, f"{DRA}/resourceslices")
    ns = cluster.namespace
    for obj in workload.templates():
        await cluster.create(obj, f"{DRA}/namespaces/{ns}/resourceclaimtemplates")
    await cluster.create(workload.shared_claim(), f"{DRA}/namespaces/{ns}/resourceclaims")
    if tensor_fusion:
        await cluster.node(f"{tag}-{TF_ROLE}", TF_NODE, labels={RUN_LABEL: run, **TF_LABELS})
    return workload


async def _create_pods(
    cluster: Cluster,
    workload: Workload,
    *,
    tensor_fusion: bool = True,
    annotations: dict[str, str] | None = None,
) -> None:
    def body(name: str) -> dict[str, Any]:
        return cluster.pod_body(name, {"cpu": "100m"}, scheduler=workload.scheduler, annotations=annotations)

    pods = workload.pods(body) + (tf_pods(workload, body) if tensor_fusion else [])
    path = f"/api/v1/namespaces/{cluster.namespace}/pods"
    await asyncio.gather(*(cluster.request("POST", path, pod) for pod in pods))


async def _run_pods(cluster: Cluster, workload: Workload) -> dict[str, dict[str, Any]]:
    pods = await cluster.pods()
    return {name: pod for name, pod in pods.items() if name.startswith(f"{workload.run}-")}


async def _settled(
    cluster: Cluster, workload: Workload, log: Callable[[], str], *, tensor_fusion: bool = True
) -> dict[str, dict[str, Any]]:
    """Every pod bound or reported unschedulable, and the bound ones unchanged for 3 seconds."""
    count = POD_COUNT + (TF_PODS if tensor_fusion else 0)
    last: list[tuple[float, frozenset[str]]] = []

    async def probe() -> dict[str, dict[str, Any]] | None:
        pods = await _run_pods(cluster, workload)
        if len(pods) != count:
            return None
        bound = frozenset(n for n, p in pods.items() if node_of(p))
        decided = all(
            node_of(p) or (scheduled_condition(p) or {}).get("status") == "False" for p in pods.values()
        )
        now = time.monotonic()
        if not last or last[-1][1] != bound:
            last.append((now, bound))
            return None
        return pods if decided and now - last[-1][0] >= 3 else None

    return await eventually(probe, 120, "the burst settled", log)


async def _check(
    cluster: Cluster, workload: Workload, own_claims: bool = False
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The checker over the run's objects (``own_claims``: only the claims named after the run, when
    another run shares the namespace)."""
    ns = cluster.namespace
    slices = [
        s
        for s in (await cluster.get(f"{DRA}/resourceslices"))["items"]
        if s["spec"]["driver"] == workload.driver
    ]
    classes = [
        c
        for c in (await cluster.get(f"{DRA}/deviceclasses"))["items"]
        if c["metadata"]["name"].startswith(workload.run)
    ]
    claims = (await cluster.get(f"{DRA}/namespaces/{ns}/resourceclaims"))["items"]
    if own_claims:
        claims = [c for c in claims if c["metadata"]["name"].startswith(f"{workload.run}-")]
    pods = await _run_pods(cluster, workload)
    nodes = (await cluster.get(f"/api/v1/nodes?labelSelector={RUN_LABEL}={workload.run}"))["items"]
    problems = violations(slices, classes, claims, list(pods.values()))
    problems += extended_violations(classes, claims, list(pods.values()))
    return problems + gpu_share_violations(nodes, list(pods.values())), pods


def _placed(pods: dict[str, dict[str, Any]], workload: Workload) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name, pod in pods.items():
        if node_of(pod):
            kind = name.removeprefix(f"{workload.run}-").rsplit("-", 1)[0]
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def _expect_full_use(placed: dict[str, int], *, tensor_fusion: bool = True) -> None:
    """As many pods as the devices hold: the 4 whole GPUs (2 H100, 2 A100) all used by h100, any and the
    team's one claim (whose two pods go together: the second uses the first's allocation), 4 shares of
    20Gi in 80Gi, and MIG partitions within 7 slices (at least one placed); with ``tensor_fusion``, 4
    tensor-fusion pods on the two shared GPUs (two per GPU by VRAM)."""
    assert placed.get("tf", 0) == (4 if tensor_fusion else 0), placed
    team = placed.get("team", 0)
    assert team in (0, 2), placed
    # (the extended-resource pods take whole GPUs too, through their implicit claims)
    assert placed.get("h100", 0) + placed.get("any", 0) + (team > 0) + placed.get("ext", 0) == 4, placed
    assert placed.get("share20") == 4, placed
    assert placed.get("mig1g", 0) + placed.get("mig3g", 0) >= 1, placed


async def test_kube_scheduler_passes_the_checker(
    cluster: Cluster, control_plane: ControlPlane, claim_controller: None
) -> None:
    name = f"kube-{cluster.test_id}"
    workload = await _setup(cluster, "k", name, tensor_fusion=False)
    stop = control_plane.start_kube_scheduler(name)
    try:
        await _create_pods(cluster, workload, tensor_fusion=False)
        await _settled(cluster, workload, lambda: "", tensor_fusion=False)
        problems, pods = await _check(cluster, workload)
    finally:
        stop()
    assert problems == []
    _expect_full_use(_placed(pods, workload), tensor_fusion=False)


async def test_gpuq_passes_the_checker(
    cluster: Cluster, run_scheduler: SchedulerFactory, claim_controller: None
) -> None:
    name = f"gpuq-{cluster.test_id}"
    workload = await _setup(cluster, "g", name)
    scheduler = run_scheduler(name)
    await scheduler.wait_ready()
    await _create_pods(cluster, workload)
    await _settled(cluster, workload, scheduler.log)
    problems, pods = await _check(cluster, workload)
    assert problems == [], scheduler.log()
    _expect_full_use(_placed(pods, workload))
    assert scheduler.terminate() == 0, scheduler.log()


async def test_gpuq_killed_mid_burst_allocates_no_device_twice(
    cluster: Cluster, run_scheduler: SchedulerFactory, claim_controller: None
) -> None:
    name = f"gpuq-{cluster.test_id}"
    workload = await _setup(cluster, "x", name)
    first = run_scheduler(name)
    await first.wait_ready()
    await _create_pods(cluster, workload)

    async def some_bound() -> int | None:
        bound = sum(1 for p in (await _run_pods(cluster, workload)).values() if node_of(p))
        return bound if bound >= 3 else None

    seen = await eventually(some_bound, 60, "the burst under way", first.log)
    first.kill()  # SIGKILL: whatever was in flight (a claim written, its pod not bound yet) stays
    assert seen < POD_COUNT
    second = run_scheduler(name)
    await second.wait_ready()
    await _settled(cluster, workload, second.log)
    problems, pods = await _check(cluster, workload)
    assert problems == [], second.log()
    _expect_full_use(_placed(pods, workload))
    assert second.terminate() == 0, second.log()


QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"
# The workload's devices under card quotas that bind: 2 H100 cards for whole H100s, firstAvailable and
# the shares (a 20Gi share of the 80Gi GPU is a quarter card), 1 A100, 3 of the 7 1g partitions.
CARD_QUOTA = {
    "NVIDIA-H100": 2,
    "NVIDIA-A100": 1,
    "NVIDIA-H100/mig-1g.10gb-mixed": 3,
    "NVIDIA-H100/mig-3g.40gb-mixed": 1,
}


async def test_gpuq_keeps_queue_card_quotas_and_the_gpu_resource_quota(
    cluster: Cluster, run_scheduler: SchedulerFactory, claim_controller: None
) -> None:
    """The workload's pods in one Queue with card quotas, their namespace under a GPUResourceQuota, and
    gpuq killed with SIGKILL mid-burst: the next one rebuilds the charges from the claims'
    ``status.allocation`` (else it would admit past the quotas). The checker recounts the quotas from
    the API (every claim once, its devices' card types and VRAM) and finds none exceeded, the device
    rules still hold, and pods the quotas hold back say which quota."""
    name = f"gpuq-{cluster.test_id}"
    workload = await _setup(cluster, "q", name)
    queue = workload.run
    await cluster.create(
        MakeQueue(queue).card_quota(json.dumps(CARD_QUOTA)).capability(cpu="100", memory="1Ti").obj(), QUEUES
    )
    ns = cluster.namespace
    # TFLOPS: the claims' A100 (312, the Queue's one A100 card; gpuq knows no "NVIDIA H100" specs, so
    # those devices carry no TFLOPS) and the tensor-fusion pods' 100 each; VRAM and workers room for all.
    totals = {"requests": {"tflops": "562", "vram": "420Gi"}, "maxWorkers": 30}
    vram = MakeGPUResourceQuota("devices", ns).total(**totals).obj()
    await cluster.create(vram, f"/apis/tensor-fusion.ai/v1/namespaces/{ns}/gpuresourcequotas")
    first = run_scheduler(name)
    await first.wait_ready()

    await _create_pods(cluster, workload, annotations={QUEUE_NAME: queue})

    async def some_bound() -> int | None:
        bound = sum(1 for p in (await _run_pods(cluster, workload)).values() if node_of(p))
        return bound if bound >= 2 else None

    await eventually(some_bound, 60, "the burst under way", first.log)
    first.kill()
    scheduler = run_scheduler(name)
    await scheduler.wait_ready()
    await _settled(cluster, workload, scheduler.log)
    problems, pods = await _check(cluster, workload)
    assert problems == [], scheduler.log()
    slices = (await cluster.get(f"{DRA}/resourceslices"))["items"]
    claims = (await cluster.get(f"{DRA}/namespaces/{ns}/resourceclaims"))["items"]
    queues = [q for q in (await cluster.get(QUEUES))["items"] if q["metadata"]["name"] == queue]
    quotas = (await cluster.get(f"/apis/tensor-fusion.ai/v1/namespaces/{ns}/gpuresourcequotas"))["items"]
    assert quota_violations(slices, claims, list(pods.values()), queues, quotas) == [], scheduler.log()
    device_tflops = {"NVIDIA A100": 312.0}  # the specs gpuq charges ("NVIDIA H100" is no product it knows)
    assert gpu_quota_violations(slices, claims, list(pods.values()), quotas, device_tflops) == [], (
        scheduler.log()
    )
    placed = _placed(pods, workload)
    assert placed.get("mig1g", 0) <= 3 and placed.get("mig3g", 0) <= 1, placed
    assert 1 <= placed.get("tf", 0) <= 4, placed  # 250 TFLOPS at least beside the A100; the GPUs hold 4
    # Workers are pods (each pod of the workload has claims, an implicit claim for its extended resource
    # or tensor-fusion's requests; the team's claim shared by two pods is two workers): gpuq's status
    # agrees with the recount.
    bound = [name for name, p in pods.items() if node_of(p)]
    workers = len(bound)

    seen: dict[str, Any] = {}

    async def used_workers() -> int | None:
        obj = await cluster.get(f"/apis/tensor-fusion.ai/v1/namespaces/{ns}/gpuresourcequotas/devices")
        seen["status"] = obj.get("status")
        found = ((obj.get("status") or {}).get("used") or {}).get("workers")
        return found if found == workers else None

    await eventually(
        used_workers,
        30,
        f"GPUResourceQuota status.used.workers == {workers}",
        lambda: f"status: {seen.get('status')}\nbound: {sorted(bound)}\n{scheduler.log()}",
    )
    held = [
        str((scheduled_condition(p) or {}).get("message"))
        for p in pods.values()
        if not node_of(p) and "quota exceeded in Queue/" in str((scheduled_condition(p) or {}).get("message"))
    ]
    assert held, {n: (scheduled_condition(p) or {}).get("message") for n, p in pods.items() if not node_of(p)}
    assert scheduler.terminate() == 0, scheduler.log()


# -- extended resources backed by DRA, side by side with kube-scheduler ---------------------------------
async def _extended_decisions(cluster: Cluster, workload: Workload, log: Callable[[], str]) -> list[Any]:
    """The run's extended-resource pods bound, checked, and what each got: its implicit claim's
    requests and annotation and the pod's request mappings (the run's prefix taken out)."""
    ns = cluster.namespace
    path = f"/api/v1/namespaces/{ns}/pods"

    def body(name: str) -> dict[str, Any]:
        return cluster.pod_body(name, {"cpu": "100m"}, scheduler=workload.scheduler)

    pods = workload.extended_pods(body)
    await asyncio.gather(*(cluster.request("POST", path, pod) for pod in pods))
    names = {p["metadata"]["name"] for p in pods}

    async def bound() -> dict[str, dict[str, Any]] | None:
        found = {n: p for n, p in (await cluster.pods()).items() if n in names}
        done = all(
            node_of(p) and (p.get("status") or {}).get("extendedResourceClaimStatus") for p in found.values()
        )
        return found if len(found) == len(names) and done else None

    found = await eventually(bound, 60, "the extended-resource pods bound", log)
    problems, _ = await _check(cluster, workload, own_claims=True)
    assert problems == [], log()
    claims = {_name_of(c): c for c in (await cluster.get(f"{DRA}/namespaces/{ns}/resourceclaims"))["items"]}
    out = []
    for name in sorted(found):
        status = found[name]["status"]["extendedResourceClaimStatus"]
        claim = claims[status["resourceClaimName"]]
        text = json.dumps(
            [
                status["requestMappings"],
                claim["spec"]["devices"]["requests"],
                claim["metadata"]["annotations"],
                len(claim["status"]["allocation"]["devices"]["results"]),
            ]
        )
        out.append(json.loads(text.replace(workload.run, "<run>")))
    return out


def _name_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


async def test_extended_resource_pods_get_the_same_implicit_claims_as_from_kube_scheduler(
    cluster: Cluster,
    control_plane: ControlPlane,
    run_scheduler: SchedulerFactory,
    claim_controller: None,
) -> None:
    """The same extended-resource pods through kube-scheduler 1.36 and through gpuq, each on its own
    nodes: both bound through an implicit claim the checker accepts, with the same requests, request
    mappings, annotation and device count (the claim's name aside: upstream's is generated)."""
    kube_name = f"kube-{cluster.test_id}"
    kube_run = await _setup(cluster, "ke", kube_name)
    stop = control_plane.start_kube_scheduler(kube_name)
    try:
        reference = await _extended_decisions(cluster, kube_run, lambda: "")
    finally:
        stop()
    name = f"gpuq-{cluster.test_id}"
    gpuq_run = await _setup(cluster, "ge", name)
    scheduler = run_scheduler(name)
    await scheduler.wait_ready()
    ours = await _extended_decisions(cluster, gpuq_run, scheduler.log)
    assert ours == reference, scheduler.log()
    assert scheduler.terminate() == 0, scheduler.log()
