"""Extended resources backed by DRA through the in-memory cycle (DRAExtendedResource, on by default in
kube-scheduler 1.36): a pod asking ``example.com/gpu: 2`` where no device plugin serves it is given
devices of the DeviceClass whose ``spec.extendedResourceName`` names it, through the implicit claim
created at PreBind; a node whose allocatable has the resource serves it by its device plugin instead.

Upstream cases ported (kubernetes v1.36.4 pkg/scheduler/framework/plugins/):
* dynamicresources/dynamicresources_test.go "extended resource" cases: the claim created with the
  pod as controller owner and the annotation, allocated and reserved; the pod's
  ``status.extendedResourceClaimStatus`` request mappings; a node with device-plugin allocatable not
  allocated through DRA;
* noderesources/fit_test.go ``shouldDelegateResourceToDRA``: no allocatable and a class mapping:
  the fit is not checked there; allocatable > 0: checked as any extended resource.
"""

from __future__ import annotations

import json
from typing import Any

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.devices.claims import EXTENDED_RESOURCE_CLAIM_ANNOTATION
from gpuq_k8s.common.model.devices.classes import DeviceClass
from gpuq_k8s.common.model.devices.extended import (
    ExtendedResourceClasses,
    extended_claim_name,
    extended_requests,
)
from gpuq_k8s.common.model.devices.reservation import FINALIZER
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins.capacity_card import CapacityCardPlugin
from gpuq_k8s.scheduler.plugins.dynamic_resources import DynamicResources
from gpuq_k8s.scheduler.plugins.gpu_quota import GPUQuota
from tests.testing import dra
from tests.testing.builders import MakeGPUResourceQuota, MakeNode, MakePod, MakeQueue
from tests.testing.clock import FakeClock
from tests.testing.dra_cluster import documents
from tests.testing.scheduler import make_scheduler, plugin_of

NS = "ns"
GPU = "example.com/gpu"
CLASS = dra.device_class("gpu", extended_resource_name=GPU)
TWO_GPUS = dra.resource_slice("n1-gpus", "n1", [dra.device("gpu-0"), dra.device("gpu-1")])


def node(name: str, **extra: str) -> MakeNode:
    return MakeNode(name).alloc(cpu="8", memory="16Gi", pods="20", **extra)


def ext_pod(name: str, count: int) -> PodInfo:
    return PodInfo.from_dict(MakePod(name, NS).req({"cpu": "100m", GPU: str(count)}).uid(f"uid-{name}").obj())


def scheduler(
    *objects: dict[str, Any], nodes: tuple[MakeNode, ...] = (), clock: FakeClock | None = None
) -> tuple[Scheduler, MemoryBackend]:
    sched, backend = make_scheduler(clock=clock) if clock is not None else make_scheduler()
    for made in nodes or (node("n1"),):
        sched.set_node(made.info())
    for obj in objects:
        sched.put_object(obj)
    return sched, backend


def implicit_claim(sched: Scheduler, info: PodInfo) -> dict[str, Any] | None:
    found = sched.objects.get(kinds.RESOURCE_CLAIM, NS, extended_claim_name(info.name, info.uid))
    return dict(found) if found is not None else None


def attempt(sched: Scheduler) -> tuple[str, str]:
    done = sched.schedule_one()
    assert done is not None
    return done.node, done.message


