"""Requeueing on the cluster events that can help (scheduler/framework/cluster_events.py, the event
index and queueing hints of scheduler/queue.py, the events scheduler/cycle.py raises): kube-scheduler's
EventsToRegister and queueing hints. Per rule kind, a rejected pod is retried on its event and not on
unrelated ones; and every hook the placement rules register for is raised by the change it names."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cluster.objects import KINDS as STORED
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.cluster_events import DEFAULT_EVENTS, OBJECT_EVENTS, ClusterEvent
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import FilterPlugin, FilterResult, Handle, Plugin
from gpuq_k8s.scheduler.kube.feed import object_update_matters
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.scheduler.plugins.members import predicate
from gpuq_k8s.scheduler.queue import UNSCHEDULABLE
from tests.testing.builders import MakeNode, MakePod, MakePodGroup, MakePriorityClass
from tests.testing.clock import FakeClock
from tests.testing.config import config_text
from tests.testing.scheduler import make_scheduler

NODE = MakeNode("n1").alloc(cpu="2", memory="4Gi", pods="10").label("zone", "a")


def _parked(sched: Scheduler, key: str = "ns/p") -> bool:
    queued = sched.queue.get(key)
    return queued is not None and queued.pool == UNSCHEDULABLE


# -- NodePorts ---------------------------------------------------------------------------------------


def _port_taken() -> Scheduler:
    """n1's port 80 is held by ``holder``; ``p`` asks it and is parked under NodePorts."""
    sched, _ = make_scheduler()
    sched.set_node(NODE.info())
    sched.add_pod(MakePod("holder").req(cpu="100m").host_port(80).node("n1").info())
    sched.add_pod(MakePod("portless").req(cpu="100m").node("n1").info())
    sched.add_pod(MakePod("p").req(cpu="100m").host_port(80).info())
    attempt = sched.schedule_one()
    assert attempt is not None and not attempt.node and _parked(sched)
    queued = sched.queue.get("ns/p")
    assert queued is not None and queued.rejected_by == {plugin_names.NODE_PORTS}
    return sched


def test_node_ports_retries_when_the_pod_holding_the_port_leaves() -> None:
    sched = _port_taken()
    sched.delete_pod("ns/holder")
    assert not _parked(sched)
    assert isinstance(sched.clock, FakeClock)
    sched.clock.now += 10.0  # past its backoff
    attempt = sched.schedule_one()
    assert attempt is not None and attempt.node == "n1"


def test_node_ports_does_not_retry_on_unrelated_events() -> None:
    sched = _port_taken()
    sched.delete_pod("ns/portless")  # held no port (the queueing hint says skip)
    sched.set_node(NODE.copy().label("zone", "b").info())  # a label change frees no port
    sched.put_object(MakePriorityClass("high").obj())  # a quota-side object
    assert _parked(sched)


def test_node_ports_retries_when_a_node_is_added() -> None:
    sched = _port_taken()
    sched.set_node(MakeNode("n2").alloc(cpu="2", memory="4Gi", pods="10").info())
    assert not _parked(sched)


# -- NodeResourcesFit (alone: a configuration without predicates) ----------------------------------


def _short_of_cpu() -> Scheduler:
    sched, _ = make_scheduler(config=config_text("priority, gang", "capacity-scheduling"))
    sched.set_node(NODE.info())
    sched.add_pod(MakePod("big").req(cpu="1500m").node("n1").info())
    sched.add_pod(MakePod("p").req(cpu="1").info())
    attempt = sched.schedule_one()
    assert attempt is not None and not attempt.node and _parked(sched)
    return sched


def test_resource_fit_retries_when_a_pod_leaves_its_node() -> None:
    sched = _short_of_cpu()
    sched.delete_pod("ns/big")
    assert not _parked(sched)


def test_resource_fit_retries_on_a_node_it_fits_and_not_on_one_it_never_could() -> None:
    sched = _short_of_cpu()
    sched.set_node(MakeNode("tiny").alloc(cpu="500m", memory="4Gi", pods="10").info())  # never fits 1 cpu
    assert _parked(sched)
    sched.set_node(MakeNode("roomy").alloc(cpu="4", memory="4Gi", pods="10").info())
    assert not _parked(sched)


def test_resource_fit_retries_when_the_nodes_allocatable_grows_and_not_on_labels() -> None:
    sched = _short_of_cpu()
    sched.set_node(NODE.copy().label("zone", "b").info())
    assert _parked(sched)
    sched.set_node(NODE.copy().alloc(memory="8Gi").info())  # more of what the pod does not ask
    assert _parked(sched)
    sched.set_node(NODE.copy().alloc(cpu="4").info())
    assert not _parked(sched)


# -- NodeName ----------------------------------------------------------------------------------------


