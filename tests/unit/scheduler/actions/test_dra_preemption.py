"""Preemption and DRA devices (issue 26; docs/design.md "Preemption"), as kube-scheduler 1.36 does it.

Upstream (kubernetes v1.36.4 pkg/scheduler/framework/plugins/): DynamicResources' Filter returns
UnschedulableAndUnresolvable when a node cannot take the pod's claims (``statusUnschedulable`` in
dynamicresources.go; dynamicresources_test.go "exhausted-resources-in-informer-cache": the devices
are allocated to another claim, "extended-resource-name-no-resource": no device serves the extended
resource), it has no PreFilterExtensions (victims' allocations are not removed in the dry run), and
DefaultPreemption only tries the nodes whose status is Unschedulable (preemption.go
``findCandidates``; default_preemption_test.go "no candidate nodes found with mixed reason, 2
UnschedulableAndUnresolvable nodes and 2 nodes don't have enough CPU resource"). So a pod whose
devices are held by lower-priority pods evicts nobody; a pod whose devices are free on a node, but
whose cpu is not, preempts there for the cpu. An extended resource a DeviceClass serves is DRA's on
the nodes with none of it allocatable (NodeResourcesFit's ``shouldDelegateResourceToDRA``): no
node room to free there; where a device plugin serves it, it is node room as any.

Each case runs through Volcano's preempt action (the configuration gpuq gives kube-scheduler's
behaviour), capacity-scheduling's PostFilter and Volcano's reclaim (the same node walk).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from tests.testing import dra
from tests.testing.builders import MakeElasticQuota, MakeNode, MakePod, MakeQueue
from tests.testing.config import config_text
from tests.testing.scheduler import make_scheduler

NS = "ns"  # the preemptor's namespace
LOW_NS = "low"  # the lower-priority pods': borrowing beyond their ElasticQuota min (0)
GPU = "example.com/gpu"
LOW, HIGH = 0, 1000
CONFIGS = {
    "preempt action": config_text("priority, gang", ["predicates"]),
    "capacity-scheduling": config_text("priority, gang", ["predicates", "capacity-scheduling"]),
    # Volcano's reclaim: the lower-priority pods' queue holds more than it deserves (half the node).
    "reclaim action": config_text(
        "conformance, gang, proportion", ["predicates"], actions="enqueue, allocate, reclaim"
    ),
}


def world(config: str, *, device_plugin: bool = False) -> tuple[Scheduler, MemoryBackend]:
    """Node n1 (4 cpu) with one DRA device of a class serving ``example.com/gpu`` (or, with
    ``device_plugin``, one ``example.com/gpu`` in its allocatable and no device)."""
    sched, backend = make_scheduler(config=CONFIGS[config])
    extra = {GPU: "1"} if device_plugin else {}
    sched.set_node(MakeNode("n1").alloc(cpu="4", memory="16Gi", pods="110", **extra).info())
    sched.put_object(dra.device_class("gpu", extended_resource_name=GPU))
    if not device_plugin:
        sched.put_object(dra.resource_slice("n1-gpus", "n1", [dra.device("gpu-0")]))
    if config == "reclaim action":
        for queue in ("q-low", "q-high"):
            sched.put_object(MakeQueue(queue).obj())
    if config == "capacity-scheduling":
        for namespace, least in ((NS, "8"), (LOW_NS, "0")):
            limits = {"cpu": least, GPU: least}
            sched.put_object(MakeElasticQuota("q", namespace).min(**limits).max(cpu="8", **{GPU: "8"}).obj())
    return sched, backend


def make_pod(name: str, priority: int, cpu: str, devices: str, config: str) -> PodInfo:
    """``devices``: "" none, "extended" one ``example.com/gpu``, "claim" a claim of one device; for
    reclaim, the pod of queue ``q-low`` or ``q-high`` by its priority."""
    requests = {"cpu": cpu, GPU: "1"} if devices == "extended" else {"cpu": cpu}
    namespace = LOW_NS if priority == LOW else NS
    made = MakePod(name, namespace).uid(f"uid-{name}").priority(priority).req(requests)
    if config == "reclaim action":
        made = made.queue("q-low" if priority == LOW else "q-high")
    body: dict[str, Any] = made.obj()
    return PodInfo.from_dict(dra.use_claims(body, f"{name}-gpu") if devices == "claim" else body)


def claim_of(info: PodInfo) -> dict[str, Any]:
    return dra.claim(f"{info.name}-gpu", info.namespace, dra.exactly("gpu", "gpu"), uid=f"uid-c-{info.name}")


def place(sched: Scheduler, info: PodInfo, node: str = "n1") -> None:
    """``info`` scheduled and bound to ``node`` (its devices allocated), as a running pod."""
    if info.claim_sources:
        sched.put_object(claim_of(info))
    sched.add_pod(info)
    done = sched.schedule_one()
    assert done is not None and done.node == node, done


def attempt(sched: Scheduler, info: PodInfo) -> tuple[str, str]:
    if info.claim_sources:
        sched.put_object(claim_of(info))
    sched.add_pod(info)
    done = sched.schedule_one()
    assert done is not None and done.pod.key == info.key
    return done.node, done.nominated


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("devices", ["extended", "claim"])
def test_a_pod_whose_devices_are_free_preempts_for_its_cpu(config: str, devices: str) -> None:
    """The node can take the pod's devices; a lower-priority CPU pod holds the cpu: it is evicted and
    the pod nominated there (before, an extended resource DRA serves counted as node room the node
    does not have: no node was a candidate)."""
    sched, backend = world(config)
    place(sched, make_pod("cpu-hog", LOW, "4", "", config))
    node, nominated = attempt(sched, make_pod("high", HIGH, "1", devices, config))
    assert (node, nominated) == ("", "n1")
    assert backend.evictions.keys() == {"low/cpu-hog"}
    sched.queue.flush_unschedulable(0)
    again = sched.schedule_one()
    assert again is not None and again.node == "n1"  # its device allocated with the cpu freed
    assert backend.bindings["ns/high"] == "n1"


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("holder", ["extended", "claim"])
@pytest.mark.parametrize("devices", ["extended", "claim"])
def test_devices_held_by_a_lower_priority_pod_are_never_preempted_for(
    config: str, holder: str, devices: str
) -> None:
    """Upstream "exhausted-resources-in-informer-cache": the node cannot take the claims, which is
    UnschedulableAndUnresolvable, so preemption does not try it: the holder is not evicted (its
    removal would not free the device in the dry run, nor before kube-controller-manager clears
    its claim), and the pod is not nominated."""
    sched, backend = world(config)
    place(sched, make_pod("holder", LOW, "1", holder, config))
    node, nominated = attempt(sched, make_pod("high", HIGH, "1", devices, config))
    assert (node, nominated) == ("", "")
    assert not backend.evictions


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_a_device_plugin_resource_is_node_room_preemption_frees(config: str) -> None:
    """Where the node's allocatable has the extended resource, a device plugin serves it, not DRA
    (``shouldDelegateResourceToDRA`` false): evicting its lower-priority holder frees it."""
    sched, backend = world(config, device_plugin=True)
    place(sched, make_pod("holder", LOW, "1", "extended", config))
    node, nominated = attempt(sched, make_pod("high", HIGH, "1", "extended", config))
    assert (node, nominated) == ("", "n1")
    assert backend.evictions.keys() == {"low/holder"}


# Not reclaim: with n1's cpu spare, the holders' queue is within what it deserves (proportion's
# deserved share is capped by its request), so Volcano's reclaim has nothing to take back.
@pytest.mark.parametrize("config", ["capacity-scheduling", "preempt action"])
@pytest.mark.parametrize("devices", ["extended", "claim"])
def test_only_the_victims_whose_removal_helps_are_evicted(config: str, devices: str) -> None:
    """Upstream's "no candidate nodes found with mixed reason" with DRA: n1's device is held by a
    lower-priority pod (unresolvable there), n2's device is free but its cpu is held by another:
    the pod preempts on n2, evicting the cpu holder only, never n1's device holder."""
    sched, backend = world(config)
    place(sched, make_pod("holder", LOW, "1", devices, config))
    sched.set_node(MakeNode("n2").alloc(cpu="4", memory="16Gi", pods="110").info())
    sched.put_object(dra.resource_slice("n2-gpus", "n2", [dra.device("gpu-0")]))
    place(sched, make_pod("cpu-hog", LOW, "4", "", config), "n2")
    node, nominated = attempt(sched, make_pod("high", HIGH, "1", devices, config))
    assert (node, nominated) == ("", "n2")
    assert backend.evictions.keys() == {"low/cpu-hog"}
