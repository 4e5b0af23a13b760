"""A pending pod's device demand follows the DRA objects it depends on (issue 26): the card demand
capacity-card's job-mode enqueue check counts (its claims' requests resolved against the DeviceClasses,
the card types of the published devices they could take) and the mapped resources proportion counts
in a Queue's request are recomputed when a DeviceClass, a ResourceSlice, a claim the pod names or its
Queue comes after the pod, not only on the pod's next update (kube-scheduler requeues a pod on those
events: DynamicResources' EventsToRegister).

The cluster is ``tests/fixtures/dra/cluster/nvidia.yaml`` (two whole H100s, two whole A100s, a
MIG-partitioned A100, an H100 shared by memory capacity) on the in-memory scheduler.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins.capacity_card import CapacityCardPlugin
from gpuq_k8s.scheduler.plugins.proportion import Proportion
from tests.testing import dra
from tests.testing.builders import MakeGPUResourceQuota, MakeNode, MakePod, MakePodGroup, MakeQueue
from tests.testing.clock import FakeClock
from tests.testing.config import config_text
from tests.testing.dra_cluster import documents
from tests.testing.scheduler import make_scheduler, plugin_of

NS = "ml"
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
NODES = ("gpu-node-1", "mig-node-1", "shared-node-1")


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in documents() if d["kind"] == kind]


def claim(as_name: str, fixture: str = "one-h100") -> dict[str, Any]:
    body = copy.deepcopy(next(d for d in of_kind("ResourceClaim") if d["metadata"]["name"] == fixture))
    body["metadata"] = {"name": as_name, "namespace": NS, "uid": f"uid-claim-{as_name}"}
    return body


def pod(name: str, claim_name: str, group: str = "") -> PodInfo:
    made = MakePod(name, NS).queue("team-a").req(cpu="100m").uid(f"uid-{name}")
    body = (made.group(group) if group else made).obj()
    return PodInfo.from_dict(dra.use_claims(body, claim_name))


def extended_pod(name: str, count: int) -> PodInfo:
    """A pod asking ``example.com/gpu`` (the fixture's ``gpu.nvidia.com`` class serves it)."""
    made = MakePod(name, NS).queue("team-a").req({"cpu": "100m", "example.com/gpu": str(count)})
    return PodInfo.from_dict(made.uid(f"uid-{name}").obj())


def scheduler(quota: dict[str, int], *, queue: bool = True) -> tuple[Scheduler, MemoryBackend]:
    sched, backend = make_scheduler("capacity-card")
    for name in NODES:
        sched.set_node(MakeNode(name).alloc(cpu="64", memory="256Gi", pods="110").info())
    if queue:
        sched.put_object(team_a(quota))
    return sched, backend


def team_a(quota: dict[str, int]) -> dict[str, Any]:
    return MakeQueue("team-a").card_quota(json.dumps(quota)).capability(cpu="100", memory="1Ti").obj()


def put(sched: Scheduler, docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        sched.put_object(doc)


def later(sched: Scheduler) -> None:
    """Past any backoff."""
    clock = sched.clock
    assert isinstance(clock, FakeClock)
    clock.now += 60


def pending(sched: Scheduler) -> dict[str, int]:
    """The card demand of team-a's pending pods, per card key, as the plugin's next decision reads it
    (each refreshes the out-of-date demand first: the enqueue test below goes through one)."""
    plugin = plugin_of(sched, CapacityCardPlugin)
    plugin.claims.refresh_demand()
    return dict(plugin.engine.ledgers["team-a"].pending)


@pytest.mark.parametrize(
    ("first", "later"),
    [
        pytest.param(
            "ResourceSlice",
            "DeviceClass",
            id="the claim's DeviceClass made after the pod (no demand while the class is unknown)",
        ),
        pytest.param(
            "DeviceClass",
            "ResourceSlice",
            id="the driver's slices published after the pod (no demand while no device is known)",
        ),
    ],
)
def test_dra_objects_made_after_the_pod_make_its_card_demand(first: str, later: str) -> None:
    """The pod's claim asks one H100 (its own selector over ``gpu.nvidia.com``): once the class and
    the devices it could take are known, the job-mode check counts it, without any update of the pod."""
    sched, _ = scheduler({H100: 1})
    put(sched, [*of_kind(first), claim("c0")])
    sched.add_pod(pod("p0", "c0"))
    assert pending(sched) == {}
    put(sched, of_kind(later))
    assert pending(sched) == {H100: 1000}


def test_a_claim_made_after_the_pod_makes_its_card_demand() -> None:
    """A ``resourceClaimName`` the pod names before the claim exists: no pod update follows its
    creation (only a template's generated claim is written into the pod's status)."""
    sched, _ = scheduler({H100: 1})
    put(sched, [*of_kind("DeviceClass"), *of_kind("ResourceSlice")])
    sched.add_pod(pod("p0", "c0"))
    assert pending(sched) == {}
    put(sched, [claim("c0", "h100-else-a100")])
    assert pending(sched) == {f"{H100}|{A100}": 1000}
    sched.objects.delete(kinds.RESOURCE_CLAIM, NS, "c0")
    assert pending(sched) == {}


def test_a_class_serving_the_pods_extended_resource_made_after_the_pod_makes_its_demand() -> None:
    """``example.com/gpu: 2`` asked before any class names it: a device-plugin resource then; the
    class's ``extendedResourceName`` makes it the pod's implicit claim of two GPUs of that class."""
    sched, _ = scheduler({H100: 1, A100: 1})
    put(sched, of_kind("ResourceSlice"))
    sched.add_pod(extended_pod("p0", 2))
    assert pending(sched) == {}
    put(sched, of_kind("DeviceClass"))
    assert pending(sched) == {f"{A100}|{H100}": 2000}


def test_a_queue_made_after_the_pod_counts_its_card_demand() -> None:
    """A pod of a Queue that does not exist yet has no queue quota (Semantics 7); once the Queue
    exists, its claims' demand is part of the Queue's pending card demand."""
    sched, _ = scheduler({}, queue=False)
    put(sched, [*of_kind("DeviceClass"), *of_kind("ResourceSlice"), claim("c0")])
    sched.add_pod(pod("p0", "c0"))
    put(sched, [team_a({H100: 1})])
    assert pending(sched) == {H100: 1000}


def test_a_shared_claim_allocated_for_another_pod_is_no_demand_of_the_waiting_one() -> None:
    """Two pods share a claim: once the first pod's binding allocated it, the second one asks no
    more devices (the claim is charged once, as allocated)."""
    sched, backend = scheduler({H100: 1})
    put(sched, [*of_kind("DeviceClass"), *of_kind("ResourceSlice"), claim("shared")])
    sched.add_pod(pod("p0", "shared"))
    sched.add_pod(pod("p1", "shared"))
    assert pending(sched) == {H100: 2000}
    placed = sched.schedule_one()
    assert placed is not None and placed.node
    assert list(backend.bindings) == [f"{NS}/{placed.pod.name}"]
    assert pending(sched) == {}


def test_job_mode_enqueue_refuses_a_gang_whose_class_came_after_its_pods() -> None:
    """The consequence for the job-mode enqueue check: a gang of two pods asking an H100 each, created
    before the DeviceClass, stays Pending under a card quota of one H100 (before: no demand was ever
    counted for them, and the gang was enqueued)."""
    sched, backend = scheduler({H100: 1})
    put(sched, [*of_kind("ResourceSlice"), claim("g0"), claim("g1")])
    sched.put_object(MakePodGroup("g", NS).queue("team-a").min_member(2).obj())
    for i in range(2):
        sched.add_pod(pod(f"p{i}", f"g{i}", group="g"))
    put(sched, of_kind("DeviceClass"))
    sched.run_enqueue()
    assert sched.podgroups.groups[f"{NS}/g"].phase == "Pending"
    refusals = [e for e in backend.events if e.obj == f"PodGroup/{NS}/g"]
    assert refusals and refusals[0].reason == "InsufficientScalarQuota" and H100 in refusals[0].message


MAPPINGS = {"deviceClassMappings": [{"name": "nvidia.com/gpu", "deviceClassNames": ["gpu.nvidia.com"]}]}


def test_queue_request_counts_a_claim_made_after_the_pod_through_the_class_mapping() -> None:
    """proportion with ``deviceClassMappings``: a pending pod's claim made after the pod is counted
    in its Queue's request (its share), as the pod's own requests are."""
    config = config_text("priority, gang", ["predicates", "proportion"], arguments={"proportion": MAPPINGS})
    sched, _ = make_scheduler(config=config)
    for name in NODES:
        sched.set_node(MakeNode(name).alloc(cpu="64", memory="256Gi", pods="110").info())
    queue = MakeQueue("team-a").capability({"cpu": "100", "memory": "1Ti", "nvidia.com/gpu": 4}).obj()
    put(sched, [queue, *of_kind("DeviceClass"), *of_kind("ResourceSlice")])
    sched.add_pod(pod("p0", "c0"))
    plugin = plugin_of(sched, Proportion)
    assert plugin.attrs()["team-a"].request.get("nvidia.com/gpu", 0) == 0
    put(sched, [claim("c0")])
    assert plugin.attrs()["team-a"].request.get("nvidia.com/gpu") == 1000


def whole_h100(as_name: str) -> dict[str, Any]:
    """A claim for one whole H100 (never a share of the shared GPU)."""
    body = claim(as_name)
    selectors = body["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
    selectors.append({"cel": {"expression": "!device.allowMultipleAllocations"}})
    return body


@pytest.mark.parametrize(
    ("plugin", "quota", "refusal"),
    [
        pytest.param("capacity-card", team_a({H100: 1}), "Queue/team-a", id="a Queue's card quota of 1 H100"),
        pytest.param(
            "gpu-quota",
            MakeGPUResourceQuota("gq", NS).total(requests={"vram": "80Gi"}).obj(),
            "GPUResourceQuota/ml/gq",
            id="a GPUResourceQuota of 80Gi of VRAM",
        ),
    ],
)
def test_a_pod_a_device_quota_refused_is_retried_when_a_claim_gives_its_devices_back(
    plugin: str, quota: dict[str, Any], refusal: str
) -> None:
    """The quota is held by p0's claim (one whole H100); p1 is refused by the quota on the only node,
    which has an H100 free. p0 is deleted (p1 is retried at once and refused again: its claim is still
    allocated), then kube-controller-manager clears p0's claim: that claim event refunds the charge
    and retries p1, which binds (before, only DynamicResources was retried on claim events, and p1,
    refused by the quota alone, waited for an unrelated event)."""
    sched, backend = make_scheduler(plugin)
    sched.set_node(MakeNode("gpu-node-1").alloc(cpu="64", memory="256Gi", pods="110").info())
    put(
        sched, [quota, *of_kind("DeviceClass"), *of_kind("ResourceSlice"), whole_h100("c0"), whole_h100("c1")]
    )
    sched.add_pod(pod("p0", "c0"))
    sched.add_pod(pod("p1", "c1"))
    for _ in range(2):
        sched.schedule_one()
    assert list(backend.bindings) == [f"{NS}/p0"]
    sched.delete_pod(f"{NS}/p0")
    later(sched)
    retried = sched.schedule_one()
    assert retried is not None and retried.pod.name == "p1" and not retried.node
    assert refusal in retried.message
    parked = sched.queue.get(f"{NS}/p1")
    assert parked is not None and parked.pool == "unschedulable"
    assert parked.rejected_by == {plugin}
    # The resource-claim-controller deallocates a deleted pod's claim.
    allocated = sched.objects.get(kinds.RESOURCE_CLAIM, NS, "c0") or {}
    held = {k: copy.deepcopy(v) for k, v in allocated.items() if k != "status"}
    sched.put_object(held)
    queued = sched.queue.get(f"{NS}/p1")
    assert queued is not None and queued.pool != "unschedulable"
    later(sched)
    placed = sched.schedule_one()
    assert placed is not None and placed.pod.name == "p1" and placed.node == "gpu-node-1"