def test_node_name_retries_only_when_a_node_is_added() -> None:
    sched, _ = make_scheduler()
    assert sched.framework.interest[plugin_names.NODE_NAME] == {ClusterEvent.NODE_ADDED}
    sched.set_node(NODE.info())
    pod = MakePod("p").req(cpu="1").info()
    sched.queue.add(pod)
    sched.queue.pop()
    sched.queue.unschedulable(pod, {plugin_names.NODE_NAME})
    sched.add_pod(MakePod("other").req(cpu="1").node("n1").info())
    sched.delete_pod("ns/other")
    sched.set_node(NODE.copy().label("zone", "b").info())
    assert _parked(sched)
    sched.set_node(MakeNode("n2").alloc(cpu="2", pods="10").info())
    assert not _parked(sched)


# -- the hooks: every event is raised by the change it names -----------------------------------------


class Rejecting(FilterPlugin):
    """A member that rejects every node and registers only ``EVENT`` (set per test)."""

    name = "Rejecting"
    event = ClusterEvent.POD_ADDED

    def __init__(self, handle: Handle) -> None:
        super().__init__(handle)
        self.events = frozenset({self.event})

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        rejected = self.handle.cluster.alive[: self.handle.cluster.n].copy()
        return FilterResult(np.zeros_like(rejected), lambda: [(rejected, "node(s) rejected")])


def _parked_for(event: ClusterEvent) -> Scheduler:
    """A scheduler with n1, a bound pod ``old`` there, and ``p`` parked by a plugin registering ``event``."""
    registry = default_registry()

    def build(handle: Handle) -> Plugin:
        plugin = Rejecting(handle)
        plugin.events = frozenset({event})
        return plugin

    registry.register_member(plugin_names.PREDICATES, predicate(None, build))
    sched = Scheduler(
        SchedulerConfig.from_yaml(config_text("priority, gang", "predicates")),
        registry,
        MemoryBackend(),
        clock=FakeClock(),
    )
    sched.set_node(NODE.info())
    sched.add_pod(MakePod("old").req(cpu="100m").label("app", "db").node("n1").info())
    sched.add_pod(MakePod("p").req(cpu="100m").info())
    attempt = sched.schedule_one()
    assert attempt is not None and not attempt.node
    queued = sched.queue.get("ns/p")
    assert queued is not None and queued.rejected_by == {"Rejecting"}
    return sched


CHANGES: dict[ClusterEvent, Callable[[Scheduler], None]] = {
    ClusterEvent.NODE_ADDED: lambda s: s.set_node(MakeNode("n2").alloc(cpu="2", pods="10").info()),
    ClusterEvent.NODE_DELETED: lambda s: s.remove_node("n1"),
    ClusterEvent.NODE_CHANGED: lambda s: s.set_node(NODE.copy().annotation("a", "b").info()),
    ClusterEvent.NODE_LABELS_CHANGED: lambda s: s.set_node(NODE.copy().label("zone", "b").info()),
    ClusterEvent.NODE_TAINTS_CHANGED: lambda s: s.set_node(NODE.copy().taint("k", "NoSchedule").info()),
    ClusterEvent.NODE_ALLOCATABLE_CHANGED: lambda s: s.set_node(NODE.copy().alloc(cpu="3").info()),
    ClusterEvent.NODE_CONDITIONS_CHANGED: lambda s: s.set_node(NODE.copy().not_ready().info()),
    ClusterEvent.POD_DELETED: lambda s: s.delete_pod("ns/old"),
    ClusterEvent.POD_BOUND: lambda s: s.add_pod(MakePod("new").req(cpu="100m").node("n1").info()),
    ClusterEvent.POD_LABELS_CHANGED: lambda s: s.add_pod(
        MakePod("old").req(cpu="100m").label("app", "web").node("n1").info()
    ),
    ClusterEvent.QUOTA_CHANGED: lambda s: s.put_object(MakePriorityClass("high").obj()),
    ClusterEvent.PODGROUP_CHANGED: lambda s: s.put_object(MakePodGroup("pg").obj()),
    ClusterEvent.NAMESPACE_CHANGED: lambda s: s.put_object(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns", "labels": {"team": "a"}}}
    ),
}
# For each event, a change that raises other events only. (POD_ADDED, gang's, is raised for the
# pending pods of the new pod's PodGroup only: tests/unit/scheduler/plugins/test_volcano_gang.py.)
UNRELATED: dict[ClusterEvent, ClusterEvent] = {
    ClusterEvent.NODE_ADDED: ClusterEvent.POD_DELETED,
    ClusterEvent.NODE_DELETED: ClusterEvent.NODE_LABELS_CHANGED,
    ClusterEvent.NODE_CHANGED: ClusterEvent.POD_BOUND,
    ClusterEvent.NODE_LABELS_CHANGED: ClusterEvent.NODE_TAINTS_CHANGED,
    ClusterEvent.NODE_TAINTS_CHANGED: ClusterEvent.NODE_LABELS_CHANGED,
    ClusterEvent.NODE_ALLOCATABLE_CHANGED: ClusterEvent.NODE_CONDITIONS_CHANGED,
    ClusterEvent.NODE_CONDITIONS_CHANGED: ClusterEvent.NODE_ALLOCATABLE_CHANGED,
    ClusterEvent.POD_DELETED: ClusterEvent.POD_LABELS_CHANGED,
    ClusterEvent.POD_BOUND: ClusterEvent.POD_DELETED,
    ClusterEvent.POD_LABELS_CHANGED: ClusterEvent.POD_BOUND,
    ClusterEvent.QUOTA_CHANGED: ClusterEvent.PODGROUP_CHANGED,
    ClusterEvent.PODGROUP_CHANGED: ClusterEvent.NODE_ADDED,
    ClusterEvent.NAMESPACE_CHANGED: ClusterEvent.QUOTA_CHANGED,
}


