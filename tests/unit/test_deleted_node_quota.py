"""Pods bound to a node that is deleted go on counting against their quotas until they are deleted
themselves (issue 11's chaos soak found the overspend: the node's deletion released their quota at
once, while the pods stood until the pod garbage collector removed them, and new pods were bound
over the limit meanwhile). Driven through the informer feed, as in a cluster."""

from __future__ import annotations

from typing import cast

from common.kube.diff import Change
from common.model.config import SchedulerConfig
from scheduler.cycle import Scheduler
from scheduler.kube.feed import Feed
from scheduler.memory_backend import MemoryBackend
from scheduler.plugins import default_registry
from scheduler.plugins.capacity_scheduling import CapacityScheduling
from tests.builders import MakeElasticQuota, MakeQueue
from tests.unit.test_kube_backend_feed import CONFIG, NODE, POD, Clock, add, key

QUOTA = MakeElasticQuota("q").resource_version("1").min(cpu="2").max(cpu="2")


def world() -> tuple[Scheduler, Feed, Clock]:
    clock = Clock()
    backend = MemoryBackend()
    scheduler = Scheduler(SchedulerConfig.from_yaml(CONFIG), default_registry(), backend, clock=clock)
    backend.objects = scheduler.objects
    feed = Feed(scheduler)
    feed.ready = True
    for obj in (NODE.copy().name("n1").obj(), NODE.copy().name("n2").obj(), QUOTA.obj()):
        feed.apply(add(obj))
    return scheduler, feed, clock


def used_cpu(scheduler: Scheduler) -> int:
    plugin = cast(CapacityScheduling, scheduler.framework.plugin("capacity-scheduling"))
    return int(plugin.infos.used_numbers("ns").get("cpu", 0))


def test_pods_of_a_deleted_node_keep_their_quota_until_they_are_deleted() -> None:
    scheduler, feed, clock = world()
    orphan = POD.copy().name("old").uid("u-old").req(cpu="2").node("n1").phase("Running").obj()
    feed.apply(add(orphan))
    assert used_cpu(scheduler) == 2
    feed.apply(Change("delete", ("", "n1"), NODE.copy().name("n1").obj()))
    assert used_cpu(scheduler) == 2  # the pod still exists, bound: the quota is still spent

    feed.apply(add(POD.copy().name("new").uid("u-new").req(cpu="1").obj()))
    attempt = scheduler.schedule_one()
    assert attempt is not None and attempt.node == "", "bound over the ElasticQuota max"
    assert "max" in attempt.message

    feed.apply(Change("delete", key(orphan), orphan))  # the pod garbage collector's delete
    assert used_cpu(scheduler) == 0
    clock.now += 3600  # past any backoff
    attempt = scheduler.schedule_one()
    assert attempt is not None and attempt.node == "n2"
    assert used_cpu(scheduler) == 1


def test_a_pod_seen_bound_to_a_deleted_node_counts_there_too() -> None:
    """An update of a pod on a deleted node (its status, say) keeps it where it counts."""
    scheduler, feed, _ = world()
    orphan = POD.copy().name("old").uid("u-old").req(cpu="2").node("n1").phase("Running").obj()
    feed.apply(add(orphan))
    feed.apply(Change("delete", ("", "n1"), NODE.copy().name("n1").obj()))
    updated = POD.copy().name("old").uid("u-old").req(cpu="2").node("n1").phase("Running")
    updated.resource_version("2").label("touched", "yes")
    feed.apply(Change("update", key(orphan), updated.obj(), orphan))
    assert used_cpu(scheduler) == 2
    assert scheduler.cluster.pods["ns/old"].labels.get("touched") == "yes"


CARD_CONFIG = """\
actions: "enqueue, allocate, preempt"
tiers:
- plugins:
  - name: priority
- plugins:
  - name: predicates
  - name: capacity-card
    arguments: {cardUnlimitedCpuMemory: true}
"""


def test_card_pods_of_a_deleted_node_keep_their_queue_card_quota() -> None:
    """capacity-card charges a pod for the card type of its node: a deleted node's card pods keep
    that charge (the node's cards stay known for them) until they are deleted themselves."""
    clock = Clock()
    backend = MemoryBackend()
    scheduler = Scheduler(SchedulerConfig.from_yaml(CARD_CONFIG), default_registry(), backend, clock=clock)
    backend.objects = scheduler.objects
    feed = Feed(scheduler)
    feed.ready = True
    for name in ("g1", "g2"):
        feed.apply(add(NODE.copy().name(name).product("NVIDIA-A100").gpus(4).obj()))
    feed.apply(add(MakeQueue("q").resource_version("1").card_quota('{"NVIDIA-A100": 1}').obj()))
    card_pod = POD.copy().gpus(1).card("NVIDIA-A100").queue("q")
    orphan = card_pod.copy().name("old").uid("u-old").node("g1").phase("Running").obj()
    feed.apply(add(orphan))
    feed.apply(Change("delete", ("", "g1"), NODE.copy().name("g1").obj()))

    feed.apply(add(card_pod.copy().name("new").uid("u-new").obj()))
    attempt = scheduler.schedule_one()
    assert attempt is not None and attempt.node == "", "bound over the Queue's card quota"
    assert "quota" in attempt.message

    feed.apply(Change("delete", key(orphan), orphan))
    clock.now += 3600
    attempt = scheduler.schedule_one()
    assert attempt is not None and attempt.node == "g2"
