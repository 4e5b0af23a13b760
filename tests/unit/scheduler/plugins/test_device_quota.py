"""gpuq's quota rules over DRA devices (docs/design.md "Quota over devices"), as table tests on the
in-memory scheduler over the NVIDIA-style cluster of ``tests/fixtures/dra/cluster/nvidia.yaml``
(two whole H100s and two whole A100s, a MIG-partitioned A100, an H100 shared by memory capacity):
Queue card quotas count each device under its card type, charged atomically with the allocation at
Reserve, once per claim, never for admin access, the type actually allocated for ``firstAvailable``
(the next subrequest when the first's card type has no quota left), and rebuilt from the claims'
``status.allocation`` after a restart.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.capacity_card.engine import CapacityCard
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins.capacity_card import CapacityCardPlugin
from gpuq_k8s.scheduler.plugins.capacity_scheduling import CapacityScheduling
from gpuq_k8s.scheduler.plugins.gpu_quota import GPUQuota
from gpuq_k8s.scheduler.plugins.proportion import Proportion
from tests.testing import dra
from tests.testing.builders import (
    MakeElasticQuota,
    MakeGPUResourceQuota,
    MakeNode,
    MakePod,
    MakePodGroup,
    MakeQueue,
)
from tests.testing.config import config_text
from tests.testing.dra_cluster import documents
from tests.testing.scheduler import make_scheduler, plugin_of

NS = "ml"
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
MIG_1G = "NVIDIA-A100-SXM4-80GB/mig-1g.10gb-mixed"
NODES = ("gpu-node-1", "mig-node-1", "shared-node-1")


def fixture_claims() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in documents() if d["kind"] == "ResourceClaim"}


def claim_like(name: str, as_name: str) -> dict[str, Any]:
    body = copy.deepcopy(fixture_claims()[name])
    body["metadata"] = {"name": as_name, "namespace": NS, "uid": f"uid-claim-{as_name}"}
    return body


def whole_h100(as_name: str) -> dict[str, Any]:
    """``one-h100`` kept off the shared GPU: a request without capacity may be served by a device
    that allows multiple allocations, as a share of its ``requestPolicy`` default (KEP-5075), which
    the quotas charge as a share. A case about whole cards asks for one that is not shareable."""
    body = claim_like("one-h100", as_name)
    selectors = body["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
    selectors.append({"cel": {"expression": "!device.allowMultipleAllocations"}})
    return body


def admin_claim(as_name: str) -> dict[str, Any]:
    body = claim_like("one-h100", as_name)
    body["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    return body


def pod(name: str, claim: str) -> PodInfo:
    body = MakePod(name, NS).queue("team-a").req(cpu="100m").uid(f"uid-{name}").obj()
    return PodInfo.from_dict(dra.use_claims(body, claim))


def build(quota: dict[str, int], claims: list[dict[str, Any]]) -> tuple[Scheduler, MemoryBackend]:
    sched, backend = make_scheduler("capacity-card")
    for name in NODES:
        sched.set_node(MakeNode(name).alloc(cpu="64", memory="256Gi", pods="110").info())
    queue = MakeQueue("team-a").card_quota(json.dumps(quota)).capability(cpu="100", memory="1Ti")
    sched.put_object(queue.obj())
    publish(sched, claims)
    return sched, backend


def publish(sched: Scheduler, claims: list[dict[str, Any]]) -> None:
    """The fixture's DeviceClasses and ResourceSlices (not its claims), then ``claims``."""
    for doc in documents():
        if doc["kind"] != "ResourceClaim":
            sched.put_object(doc)
    for body in claims:
        sched.put_object(body)


def engine_of(sched: Scheduler) -> CapacityCard:
    return plugin_of(sched, CapacityCardPlugin).engine


def allocated(sched: Scheduler) -> dict[str, int]:
    ledger = engine_of(sched).ledgers["team-a"]
    return {k: v for k, v in ledger.allocated.items() if k not in ("cpu", "memory")}


