"""The PreBind extension point through the whole cycle on the in-memory backend (scheduler/cycle.py
``_bind``, scheduler/memory_backend.py): VolumeBinding's plans bind a ``WaitForFirstConsumer`` claim
to a static volume or have it provisioned before the pod is bound; two pods never take one volume; a
plan that fails or is refused unreserves and requeues the pod with the reason; a generic plan (as DRA
will write one) is rolled back when the pod's binding fails; and the volume rules retry a rejected pod
on the storage events that can help, not on others."""

from __future__ import annotations

from typing import Any

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.prebind import DONE, ApiWrite, PreBindPlan
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import PreBindPlugin
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins.volume_binding import VolumeBinding
from tests.testing.builders import MakeCSINode, MakeNode, MakePod, MakePV, MakePVC, MakeStorageClass
from tests.testing.clock import FakeClock
from tests.testing.scheduler import make_scheduler, plugin_of

ZONE = "topology.kubernetes.io/zone"
LOCAL = MakeStorageClass("local").obj()
FAST = MakeStorageClass("fast", "csi.example.com").obj()


clock = FakeClock()


def cluster(*objects: Any, backend: MemoryBackend | None = None) -> tuple[Scheduler, MemoryBackend]:
    scheduler, memory = make_scheduler(backend=backend or MemoryBackend(), clock=clock)
    for obj in objects:
        meta = obj["metadata"]
        if obj["kind"] == "PersistentVolumeClaim" and "uid" not in meta:
            meta["uid"] = f"uid-{meta['name']}"  # as the apiserver gives every object one
        scheduler.put_object(obj)
    for name, zone in (("a1", "a"), ("b1", "b")):
        scheduler.set_node(MakeNode(name).alloc(cpu="8", memory="8Gi", pods="110").label(ZONE, zone).info())
    memory.run_controllers()
    return scheduler, memory


def pod(name: str, *claims: str) -> PodInfo:
    built = MakePod(name, "ns").req(cpu="1")
    for claim in claims:
        built.pvc(claim)
    return built.info()


def claim_of(scheduler: Scheduler, name: str) -> dict[str, Any]:
    obj = scheduler.objects.get(kinds.PERSISTENT_VOLUME_CLAIM, "ns", name)
    assert obj is not None
    return dict(obj)


def test_a_wait_for_first_consumer_claim_is_bound_to_a_static_volume_of_the_chosen_zone() -> None:
    """Only zone b has a volume: the pod goes there; PreBind pre-binds the volume (claimRef), the PV
    controller binds the claim, and the pod is bound after."""
    scheduler, memory = cluster(
        LOCAL,
        MakePV("pv-b", "local").capacity("10Gi").node_affinity({ZONE: ["b"]}).obj(),
        MakePVC("data", "ns", "local").uid("u-data").request("5Gi").obj(),
    )
    scheduler.add_pod(pod("p", "data"))
    attempt = scheduler.schedule_one()
    assert attempt is not None and attempt.node == "b1"
    assert memory.bindings == {"ns/p": "b1"}
    assert [(key, ref) for key, ref, _ in memory.writes] == [("ns/p", "PersistentVolume/pv-b")]
    data = claim_of(scheduler, "data")
    assert data["spec"]["volumeName"] == "pv-b" and data["status"]["phase"] == "Bound"
    volume = scheduler.objects.get(kinds.PERSISTENT_VOLUME, "", "pv-b")
    assert volume is not None and volume["spec"]["claimRef"]["uid"] == "u-data"
    assert not len(plugin_of(scheduler, VolumeBinding).ledger)