def test_an_extended_resource_pod_gets_devices_through_the_implicit_claim_before_its_binding() -> None:
    sched, backend = scheduler(CLASS, TWO_GPUS)
    info = ext_pod("p", 2)
    sched.add_pod(info)
    assert attempt(sched)[0] == "n1"
    assert backend.bindings == {"ns/p": "n1"}
    claim = implicit_claim(sched, info)
    assert claim is not None
    meta = claim["metadata"]
    assert meta["annotations"] == {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    assert meta["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p", "controller": True}
    ]
    assert meta["finalizers"] == [FINALIZER]
    # one ExactCount request for the container; its name counts the container's sorted requests
    # (cpu, example.com/gpu), as upstream's createResourceRequestAndMappings
    assert claim["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-1",
            "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2},
        }
    ]
    assert sorted(dra.devices_of(claim)) == [(dra.DRIVER, "n1", "gpu-0"), (dra.DRIVER, "n1", "gpu-1")]
    # gpuq simulate's report shows them on the pod
    fields = plugin_of(sched, DynamicResources).pod_fields(info)
    assert sorted(d["device"] for d in fields["devices"]) == [
        f"{dra.DRIVER}/n1/gpu-0",
        f"{dra.DRIVER}/n1/gpu-1",
    ]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    # the claim created, its status written, then the pod's status: all before the binding
    name = extended_claim_name("p", "uid-p")
    assert [ref for _, ref, _ in backend.writes] == [
        f"ResourceClaim/ns/{name}",
        f"ResourceClaim/ns/{name}",
        "Pod/ns/p",
    ]
    assert backend.writes[2][2]["status"] == {
        "extendedResourceClaimStatus": {
            "resourceClaimName": name,
            "requestMappings": [
                {"containerName": "c", "resourceName": GPU, "requestName": "container-0-request-1"}
            ],
        }
    }


def test_init_containers_and_sidecars_ask_as_upstream_through_the_cycle() -> None:
    """A classic init container reuses the requests of the containers after it (here the sidecar's),
    a sidecar and the app container each get their own (dynamicresources_test.go's init-container
    extended resource cases): 3 devices, the claim and the pod's mappings as the model builds them
    from the whole spec (the cycle works from the pod's trimmed ``extended_spec``)."""
    four = dra.resource_slice("n1-gpus", "n1", [dra.device(f"gpu-{i}") for i in range(4)])
    sched, backend = scheduler(CLASS, four)
    body = (
        MakePod("p", NS)
        .req({"cpu": "100m", GPU: "2"})
        .init_container({GPU: "1"})
        .sidecar({GPU: "1"})
        .uid("uid-p")
        .obj()
    )
    info = PodInfo.from_dict(body)
    sched.add_pod(info)
    assert attempt(sched)[0] == "n1"
    claim = implicit_claim(sched, info)
    assert claim is not None
    requests = [(r["name"], r["exactly"]["count"]) for r in claim["spec"]["devices"]["requests"]]
    assert requests == [("container-1-request-0", 1), ("container-2-request-1", 2)]
    assert len(dra.devices_of(claim)) == 3
    classes = ExtendedResourceClasses([DeviceClass.from_dict(CLASS)])
    _, mappings = extended_requests(body["spec"], [GPU], classes)
    status = backend.writes[-1][2]["status"]["extendedResourceClaimStatus"]
    assert status["requestMappings"] == [
        {"containerName": m.container, "resourceName": m.resource, "requestName": m.request} for m in mappings
    ]
    assert {m["containerName"]: m["requestName"] for m in status["requestMappings"]} == {
        "init0": "container-1-request-0",
        "init1": "container-1-request-0",
        "c": "container-2-request-1",
    }


def test_more_than_the_node_has_is_refused_with_kube_schedulers_reason() -> None:
    sched, backend = scheduler(CLASS, TWO_GPUS)
    sched.add_pod(ext_pod("p", 3))
    bound, message = attempt(sched)
    assert bound == "" and backend.bindings == {}
    assert "cannot allocate all claims" in message
    assert "Insufficient example.com/gpu" not in message  # NodeResourcesFit leaves it to DRA
    assert "allocatable" not in message  # no "never fits" outlook from the node's allocatable


def test_a_resource_no_class_serves_is_insufficient_as_before() -> None:
    sched, _ = scheduler(dra.device_class("gpu"), TWO_GPUS)  # no extendedResourceName
    sched.add_pod(ext_pod("p", 1))
    bound, message = attempt(sched)
    assert bound == "" and "Insufficient example.com/gpu" in message