def run(sched: Scheduler, pods: list[PodInfo]) -> list[str]:
    """Each pod scheduled once, in order; the messages of those left pending."""
    for info in pods:
        sched.add_pod(info)
    messages = []
    for _ in pods:
        done = sched.schedule_one()
        assert done is not None
        if not done.node:
            messages.append(done.message)
    return messages


@dataclass
class Case:
    quota: dict[str, int]
    claims: list[dict[str, Any]]
    pods: list[tuple[str, str]]  # (pod, claim)
    bound: int
    charged: dict[str, int]
    refused: list[str] = field(default_factory=list)  # texts the first refusal must hold


CASES = {
    "whole GPUs of two types, each against its own card quota": Case(
        {H100: 1, A100: 1},
        [claim_like("one-h100", "h1"), claim_like("one-h100", "h2")],
        [("p1", "h1"), ("p2", "h2")],
        1,
        {H100: 1000},
        ["Queue/team-a", H100, "requested 1", "used 1", "limit 1"],
    ),
    "firstAvailable H100 else A100: the A100 when the H100 quota is spent, the allocated type charged": Case(
        {H100: 1, A100: 1},
        [claim_like("h100-else-a100", f"f{i}") for i in range(3)],
        [(f"p{i}", f"f{i}") for i in range(3)],
        2,
        {H100: 1000, A100: 1000},
        ["Queue/team-a", A100, "limit 1"],
    ),
    "MIG partitions counted under their MIG card type": Case(
        {MIG_1G: 1},
        [claim_like("mig-1g", "m1"), claim_like("mig-1g", "m2")],
        [("p1", "m1"), ("p2", "m2")],
        1,
        {MIG_1G: 1000},
        [MIG_1G, "limit 1"],
    ),
    "a share of a GPU charged what it consumes (40Gi of 80Gi: half a card), then a whole one refused": Case(
        {H100: 1},
        [claim_like("share-40gi", "s1"), whole_h100("h1")],
        [("p1", "s1"), ("p2", "h1")],
        1,
        {H100: 500},
        [H100, "requested 1", "used 500m", "limit 1"],
    ),
    "a request without capacity is served by the shared GPU as a share of its default (10Gi: 1/8 card)": Case(
        {H100: 1},
        [claim_like("share-40gi", "s1"), claim_like("one-h100", "h1")],
        [("p1", "s1"), ("p2", "h1")],
        2,
        {H100: 625},
    ),
    "two shares fill one card of quota": Case(
        {H100: 1},
        [claim_like("share-40gi", "s1"), claim_like("share-40gi", "s2")],
        [("p1", "s1"), ("p2", "s2")],
        2,
        {H100: 1000},
    ),
    "adminAccess is never charged": Case(
        {A100: 1},
        [admin_claim("adm")],
        [("p1", "adm")],
        1,
        {},
    ),
    "a claim shared by several pods is charged once": Case(
        {H100: 1},
        [claim_like("one-h100", "shared")],
        [("p1", "shared"), ("p2", "shared"), ("p3", "shared")],
        3,
        {H100: 1000},
    ),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_queue_card_quota_over_devices(case: Case) -> None:
    sched, backend = build(case.quota, case.claims)
    messages = run(sched, [pod(name, claim) for name, claim in case.pods])
    assert len(backend.bindings) == case.bound, messages
    assert allocated(sched) == case.charged
    if case.refused:
        assert messages, "a pod should have been refused"
        for text in case.refused:
            assert text in messages[0]
    # After a restart (a new scheduler fed the API's objects), the charges are rebuilt from the
    # claims' status.allocation: the same usage.
    again, _ = build(case.quota, [dict(obj) for _, _, obj in sched.objects.list(kinds.RESOURCE_CLAIM)])
    for name, claim in case.pods:
        info = pod(name, claim)
        node = backend.bindings.get(info.key)
        if node:
            again.add_pod(info.with_node_name(node))
    assert allocated(again) == case.charged


def test_first_available_falls_back_where_a_device_plugin_serves_the_pods_extended_resource() -> None:
    """A pod with a ``firstAvailable [H100, A100]`` claim and an extended resource: where a device
    plugin serves the extended resource (gpu-node-1's allocatable), the node's plan is the claims
    alone, not the attempt's main plan (with the implicit claim); the H100 quota spent, the A100
    subrequest is tried there all the same, as the allocation would."""
    sched, backend = build({A100: 1}, [claim_like("h100-else-a100", "f0")])
    sched.set_node(
        MakeNode("gpu-node-1").alloc(cpu="64", memory="256Gi", pods="110", **{"example.com/gpu": "1"}).info()
    )
    body = MakePod("p0", NS).queue("team-a").req({"cpu": "100m", "example.com/gpu": "1"}).uid("uid-p0").obj()
    messages = run(sched, [PodInfo.from_dict(dra.use_claims(body, "f0"))])
    assert backend.bindings == {f"{NS}/p0": "gpu-node-1"}, messages
    claim = sched.objects.get(kinds.RESOURCE_CLAIM, NS, "f0")
    assert claim is not None and [d for _, _, d in dra.devices_of(claim)] == ["gpu-2"]  # an A100
    assert allocated(sched) == {A100: 1000}


def test_a_claim_charged_at_reserve_is_refunded_at_unreserve() -> None:
    sched, _ = build({H100: 1}, [claim_like("one-h100", "h1")])
    info = pod("p1", "h1")
    sched.add_pod(info)
    framework = sched.framework
    state = CycleState()
    assert framework.run_pre_filter(state, info).is_success
    row = sched.cluster.row_of["gpu-node-1"]
    assert framework.run_reserve(state, info, row).is_success
    assert allocated(sched) == {H100: 1000}
    framework.run_unreserve(state, info, row)
    assert allocated(sched) == {}


def many(count: int, as_name: str) -> dict[str, Any]:
    body = claim_like("one-h100", as_name)
    body["spec"]["devices"]["requests"][0]["exactly"]["count"] = count
    return body


@pytest.mark.parametrize(
    ("quota", "phase", "bound"),
    [
        pytest.param({H100: 1}, "Pending", 0, id="2 H100 asked by the gang's claims, quota 1: stays Pending"),
        pytest.param({H100: 2}, "Inqueue", 2, id="quota 2: enqueued, both bound"),
    ],
)
def test_job_mode_enqueue_counts_the_card_types_of_the_pods_claims(
    quota: dict[str, int], phase: str, bound: int
) -> None:
    """capacity-card's "Job Enqueueable Check" over DRA: a pending pod's claims still to allocate are
    its card demand, under the card types their devices can be (here H100 only)."""
    sched, backend = build(quota, [claim_like("one-h100", "g0"), claim_like("one-h100", "g1")])
    sched.put_object(MakePodGroup("g", NS).queue("team-a").min_member(2).obj())
    for i in range(2):
        body = MakePod(f"p{i}", NS).queue("team-a").group("g").req(cpu="100m").uid(f"uid-p{i}").obj()
        sched.add_pod(PodInfo.from_dict(dra.use_claims(body, f"g{i}")))
    sched.run_enqueue()
    while sched.schedule_one() is not None or sched.run_enqueue():
        pass
    group_phase = sched.podgroups.groups[f"{NS}/g"].phase
    assert group_phase == "Pending" if phase == "Pending" else group_phase != "Pending"
    assert len(backend.bindings) == bound
    if not bound:
        refusals = [e for e in backend.events if e.obj == f"PodGroup/{NS}/g"]
        assert refusals and refusals[0].reason == "InsufficientScalarQuota"
        assert H100 in refusals[0].message


def test_first_available_pending_demand_is_an_a_or_b_key() -> None:
    sched, _ = build({H100: 1, A100: 1}, [claim_like("h100-else-a100", "f0")])
    sched.add_pod(pod("p0", "f0"))
    assert engine_of(sched).ledgers["team-a"].pending == {f"{H100}|{A100}": 1000}  # in the subrequests' order


def class_claim(as_name: str, class_name: str, count: int) -> dict[str, Any]:
    """A claim of ``count`` devices of ``class_name``: what a pod's implicit claim for an extended
    resource that class serves asks."""
    exactly = {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": count}
    request = {"name": "gpu", "exactly": exactly}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": as_name, "namespace": NS, "uid": f"uid-claim-{as_name}"},
        "spec": {"devices": {"requests": [request]}},
    }


def extended_pod(name: str, count: int, group: str = "") -> PodInfo:
    """A pod asking ``example.com/gpu`` (the fixture's ``gpu.nvidia.com`` class serves it)."""
    made = MakePod(name, NS).queue("team-a").req({"cpu": "100m", "example.com/gpu": str(count)})
    return PodInfo.from_dict((made.group(group) if group else made).uid(f"uid-{name}").obj())


def test_job_mode_enqueue_counts_an_extended_resource_pods_implicit_claim() -> None:
    """A pending pod asking an extended resource a DeviceClass serves has the card demand its implicit
    claim would have: the same as a claim of that class and count (issue 26, "Quota over devices")."""
    with_claim, _ = build({H100: 1, A100: 1}, [class_claim("c0", "gpu.nvidia.com", 2)])
    with_claim.add_pod(pod("p0", "c0"))
    expected = engine_of(with_claim).ledgers["team-a"].pending
    assert expected == {f"{A100}|{H100}": 2000}
    sched, _ = build({H100: 1, A100: 1}, [])
    sched.add_pod(extended_pod("p0", 2))
    assert engine_of(sched).ledgers["team-a"].pending == expected


@pytest.mark.parametrize(
    ("quota", "bound"),
    [
        pytest.param({H100: 1}, 0, id="2 GPUs asked, quota 1 H100: the gang stays Pending"),
        pytest.param({H100: 2}, 1, id="quota 2 H100: enqueued, bound to two H100s"),
    ],
)
def test_job_mode_enqueue_refuses_an_extended_resource_gang_over_the_card_quota(
    quota: dict[str, int], bound: int
) -> None:
    sched, backend = build(quota, [])
    sched.put_object(MakePodGroup("g", NS).queue("team-a").min_member(1).obj())
    sched.add_pod(extended_pod("p0", 2, group="g"))
    sched.run_enqueue()
    while sched.schedule_one() is not None or sched.run_enqueue():
        pass
    assert len(backend.bindings) == bound
    if not bound:
        assert sched.podgroups.groups[f"{NS}/g"].phase == "Pending"
        refusals = [e for e in backend.events if e.obj == f"PodGroup/{NS}/g"]
        assert refusals and refusals[0].reason == "InsufficientScalarQuota"
        assert f"{A100}|{H100}" in refusals[0].message


def share_claim(as_name: str, memory: str) -> dict[str, Any]:
    body = claim_like("share-40gi", as_name)
    body["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": memory}}
    return body