def test_a_claim_to_provision_gets_the_selected_node_and_a_volume_of_its_topology() -> None:
    """No static volume: the class provisions; PreBind writes volume.kubernetes.io/selected-node, the
    provisioner creates a volume pinned to the node's zone (the CSINode's topology key), the claim is
    bound, then the pod. A second pod of the claim follows it to that zone."""
    scheduler, memory = cluster(
        FAST,
        MakeCSINode("a1").driver("csi.example.com", topology_keys=(ZONE,)).obj(),
        MakeCSINode("b1").driver("csi.example.com", topology_keys=(ZONE,)).obj(),
        MakePVC("data", "ns", "fast").uid("u-data").request("5Gi").access_modes("ReadWriteMany").obj(),
    )
    scheduler.add_pod(pod("p", "data"))
    first = scheduler.schedule_one()
    assert first is not None and first.node == "a1"  # equal scores: the first node name
    data = claim_of(scheduler, "data")
    assert data["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == "a1"
    assert data["spec"]["volumeName"] == "pvc-u-data"
    volume = scheduler.objects.get(kinds.PERSISTENT_VOLUME, "", "pvc-u-data")
    assert volume is not None
    term = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"] == [{"key": ZONE, "operator": "In", "values": ["a"]}]
    scheduler.set_node(MakeNode("a1").alloc(cpu="1", memory="8Gi", pods="110").label(ZONE, "a").info())
    scheduler.add_pod(pod("q", "data"))
    second = scheduler.schedule_one()
    assert second is not None and second.node == ""  # a1 is full; b1 is out of the volume's zone
    assert "didn't match PersistentVolume's node affinity" in second.message
    assert memory.bindings == {"ns/p": "a1"}


def test_two_pods_never_take_the_same_volume() -> None:
    """One volume fits both claims. Once the first pod's Reserve has assumed it, the second pod's
    Filter finds no volume on any node (kube-scheduler's reason); unreserved, it is free again. Through
    the whole cycle the first pod gets it and the second waits."""
    scheduler, memory = cluster(
        LOCAL,
        MakePV("pv-1", "local").capacity("10Gi").obj(),
        MakePVC("one", "ns", "local").request("1Gi").obj(),
        MakePVC("two", "ns", "local").request("1Gi").obj(),
    )
    plugin = plugin_of(scheduler, VolumeBinding)
    first, second = pod("p", "one"), pod("q", "two")
    state = CycleState()
    assert plugin.pre_filter(state, first).is_success
    row = scheduler.cluster.row_of["a1"]
    assert plugin.reserve(state, first.with_node_name("a1"), row).is_success

    def rows_for_second() -> list[bool]:
        other = CycleState()
        assert plugin.pre_filter(other, second).is_success
        result = plugin.filter(other, second)
        return [bool(result.passed[r]) for r in scheduler.cluster.live_rows()]

    assert rows_for_second() == [False, False]
    plugin.unreserve(state, first.with_node_name("a1"), row)
    assert rows_for_second() == [True, True]
    scheduler.add_pod(first)
    scheduler.add_pod(second)
    attempts = [scheduler.schedule_one(), scheduler.schedule_one()]
    assert [a.node if a is not None else None for a in attempts] == ["a1", ""]
    assert memory.bindings == {"ns/p": "a1"}
    assert "2 node(s) didn't find available persistent volumes to bind" in scheduler.reasons["ns/q"]


def test_a_plan_that_times_out_unreserves_and_requeues_the_pod_with_the_reason() -> None:
    """Without a PV controller the claim is never bound: the plan times out (in memory, at once), the
    pod is unreserved (the volume is free again, nothing counts on the node) and retried after its
    backoff with PodScheduled=False, SchedulerError, and kube-scheduler's wrapped message."""
    memory = MemoryBackend()
    memory.controllers = ()
    scheduler, _ = cluster(
        LOCAL,
        MakePV("pv-1", "local").capacity("10Gi").obj(),
        MakePVC("data", "ns", "local").obj(),
        backend=memory,
    )
    scheduler.add_pod(pod("p", "data"))
    attempt = scheduler.schedule_one()
    assert attempt is not None
    condition = memory.conditions["ns/p"]
    assert condition.reason == "SchedulerError"
    assert (
        condition.message == 'running PreBind plugin "VolumeBinding": binding volumes: timed out after 600s'
    )
    assert memory.bindings == {} and "ns/p" not in scheduler.cluster.pods
    assert not len(plugin_of(scheduler, VolumeBinding).ledger)
    queued = scheduler.queue.get("ns/p")
    assert queued is not None and queued.pool == "backoff"


def test_a_write_refused_for_a_stale_version_fails_the_binding() -> None:
    """The volume changed between the decision and the write (another writer): the conditional write
    is refused as the apiserver refuses it (Conflict), the pod is requeued."""
    scheduler, memory = cluster(
        LOCAL,
        MakePV("pv-1", "local").capacity("10Gi").resource_version("1").obj(),
        MakePVC("data", "ns", "local").obj(),
    )
    scheduler.add_pod(pod("p", "data"))
    plugin = plugin_of(scheduler, VolumeBinding)
    state = CycleState()
    info = pod("p", "data")
    assert plugin.pre_filter(state, info).is_success
    row = scheduler.cluster.row_of["a1"]
    assert plugin.reserve(state, info.with_node_name("a1"), row).is_success
    plan = plugin.pre_bind(state, info.with_node_name("a1"), row)
    assert isinstance(plan, PreBindPlan)
    scheduler.put_object(
        MakePV("pv-1", "local").capacity("10Gi").label("touched", "yes").resource_version("999").obj()
    )
    outcomes: list[Any] = []
    memory.pre_bind(info.with_node_name("a1"), "a1", [plan], outcomes.append)
    (outcome,) = outcomes
    assert not outcome.ok
    assert "PersistentVolume/pv-1: Operation cannot be fulfilled on persistentvolumes" in outcome.message


class Allocate(PreBindPlugin):
    """A DRA-like PreBind: writes a claim's allocation, rolls it back when the binding fails."""

    name = "Allocate"

    def pre_bind(self, state: CycleState, pod: PodInfo, row: int) -> PreBindPlan | Status:
        write = ApiWrite(
            kinds.PERSISTENT_VOLUME_CLAIM, "ns", "data", {"status": {"allocated": pod.node_name}}
        )
        undo = ApiWrite(kinds.PERSISTENT_VOLUME_CLAIM, "ns", "data", {"status": {"allocated": None}})
        return PreBindPlan(self.name, (write,), lambda lookup: DONE, rollback=(undo,))


def test_a_generic_plan_is_written_before_the_bind_and_rolled_back_when_the_bind_fails() -> None:
    scheduler, memory = cluster(MakePVC("data", "ns").obj())
    scheduler.framework.pre_bind_plugins = (
        *scheduler.framework.pre_bind_plugins,
        Allocate(scheduler.framework),
    )
    memory.fail_binds.add("ns/p")
    scheduler.add_pod(MakePod("p", "ns").req(cpu="1").info())
    scheduler.schedule_one()
    assert [ref for _, ref, _ in memory.writes] == ["PersistentVolumeClaim/ns/data"]
    assert memory.rolled_back == [("ns/p", "PersistentVolumeClaim/ns/data")]
    assert "allocated" not in claim_of(scheduler, "data").get("status", {})
    memory.fail_binds.clear()
    scheduler.queue.activate("ns/p")
    scheduler.schedule_one()
    assert memory.bindings == {"ns/p": "a1"}
    assert claim_of(scheduler, "data")["status"]["allocated"] == "a1"


def test_a_pod_waiting_for_its_claim_is_retried_when_the_claim_appears_not_before() -> None:
    """Rejected for a missing claim (unresolvable, parked under VolumeRestrictions' and
    VolumeBinding's interest), the pod is retried by the claim's creation; a claim of another
    namespace, or another name, does not move it."""
    scheduler, memory = cluster(LOCAL, MakePV("pv-1", "local").capacity("10Gi").obj())
    scheduler.add_pod(pod("p", "data"))
    failed = scheduler.schedule_one()
    assert failed is not None and 'persistentvolumeclaim "data" not found' in failed.message
    queued = scheduler.queue.get("ns/p")
    assert queued is not None and queued.pool == "unschedulable"
    assert plugin_names.VOLUME_RESTRICTIONS in queued.rejected_by
    scheduler.put_object(MakePVC("data", "other", "local").obj())
    scheduler.put_object(MakePVC("logs", "ns", "local").obj())
    assert queued.pool == "unschedulable"
    scheduler.put_object(MakePVC("data", "ns", "local").uid("u-data").obj())
    assert queued.pool in ("active", "backoff")
    clock.now += 60
    bound = scheduler.schedule_one()
    assert bound is not None and bound.node and memory.bindings == {"ns/p": bound.node}


def test_a_pod_with_an_unbound_immediate_claim_is_retried_when_the_pv_controller_binds_it() -> None:
    memory = MemoryBackend()
    memory.controllers = ()  # the claim stays unbound until the test plays the controller
    scheduler, memory = cluster(
        MakeStorageClass("std", "", mode="Immediate").obj(),
        MakePVC("data", "ns", "std").obj(),
        backend=memory,
    )
    scheduler.add_pod(pod("p", "data"))
    failed = scheduler.schedule_one()
    assert failed is not None and "pod has unbound immediate PersistentVolumeClaims" in failed.message
    queued = scheduler.queue.get("ns/p")
    assert queued is not None and queued.pool == "unschedulable"
    # VolumeBinding registered StorageClass and PersistentVolume events: each retries the pod (which
    # fails again, the claim still unbound); the claim's binding lets it through.
    for event in (MakeStorageClass("other", "").obj(), MakePV("pv-1", "std").capacity("1Gi").obj()):
        scheduler.put_object(event)
        assert queued.pool != "unschedulable", event["kind"]
        clock.now += 60
        again = scheduler.schedule_one()
        assert again is not None and not again.node and queued.pool == "unschedulable"
    scheduler.put_object(MakePVC("data", "ns", "std").uid("u-data").bound("pv-1").obj())
    assert queued.pool != "unschedulable"
    clock.now += 60
    placed = scheduler.schedule_one()
    assert placed is not None and placed.node == "a1" and memory.bindings == {"ns/p": "a1"}