def test_a_pod_insufficient_before_the_class_existed_is_retried_when_it_appears() -> None:
    """Upstream's NodeResourcesFit registers DeviceClass events with DRAExtendedResource
    (``isSchedulableAfterDeviceClassChange``): a class naming the resource retries the pod."""
    clock = FakeClock()
    sched, _ = scheduler(TWO_GPUS, clock=clock)
    sched.add_pod(ext_pod("p", 1))
    bound, message = attempt(sched)
    assert bound == "" and "Insufficient example.com/gpu" in message
    sched.put_object(dra.device_class("other"))  # names nothing the pod asks
    queued = sched.queue.get("ns/p")
    assert queued is not None and queued.pool == "unschedulable"
    sched.put_object(CLASS)
    queued = sched.queue.get("ns/p")
    assert queued is not None and queued.pool != "unschedulable"
    clock.now += 60
    assert attempt(sched)[0] == "n1"


def test_a_node_with_device_plugin_allocatable_serves_it_without_dra() -> None:
    """Upstream: allocatable > 0 on the node: the device plugin serves it, NodeResourcesFit checks it,
    and no claim is made; a node without it gets the devices through DRA."""
    sched, backend = scheduler(CLASS, TWO_GPUS, nodes=(node("n2", **{GPU: "4"}),))
    info = ext_pod("p", 2)
    sched.add_pod(info)
    assert attempt(sched)[0] == "n2"
    assert implicit_claim(sched, info) is None
    assert backend.writes == []
    # more than the device plugin's allocatable: Insufficient there, whatever the devices
    sched, _ = scheduler(
        CLASS,
        dra.resource_slice("n2-gpus", "n2", [dra.device("gpu-0")] * 1),
        nodes=(node("n2", **{GPU: "1"}),),
    )
    sched.add_pod(ext_pod("q", 2))
    bound, message = attempt(sched)
    assert bound == "" and "Insufficient example.com/gpu" in message


def test_each_node_gets_its_own_implicit_claim() -> None:
    """Mixed nodes: the plugin node takes it without a claim, the DRA node through one."""
    sched, _ = scheduler(CLASS, TWO_GPUS, nodes=(node("n1"), node("n2", **{GPU: "1"})))
    plugin = plugin_of(sched, DynamicResources)
    info = ext_pod("p", 1)
    state = CycleState()
    assert plugin.pre_filter(state, info).is_success
    verdict = plugin.filter(state, info)
    rows = {name: sched.cluster.row_of[name] for name in ("n1", "n2")}
    assert verdict.passed[rows["n1"]] and verdict.passed[rows["n2"]]
    assert plugin.reserve(state, info, rows["n2"]).is_success
    assert plugin.view.ledger.allocation(f"ns/{extended_claim_name('p', 'uid-p')}") is None
    assert plugin.reserve(state, info, rows["n1"]).is_success
    assert plugin.view.ledger.allocation(f"ns/{extended_claim_name('p', 'uid-p')}") is not None


def test_concurrent_extended_pods_never_get_the_same_device() -> None:
    sched, _ = scheduler(CLASS, TWO_GPUS)
    plugin = plugin_of(sched, DynamicResources)
    for name in ("pa", "pb"):
        info = ext_pod(name, 1)
        state = CycleState()
        assert plugin.pre_filter(state, info).is_success
        assert plugin.filter(state, info).passed[0]
        assert plugin.reserve(state, info, 0).is_success
    devices = set()
    for name in ("pa", "pb"):
        found = plugin.view.ledger.allocation(f"ns/{extended_claim_name(name, f'uid-{name}')}")
        assert found is not None
        devices |= {r.device for r in found.results}
    assert devices == {"gpu-0", "gpu-1"}
    third = ext_pod("pc", 1)
    state = CycleState()
    assert plugin.pre_filter(state, third).is_success
    assert not plugin.filter(state, third).passed[0]
    # through the whole cycle: three pods, two devices
    sched, _ = scheduler(CLASS, TWO_GPUS)
    for name in ("qa", "qb", "qc"):
        sched.add_pod(ext_pod(name, 1))
    outcomes = [attempt(sched) for _ in range(3)]
    assert sorted(n for n, _ in outcomes) == ["", "n1", "n1"]
    taken = [
        dra.devices_of(claim)[0][2]
        for name in ("qa", "qb", "qc")
        if (claim := implicit_claim(sched, ext_pod(name, 1))) is not None
    ]
    assert sorted(taken) == ["gpu-0", "gpu-1"]