@pytest.mark.parametrize(
    ("claims", "pending"),
    [
        pytest.param(
            [share_claim("s0", "20Gi")], {H100: 250}, id="a 20Gi share of the 80Gi H100: a quarter card"
        ),
        pytest.param(
            [share_claim("s0", "40Gi"), share_claim("s1", "20Gi")], {H100: 750}, id="two shares: their sum"
        ),
        pytest.param(
            [share_claim("s0", "500Mi")],
            {H100: 13},
            id="the request policy's rounding (min 1Gi): 1Gi of 80Gi, rounded up in milli-cards",
        ),
        pytest.param([whole_h100("h0")], {H100: 1000}, id="a whole card (unchanged)"),
    ],
)
def test_job_mode_enqueue_counts_a_capacity_request_as_the_share_it_is_charged(
    claims: list[dict[str, Any]], pending: dict[str, int]
) -> None:
    """A pending claim's capacity request is card demand as its allocation will be charged (the
    consumption the device's request policy makes, as a fraction of the card), then allocated the same."""
    sched, _ = build({H100: 1}, claims)
    for i, body in enumerate(claims):
        sched.add_pod(pod(f"p{i}", body["metadata"]["name"]))
    assert engine_of(sched).ledgers["team-a"].pending == pending
    while sched.schedule_one() is not None:
        pass
    assert allocated(sched) == pending  # the same amount once allocated