@pytest.mark.parametrize("event", list(CHANGES), ids=[event.value for event in CHANGES])
def test_each_event_retries_the_pods_of_a_plugin_registering_it_and_only_it(event: ClusterEvent) -> None:
    sched = _parked_for(event)
    CHANGES[UNRELATED[event]](sched)
    assert _parked(sched), f"{UNRELATED[event].value} moved a pod waiting for {event.value}"
    sched = _parked_for(event)
    CHANGES[event](sched)
    assert not _parked(sched), f"{event.value} left its pod parked"


def test_a_pod_assumed_by_this_scheduler_is_a_pod_bound() -> None:
    """A burst sees its own pods: a pod waiting for a matching pod is retried once one is placed."""
    sched = _parked_for(ClusterEvent.POD_BOUND)
    sched.framework.filter_plugins = tuple(p for p in sched.framework.filter_plugins if p.name != "Rejecting")
    sched.add_pod(MakePod("match").req(cpu="100m").info())
    assert _parked(sched)
    attempt = sched.schedule_one()
    assert attempt is not None and attempt.pod.name == "match" and attempt.node == "n1"
    assert not _parked(sched)


def test_a_plugin_that_registers_nothing_is_not_woken_by_binds_or_relabels() -> None:
    assert ClusterEvent.POD_BOUND not in DEFAULT_EVENTS
    assert ClusterEvent.POD_LABELS_CHANGED not in DEFAULT_EVENTS
    # nor by the claim status every DRA bind writes (only DynamicResources registers it)
    assert ClusterEvent.RESOURCE_CLAIM_CHANGED not in DEFAULT_EVENTS
    assert DEFAULT_EVENTS | {
        ClusterEvent.POD_BOUND,
        ClusterEvent.POD_LABELS_CHANGED,
        ClusterEvent.RESOURCE_CLAIM_CHANGED,
    } == frozenset(ClusterEvent)


def test_every_stored_kind_raises_its_events_on_put_and_delete() -> None:
    """The object store's kinds (and, once their informers store them, the placement rules' PVCs,
    PVs, StorageClasses, CSINodes and PodDisruptionBudgets) raise OBJECT_EVENTS with the objects."""
    assert set(STORED) <= set(OBJECT_EVENTS)
    for kind in (
        kinds.PERSISTENT_VOLUME_CLAIM,
        kinds.PERSISTENT_VOLUME,
        kinds.STORAGE_CLASS,
        kinds.CSI_NODE,
        kinds.POD_DISRUPTION_BUDGET,
    ):
        assert len(OBJECT_EVENTS[kind]) == 1
    seen: list[tuple[str, object, object]] = []
    sched, _ = make_scheduler()
    sched.objects.watch(lambda kind, ns, name, old, new: seen.append((kind.kind, old, new)))
    first = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}
    second = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns", "labels": {"a": "b"}}}
    sched.put_object(first)
    sched.put_object(second)
    sched.objects.delete(kinds.NAMESPACE, "", "ns")
    assert seen == [("Namespace", None, first), ("Namespace", first, second), ("Namespace", second, None)]


@pytest.mark.parametrize(
    ("kind", "status_old", "status_new"),
    [
        (kinds.PERSISTENT_VOLUME_CLAIM, {"phase": "Pending"}, {"phase": "Bound"}),
        (kinds.PERSISTENT_VOLUME, {"phase": "Available"}, {"phase": "Bound"}),
        (kinds.POD_DISRUPTION_BUDGET, {"disruptionsAllowed": 0}, {"disruptionsAllowed": 1}),
    ],
)
def test_the_feed_passes_on_the_status_changes_the_placement_rules_read(
    kind: kinds.Kind, status_old: dict[str, object], status_new: dict[str, object]
) -> None:
    old = {"kind": kind.kind, "metadata": {"name": "x"}, "spec": {}, "status": status_old}
    new = {**old, "status": status_new}
    assert object_update_matters(kind.kind, old, new)
    assert not object_update_matters(kind.kind, old, {**old, "status": {**status_old, "x": 1}})