def test_a_failed_binding_deletes_the_claim_and_the_retry_makes_it_again() -> None:
    clock = FakeClock()
    sched, backend = scheduler(CLASS, TWO_GPUS, clock=clock)
    backend.fail_binds.add("ns/p")
    info = ext_pod("p", 1)
    sched.add_pod(info)
    attempt(sched)
    assert backend.bindings == {} and "ns/p" in sched.pending
    name = extended_claim_name("p", "uid-p")
    assert backend.rolled_back == [("ns/p", f"ResourceClaim/ns/{name}"), ("ns/p", f"ResourceClaim/ns/{name}")]
    assert implicit_claim(sched, info) is None  # deleted: no device stays allocated
    plugin = plugin_of(sched, DynamicResources)
    assert plugin.view.ledger.allocation(f"ns/{name}") is None
    backend.fail_binds.clear()
    clock.now += 60
    assert attempt(sched)[0] == "n1"
    claim = implicit_claim(sched, info)
    assert claim is not None and len(dra.devices_of(claim)) == 1


def placed_by_a_first_scheduler(info: PodInfo) -> dict[str, Any]:
    """``info`` placed on n1 by a scheduler of its own: its implicit claim, as the API keeps it."""
    first, _ = scheduler(CLASS, TWO_GPUS)
    first.add_pod(info)
    assert attempt(first)[0] == "n1"
    made = implicit_claim(first, info)
    assert made is not None
    return made


def test_a_restarted_scheduler_rebuilds_the_ledger_from_the_implicit_claims() -> None:
    p1 = ext_pod("p1", 1)
    made = placed_by_a_first_scheduler(p1)
    second, _ = scheduler(CLASS, TWO_GPUS, made)
    second.add_pod(p1.with_node_name("n1"))
    for name in ("p2", "p3"):
        second.add_pod(ext_pod(name, 1))
    outcomes = [attempt(second) for _ in range(2)]
    assert sorted(n for n, _ in outcomes) == ["", "n1"]
    taken = {
        dra.devices_of(c)[0][2] for name in ("p2", "p3") if (c := implicit_claim(second, ext_pod(name, 1)))
    }
    assert taken == {({"gpu-0", "gpu-1"} - {dra.devices_of(made)[0][2]}).pop()}


def test_a_claim_left_by_an_earlier_attempt_is_allocated_as_the_pods_claim() -> None:
    """A leader that died between the create and the binding leaves the pod's claim: the next attempt
    uses it (upstream deletes it and starts over)."""
    info = ext_pod("p", 1)
    made = placed_by_a_first_scheduler(info)
    second, backend = scheduler(CLASS, TWO_GPUS, made)
    second.add_pod(info)
    assert attempt(second)[0] == "n1"
    assert dra.devices_of(implicit_claim(second, info) or {}) == dra.devices_of(made)
    assert [ref for _, ref, _ in backend.writes] == ["Pod/ns/p"]  # reserved already: the mappings only


# -- quota over the implicit claim's devices (docs/design.md "Quota over devices") ------------------
H100 = "NVIDIA-H100-80GB-HBM3"
H100_CLASS = dra.device_class(
    "h100-ext",
    driver="gpu.nvidia.com",
    selector='device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3" '
    "&& !device.allowMultipleAllocations",
    extended_resource_name="example.com/h100",
)