def gpu_scheduler(
    total: dict[str, Any], claims: list[dict[str, Any]], nodes: tuple[str, ...] = NODES
) -> tuple[Scheduler, MemoryBackend]:
    sched, backend = make_scheduler("gpu-quota")
    for name in nodes:
        sched.set_node(MakeNode(name).alloc(cpu="64", memory="256Gi", pods="110").info())
    sched.put_object(MakeGPUResourceQuota("gq", NS).total(**total).obj())
    publish(sched, claims)
    return sched, backend


def plain_pod(name: str, *claims: str) -> PodInfo:
    body = MakePod(name, NS).req(cpu="100m").uid(f"uid-{name}").obj()
    return PodInfo.from_dict(dra.use_claims(body, *claims))


GIB = 2**30


@dataclass
class QuotaCase:
    total: dict[str, Any]
    claims: list[dict[str, Any]]
    pods: list[tuple[str, tuple[str, ...]]]  # (pod, its claims)
    bound: int
    usage: tuple[int, int, int]  # (requests.tflops milli, requests.vram bytes, workers)
    refused: list[str] = field(default_factory=list)  # texts the first refusal must hold


# Workers are pods (tensor-fusion: one worker per allocation, i.e. per worker pod); a claim's
# TFLOPS and VRAM are charged once, whatever number of pods share it (docs/design.md "Quota over devices").
GPU_QUOTA_CASES = {
    "VRAM: a whole 80Gi H100 and a 40Gi share (exactly what it consumes) fill 120Gi": QuotaCase(
        {"requests": {"vram": "120Gi"}},
        [claim_like("one-h100", "h1"), claim_like("share-40gi", "s1"), claim_like("share-40gi", "s2")],
        [("p0", ("h1",)), ("p1", ("s1",)), ("p2", ("s2",))],
        2,
        (989_000 + 494_500, 120 * GIB, 2),
        ["GPUResourceQuota/ml/gq", "total.requests.vram", "requested 40Gi"],
    ),
    "TFLOPS from the card's specs: one H100 (989) of 1500": QuotaCase(
        {"requests": {"tflops": "1500"}},
        [whole_h100("h1"), whole_h100("h2")],
        [("p0", ("h1",)), ("p1", ("h2",))],
        1,
        (989_000, 80 * GIB, 1),
        ["GPUResourceQuota/ml/gq", "total.requests.tflops"],
    ),
    "a claim shared by two pods: its TFLOPS/VRAM once, two workers": QuotaCase(
        {"maxWorkers": 2, "requests": {"tflops": "1000"}},
        [claim_like("one-h100", "shared")],
        [("p0", ("shared",)), ("p1", ("shared",))],
        2,
        (989_000, 80 * GIB, 2),
    ),
    "a claim shared by two pods under maxWorkers 1: the second pod refused for its worker": QuotaCase(
        {"maxWorkers": 1},
        [claim_like("one-h100", "shared")],
        [("p0", ("shared",)), ("p1", ("shared",))],
        1,
        (989_000, 80 * GIB, 1),
        ["GPUResourceQuota/ml/gq", "total.maxWorkers", "limit 1"],
    ),
    "one pod with two claims is one worker": QuotaCase(
        {"maxWorkers": 1},
        [whole_h100("h1"), whole_h100("h2")],
        [("p0", ("h1", "h2"))],
        1,
        (2 * 989_000, 160 * GIB, 1),
    ),
}


