"""Requeueing for the volume rules (kube-scheduler's EventsToRegister and queueing hints): a pod a
volume rule rejected is retried on the storage events that can help it, through the informer feed as
the cluster scheduler receives them, and not on events that cannot (design.md "Placement rules:
volumes")."""

from __future__ import annotations

from typing import Any

from gpuq_k8s.common.kube.diff import Change
from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.kube.feed import Feed, object_update_matters
from tests.testing.builders import MakeCSINode, MakeNode, MakePod, MakePV, MakePVC, MakeStorageClass
from tests.testing.feed import add, make_feed, update

ZONE = "topology.kubernetes.io/zone"
CONFIG = """\
actions: "enqueue, allocate"
tiers:
- plugins:
  - name: predicates
"""


def parked(scheduler: Scheduler, key: str) -> bool:
    queued = scheduler.queue.get(key)
    assert queued is not None
    return queued.pool == "unschedulable"


def setup(*objects: dict[str, Any]) -> tuple[Scheduler, Feed]:
    scheduler, _, feed, _ = make_feed(CONFIG)
    for obj in objects:
        feed.apply(add(obj))
    feed.apply(add(MakeNode("n1").alloc(cpu="8", pods="110").label(ZONE, "a").resource_version("1").obj()))
    return scheduler, feed


def test_a_pod_over_the_volume_limit_is_retried_when_its_node_may_attach_more() -> None:
    """NodeVolumeLimits: a CSINode update can raise the limit; a claim of another namespace cannot."""
    csi_node = MakeCSINode("n1").driver("ebs.csi.aws.com", 1).resource_version("1")
    scheduler, feed = setup(
        MakePV("pv-a").csi("ebs.csi.aws.com", "vol-a").obj(),
        MakePV("pv-b").csi("ebs.csi.aws.com", "vol-b").obj(),
        MakePVC("a", "ns").bound("pv-a").obj(),
        MakePVC("b", "ns").bound("pv-b").obj(),
        csi_node.obj(),
    )
    feed.apply(add(MakePod("user", "ns").pvc("a").node("n1").obj()))
    feed.apply(add(MakePod("p", "ns").pvc("b").obj()))
    attempt = scheduler.schedule_one()
    assert attempt is not None and "node(s) exceed max volume count" in attempt.message
    assert parked(scheduler, "ns/p")
    assert plugin_names.NODE_VOLUME_LIMITS in scheduler.queue.get("ns/p").rejected_by  # type: ignore[union-attr]
    feed.apply(add(MakePVC("b", "elsewhere").obj()))
    assert parked(scheduler, "ns/p")
    feed.apply(
        update(csi_node.obj(), MakeCSINode("n1").driver("ebs.csi.aws.com", 2).resource_version("2").obj())
    )
    assert not parked(scheduler, "ns/p")


def test_a_pod_of_another_zone_is_retried_when_the_volume_or_the_node_changes() -> None:
    """VolumeZone: a volume's relabelling or the node's can help; a StorageClass of another mode
    is an event VolumeZone registered (StorageClass added) and moves it too, as upstream without
    queueing hints."""
    volume = MakePV("pv").label(ZONE, "b").resource_version("1")
    scheduler, feed = setup(volume.obj(), MakePVC("data", "ns").bound("pv").obj())
    feed.apply(add(MakePod("p", "ns").pvc("data").obj()))
    attempt = scheduler.schedule_one()
    assert attempt is not None and "node(s) had no available volume zone" in attempt.message
    assert parked(scheduler, "ns/p")
    feed.apply(update(volume.obj(), volume.copy().label(ZONE, "a").resource_version("2").obj()))
    assert not parked(scheduler, "ns/p")


def test_a_pod_rejected_for_cpu_is_not_retried_by_storage_events() -> None:
    scheduler, feed = setup(MakeStorageClass("sc").obj())
    feed.apply(add(MakePod("p", "ns").req(cpu="100").obj()))
    scheduler.schedule_one()
    assert parked(scheduler, "ns/p")
    feed.apply(add(MakePV("pv").obj()))
    feed.apply(add(MakePVC("x", "ns").obj()))
    feed.apply(add(MakeCSINode("n1").obj()))
    assert parked(scheduler, "ns/p")


def test_the_phase_a_controller_writes_is_news_to_the_volume_rules() -> None:
    """A claim's or a volume's status.phase is the PV controller's, an input of the rules (Bound, Lost,
    Available): such an update reaches the plugins; other status changes do not."""
    claim = MakePVC("data", "ns").resource_version("1")
    assert object_update_matters("PersistentVolumeClaim", claim.obj(), claim.copy().phase("Bound").obj())
    with_capacity = claim.copy().obj() | {"status": {"phase": "Pending", "capacity": {"storage": "1Gi"}}}
    assert not object_update_matters("PersistentVolumeClaim", claim.obj(), with_capacity)
    volume = MakePV("pv").resource_version("1")
    assert object_update_matters("PersistentVolume", volume.obj(), volume.copy().phase("Released").obj())


def test_an_update_that_matters_not_still_refreshes_the_stored_copy() -> None:
    """A resourceVersion-only update reaches no plugin, but the store holds the new version: the
    PreBind writes made from it are conditional on the version the apiserver has."""
    scheduler, feed = setup()
    claim = MakePVC("data", "ns").resource_version("1")
    feed.apply(add(claim.obj()))
    newer = claim.copy().resource_version("7").obj()
    feed.apply(Change("update", ("ns", "data"), newer, claim.obj()))
    stored = scheduler.objects.get(kinds.PERSISTENT_VOLUME_CLAIM, "ns", "data")
    assert stored is not None and stored["metadata"]["resourceVersion"] == "7"