def quota_scheduler(plugin: str, quota: dict[str, Any]) -> tuple[Scheduler, MemoryBackend]:
    sched, backend = make_scheduler(plugin)
    for name in ("gpu-node-1", "mig-node-1", "shared-node-1"):
        sched.set_node(MakeNode(name).alloc(cpu="64", memory="256Gi", pods="110").info())
    for doc in documents():
        if doc["kind"] != "ResourceClaim":
            sched.put_object(doc)
    sched.put_object(H100_CLASS)
    if plugin == "capacity-card":
        queue = MakeQueue("team-a").card_quota(json.dumps(quota)).capability(cpu="100", memory="1Ti")
        sched.put_object(queue.obj())
    else:
        sched.put_object(MakeGPUResourceQuota("gq", "ml").total(**quota).obj())
    return sched, backend


def h100_pod(name: str) -> PodInfo:
    body = (
        MakePod(name, "ml").queue("team-a").req({"cpu": "100m", "example.com/h100": "1"}).uid(f"uid-{name}")
    )
    return PodInfo.from_dict(body.obj())


def test_queue_card_quota_charges_the_implicit_claims_devices() -> None:
    sched, backend = quota_scheduler("capacity-card", {H100: 1})
    for name in ("p1", "p2"):
        sched.add_pod(h100_pod(name))
    outcomes = [attempt(sched) for _ in range(2)]
    assert list(backend.bindings) == ["ml/p1"], outcomes
    assert "H100" in outcomes[1][1]  # refused by the card quota, not by the devices (two H100s)
    ledger = plugin_of(sched, CapacityCardPlugin).engine.ledgers["team-a"]
    assert {k: v for k, v in ledger.allocated.items() if k not in ("cpu", "memory")} == {H100: 1000}


def test_gpu_resource_quota_charges_the_implicit_claims_devices() -> None:
    sched, backend = quota_scheduler("gpu-quota", {"requests": {"tflops": "1500"}})
    for name in ("p1", "p2"):
        sched.add_pod(h100_pod(name))
    outcomes = [attempt(sched) for _ in range(2)]
    assert list(backend.bindings) == ["ml/p1"], outcomes
    assert "total.requests.tflops" in outcomes[1][1]
    used = plugin_of(sched, GPUQuota).store.usage("ml")
    assert used.tflops_request == 989_000  # one H100 from the card's specs
    # rebuilt from the claims after a restart
    again, _ = quota_scheduler("gpu-quota", {"requests": {"tflops": "1500"}})
    for _, _, obj in sched.objects.list(kinds.RESOURCE_CLAIM):
        again.put_object(dict(obj))
    assert plugin_of(again, GPUQuota).store.usage("ml").tflops_request == 989_000


def test_an_extended_resource_pod_is_one_worker_at_reserve_and_after_a_restart() -> None:
    """Workers are pods: a pod whose devices come through its implicit claim is one worker, as a pod
    with claims is (found by the DRA e2e checker: the bound extended-resource pod counted no worker, so
    ``status.used.workers`` was one short of the pods bound)."""
    quota = {"requests": {"tflops": "1500"}, "maxWorkers": 5}
    sched, _ = quota_scheduler("gpu-quota", quota)
    sched.add_pod(h100_pod("p1"))
    node_name, message = attempt(sched)
    assert node_name, message
    assert plugin_of(sched, GPUQuota).store.usage("ml").gpu_count == 1  # gpu_count: workers
    again, _ = quota_scheduler("gpu-quota", quota)
    for _, _, obj in sched.objects.list(kinds.RESOURCE_CLAIM):
        again.put_object(dict(obj))
    again.add_pod(h100_pod("p1").with_node_name(node_name))
    used = plugin_of(again, GPUQuota).store.usage("ml")
    assert (used.tflops_request, used.gpu_count) == (989_000, 1)