@pytest.mark.parametrize("case", list(GPU_QUOTA_CASES.values()), ids=list(GPU_QUOTA_CASES))
def test_gpu_resource_quota_over_devices(case: QuotaCase) -> None:
    sched, backend = gpu_scheduler(case.total, case.claims)
    pods = [plain_pod(name, *claims) for name, claims in case.pods]
    messages = run(sched, pods)
    assert len(backend.bindings) == case.bound, messages
    store = plugin_of(sched, GPUQuota).store
    used = store.usage(NS)
    assert (used.tflops_request, used.vram_request, used.gpu_count) == case.usage  # gpu_count: workers
    if case.refused:
        assert messages, "a pod should have been refused"
        for text in case.refused:
            assert text in messages[0]
    # After a restart (a new scheduler fed the API's objects and the bound pods), the same usage.
    claims = [dict(obj) for _, _, obj in sched.objects.list(kinds.RESOURCE_CLAIM)]
    again, _ = gpu_scheduler(case.total, claims)
    for info in pods:
        node = backend.bindings.get(info.key)
        if node:
            again.add_pod(info.with_node_name(node))
    used = plugin_of(again, GPUQuota).store.usage(NS)
    assert (used.tflops_request, used.vram_request, used.gpu_count) == case.usage
    # The pods gone, only the claims' devices stay charged (kube-controller-manager clears a deleted
    # pod's claim: the refund follows the allocation), with no worker.
    for info in pods:
        again.delete_pod(info.key)
    used = plugin_of(again, GPUQuota).store.usage(NS)
    assert (used.tflops_request, used.vram_request, used.gpu_count) == (*case.usage[:2], 0)


@pytest.mark.parametrize(
    ("tflops", "device", "usage"),
    [
        pytest.param(
            "500", "gpu-2", (312_000, 80 * GIB, 1), id="989 H100 TFLOPS of 500 refused: an A100 (312)"
        ),
        pytest.param("300", None, (0, 0, 0), id="neither fits 300 TFLOPS: refused naming the quota"),
    ],
)
def test_first_available_falls_back_when_the_gpu_resource_quota_refuses_the_first(
    tflops: str, device: str | None, usage: tuple[int, int, int]
) -> None:
    """``firstAvailable [H100, A100]`` on a node with both: the H100 allocation is over the
    GPUResourceQuota's TFLOPS, so the A100 subrequest is tried on that node, as a card quota's
    refusal is (capacity-card's ``A|B``)."""
    sched, backend = gpu_scheduler(
        {"requests": {"tflops": tflops}}, [claim_like("h100-else-a100", "f0")], ("gpu-node-1",)
    )
    messages = run(sched, [plain_pod("p0", "f0")])
    used = plugin_of(sched, GPUQuota).store.usage(NS)
    assert (used.tflops_request, used.vram_request, used.gpu_count) == usage
    claim = sched.objects.get(kinds.RESOURCE_CLAIM, NS, "f0") or {}
    if device is None:
        assert not backend.bindings and not dra.devices_of(claim)
        assert "GPUResourceQuota/ml/gq" in messages[0] and "total.requests.tflops" in messages[0]
    else:
        assert backend.bindings == {f"{NS}/p0": "gpu-node-1"}, messages
        assert [d for _, _, d in dra.devices_of(claim)] == [device]


@pytest.mark.parametrize("order", [("capacity-card", "gpu-quota"), ("gpu-quota", "capacity-card")])
@pytest.mark.parametrize(
    ("cards", "device", "charged"),
    [
        pytest.param(
            {H100: 1, A100: 1}, "gpu-2", {A100: 1000}, id="both card types: the A100, charged as one"
        ),
        pytest.param({H100: 1}, None, {}, id="no A100 card quota: refused, nothing charged"),
    ],
)
def test_the_quota_plugins_agree_on_the_fallback(
    order: tuple[str, str], cards: dict[str, int], device: str | None, charged: dict[str, int]
) -> None:
    """Queue card quota and GPUResourceQuota both on, ``firstAvailable [H100, A100]``: the
    GPUResourceQuota refuses the H100 (989 of 500 TFLOPS), the row is narrowed to the A100 and the
    card quota judges and charges that A100, in whichever order the plugins run."""
    sched, backend = make_scheduler(*order)
    sched.set_node(MakeNode("gpu-node-1").alloc(cpu="64", memory="256Gi", pods="110").info())
    sched.put_object(
        MakeQueue("team-a").card_quota(json.dumps(cards)).capability(cpu="100", memory="1Ti").obj()
    )
    sched.put_object(MakeGPUResourceQuota("gq", NS).total(requests={"tflops": "500"}).obj())
    publish(sched, [claim_like("h100-else-a100", "f0")])
    messages = run(sched, [pod("p0", "f0")])
    claim = sched.objects.get(kinds.RESOURCE_CLAIM, NS, "f0") or {}
    assert [d for _, _, d in dra.devices_of(claim)] == ([device] if device else [])
    assert len(backend.bindings) == (1 if device else 0), messages
    assert allocated(sched) == charged
    used = plugin_of(sched, GPUQuota).store.usage(NS)
    assert used.tflops_request == (312_000 if device else 0)


MAPPINGS = {"deviceClassMappings": [{"name": "nvidia.com/gpu", "deviceClassNames": ["gpu.nvidia.com"]}]}


def mapped_scheduler(plugin: str, *objects: dict[str, Any]) -> tuple[Scheduler, MemoryBackend]:
    config = config_text("priority, gang", ["predicates", plugin], arguments={plugin: MAPPINGS})
    sched, backend = make_scheduler(config=config)
    for name in NODES:
        sched.set_node(MakeNode(name).alloc(cpu="64", memory="256Gi", pods="110").info())
    for doc in documents():
        if doc["kind"] != "ResourceClaim":
            sched.put_object(doc)
    for body in objects:
        sched.put_object(body)
    return sched, backend


def test_elastic_quota_counts_devices_through_device_class_mappings() -> None:
    """capacity-scheduling with ``deviceClassMappings: gpu.nvidia.com -> nvidia.com/gpu``: a claim
    for one device of that class is ``nvidia.com/gpu: 1`` against the ElasticQuota's max, in
    PreFilter and charged at Reserve; a class the mapping does not name (MIG) is not counted."""
    quota = MakeElasticQuota("eq", NS).max({"nvidia.com/gpu": 1, "cpu": "10"}).min({"cpu": "1"}).obj()
    claims = [claim_like("one-h100", "h1"), claim_like("one-h100", "h2"), claim_like("mig-1g", "m1")]
    sched, backend = mapped_scheduler("capacity-scheduling", quota, *claims)
    messages = run(sched, [plain_pod("p1", "h1"), plain_pod("p2", "h2"), plain_pod("p3", "m1")])
    assert sorted(backend.bindings) == ["ml/p1", "ml/p3"]
    assert len(messages) == 1 and "nvidia.com/gpu" in messages[0] and "ElasticQuota" in messages[0]
    plugin = plugin_of(sched, CapacityScheduling)
    info = plugin.infos.get(NS)
    assert info is not None and info.used.amount("nvidia.com/gpu") == 1000


def test_queue_capability_counts_devices_through_device_class_mappings() -> None:
    """proportion with the same mapping: a Queue's capability of nvidia.com/gpu 1 admits one pod whose
    claim asks one H100 of gpu.nvidia.com; the devices of the class are part of the cluster total."""
    queue = MakeQueue("team-a").capability({"cpu": "100", "memory": "1Ti", "nvidia.com/gpu": 1}).obj()
    claims = [claim_like("one-h100", "h1"), claim_like("one-h100", "h2")]
    sched, backend = mapped_scheduler("proportion", queue, *claims)
    run(sched, [pod("p1", "h1"), pod("p2", "h2")])
    assert list(backend.bindings) == ["ml/p1"]
    plugin = plugin_of(sched, Proportion)
    # type "gpu": 2 H100 + 2 A100, the partitionable A100 whole, the shared H100
    assert plugin.devices.totals() == {"nvidia.com/gpu": 6000}
    assert plugin.attrs()["team-a"].allocated.get("nvidia.com/gpu") == 1000


@pytest.mark.parametrize(
    ("capability", "bound"),
    [
        pytest.param({}, ["ml/p1", "ml/p2"], id="no capability of it: within the cluster's total, both"),
        pytest.param({"example.com/gpu": 1}, ["ml/p1"], id="a capability of 1: one"),
    ],
)
def test_queue_capability_counts_an_extended_resource_a_device_class_serves(
    capability: dict[str, int], bound: list[str]
) -> None:
    """proportion without any mapping: a pod asking ``example.com/gpu`` (the fixture's
    ``gpu.nvidia.com`` class serves it) counts it as asked, and the class's devices are the cluster's
    total of it where no node's allocatable has any (before, a total of 0 refused every such pod:
    "queue team-a cannot be allocated")."""
    queue = MakeQueue("team-a").capability({"cpu": "100", "memory": "1Ti", **capability}).obj()
    sched, backend = make_scheduler("proportion")
    for name in NODES:
        sched.set_node(MakeNode(name).alloc(cpu="64", memory="256Gi", pods="110").info())
    sched.put_object(queue)
    publish(sched, [])
    messages = run(sched, [extended_pod("p1", 1), extended_pod("p2", 1)])
    assert list(backend.bindings) == bound, messages
    plugin = plugin_of(sched, Proportion)
    implicit = "deviceclass.resource.kubernetes.io/"  # every class serves its implicit name too
    assert plugin.devices.extended_totals() == {
        "example.com/gpu": 6000,  # type "gpu", as the mapping counts them
        f"{implicit}gpu.nvidia.com": 6000,
        f"{implicit}mig.nvidia.com": 3000,
        f"{implicit}shared.nvidia.com": 1000,
    }
    assert plugin.attrs()["team-a"].allocated.get("example.com/gpu") == 1000 * len(bound)


def test_device_naming_is_configured_per_driver() -> None:
    """capacity-card's ``deviceNaming``: a driver whose product attribute is ``model`` and memory
    capacity ``hbm`` has its devices counted under that model (the GPU quota's VRAM from ``hbm``)."""
    naming = {"deviceNaming": {"accel.example.com": {"productName": "model", "memory": "hbm"}}}
    config = config_text(
        "priority, gang", ["predicates", "capacity-card", "gpu-quota"], arguments={"capacity-card": naming}
    )
    sched, backend = make_scheduler(config=config)
    sched.set_node(MakeNode("n1").alloc(cpu="64", memory="256Gi", pods="110").info())
    sched.put_object(MakeQueue("team-a").card_quota('{"X1": 1}').capability(cpu="100", memory="1Ti").obj())
    sched.put_object(dra.device_class("accel", "accel.example.com"))
    devices = [dra.device(f"a-{i}", {"model": "X1"}, {"hbm": "16Gi"}) for i in range(2)]
    sched.put_object(dra.resource_slice("n1-accel", "n1", devices, "accel.example.com"))
    for name in ("c1", "c2"):
        sched.put_object(dra.claim(name, NS, dra.exactly("gpu", "accel"), uid=f"uid-{name}"))
    messages = run(sched, [pod("p1", "c1"), pod("p2", "c2")])
    assert list(backend.bindings) == ["ml/p1"]
    assert "for X1: requested 1" in messages[0]
    assert allocated(sched) == {"X1": 1000}
    assert plugin_of(sched, GPUQuota).store.usage(NS).vram_request == 16 * GIB


def test_concurrent_pods_in_flight_never_exceed_the_card_quota() -> None:
    """Two pods reserved one after the other, neither bound nor written (their PreBind in flight): the
    first one's claim is charged at its Reserve, so the second's Reserve is refused, naming the quota;
    its devices are unreserved with it."""
    sched, _ = build({H100: 1}, [claim_like("one-h100", "h1"), claim_like("one-h100", "h2")])
    framework = sched.framework
    row = sched.cluster.row_of["gpu-node-1"]
    first, second = pod("p1", "h1"), pod("p2", "h2")
    states = []
    for info in (first, second):
        sched.add_pod(info)
        state = CycleState()
        assert framework.run_pre_filter(state, info).is_success
        states.append(state)
    assert framework.run_reserve(states[0], first, row).is_success
    refused = framework.run_reserve(states[1], second, row)
    assert not refused.is_success
    assert f"quota exceeded in Queue/team-a for {H100}: requested 1, available 0" in refused.message
    assert allocated(sched) == {H100: 1000}
    framework.run_unreserve(states[0], first, row)
    assert allocated(sched) == {}
    assert framework.run_reserve(states[1], second, row).is_success


def test_simulate_shows_the_card_type_a_claim_is_charged() -> None:
    sched, backend = build({H100: 1}, [claim_like("one-h100", "h1")])
    run(sched, [pod("p1", "h1")])
    bound = pod("p1", "h1").with_node_name(backend.bindings["ml/p1"])
    assert plugin_of(sched, CapacityCardPlugin).pod_fields(bound) == {"cardType": H100}
