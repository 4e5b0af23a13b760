"""Pods bound to a node that is deleted go on counting against their quotas until they are deleted
themselves (issue 11's chaos soak found the overspend: the node's deletion released their quota at
once, while the pods stood until the pod garbage collector removed them, and new pods were bound
over the limit meanwhile). Driven through the informer feed, as in a cluster."""

from __future__ import annotations

from typing import cast

import pytest

from gpuq_k8s.common.kube.diff import Change
from gpuq_k8s.common.model.capacity_card.args import CapacityCardArgs
from gpuq_k8s.common.model.capacity_card.demand import pod_card_demand, resolve_charge
from gpuq_k8s.common.model.cards.catalog import CardCatalog
from gpuq_k8s.common.model.cards.discovery import NodeCards, discover_cards
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.scheduler.cluster.state import ClusterState
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.kube.feed import Feed
from gpuq_k8s.scheduler.plugins.capacity_scheduling import CapacityScheduling
from tests.testing.builders import MakeElasticQuota, MakeNode, MakePod, MakeQueue
from tests.testing.clock import FakeClock
from tests.testing.feed import CONFIG, NODE, POD, add, key, make_feed

QUOTA = MakeElasticQuota("q").resource_version("1").min(cpu="2").max(cpu="2")


def world() -> tuple[Scheduler, Feed, FakeClock]:
    scheduler, _, feed, clock = make_feed()
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


CARD_CONFIG = CONFIG + "  - name: capacity-card\n    arguments: {cardUnlimitedCpuMemory: true}\n"


def test_card_pods_of_a_deleted_node_keep_their_queue_card_quota() -> None:
    """capacity-card charges a pod for the card type of its node: a deleted node's card pods keep
    that charge (the node's cards stay known for them) until they are deleted themselves."""
    scheduler, _, feed, clock = make_feed(CARD_CONFIG)
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


def test_pods_bound_to_a_node_never_seen_count_from_the_start() -> None:
    """A scheduler (re)started after a node was deleted under its pods lists the pods without the
    node: they count all the same, on a ghost row the node takes over if it comes back."""
    scheduler, feed, clock = world()
    orphan = POD.copy().name("old").uid("u-old").req(cpu="2").node("gone").phase("Running").obj()
    feed.apply(add(orphan))
    assert used_cpu(scheduler) == 2
    feed.apply(add(POD.copy().name("new").uid("u-new").req(cpu="1").obj()))
    attempt = scheduler.schedule_one()
    assert attempt is not None and attempt.node == ""

    feed.apply(add(NODE.copy().name("gone").obj()))  # it was not gone after all
    row = scheduler.cluster.row_of["gone"]
    assert "ns/old" in scheduler.cluster.pods_on[row]
    feed.apply(Change("delete", key(orphan), orphan))
    clock.now += 3600
    attempt = scheduler.schedule_one()
    assert attempt is not None and attempt.node in ("gone", "n1", "n2")
    assert used_cpu(scheduler) == 1


def test_card_pods_bound_to_a_node_never_seen_are_charged_their_first_card_type() -> None:
    scheduler, _, feed, _ = make_feed(CARD_CONFIG)
    feed.apply(add(NODE.copy().name("g2").product("NVIDIA-A100").gpus(4).obj()))
    feed.apply(add(MakeQueue("q").resource_version("1").card_quota('{"NVIDIA-A100": 1}').obj()))
    card_pod = POD.copy().gpus(1).card("NVIDIA-A100").queue("q")
    feed.apply(add(card_pod.copy().name("old").uid("u-old").node("g1").phase("Running").obj()))
    feed.apply(add(card_pod.copy().name("new").uid("u-new").obj()))
    attempt = scheduler.schedule_one()
    assert attempt is not None and attempt.node == "", "bound over the Queue's card quota"


def test_resolve_charge_on_an_unknown_node_charges_each_group_its_first_candidate() -> None:
    nodes = [MakeNode(n).product(f"NVIDIA-{n}").gpus(1).info() for n in ("A100", "H100")]
    catalog = CardCatalog.build([discover_cards(node) for node in nodes])
    pod = MakePod().gpus(2).card("NVIDIA-H100|NVIDIA-A100").info()
    demand = pod_card_demand(pod, catalog)
    args = CapacityCardArgs(card_unlimited_cpu_memory=True)
    assert resolve_charge(demand, NodeCards("x"), args) == Resources({})
    assert resolve_charge(demand, NodeCards("x"), args, node_known=False) == Resources({"NVIDIA-H100": 2000})
    allowed = {"NVIDIA-H100": False, "NVIDIA-A100": True}
    charged = resolve_charge(demand, NodeCards("x"), args, allowed, node_known=False)
    assert charged == Resources({"NVIDIA-A100": 2000})


ALL_PLUGINS = (
    CARD_CONFIG
    + """\
  - name: crossquota
    arguments: {gpu-resource-names: "nvidia.com/gpu", quota-resources: "cpu", quota.cpu: "3"}
  - name: resource-strategy-fit
  - name: gpu-quota
"""
)


@pytest.mark.parametrize("ghost_after", [0, 1], ids=["ghost-first", "ghost-after-a-cpu-pod"])
def test_every_plugin_schedules_beside_a_ghost_row_it_never_heard_of_as_a_node(ghost_after: int) -> None:
    """A ghost row made for a pod of an unknown node is a row like any: every plugin's per-row
    arrays cover it (found by the soak: capacity-card's node x card-type matrix one row short, a
    ValueError in Filter for every pod after a restart that listed such a pod)."""
    scheduler, _, feed, _ = make_feed(ALL_PLUGINS)
    feed.apply(add(NODE.copy().name("g1").product("NVIDIA-A100").gpus(4).obj()))
    feed.apply(add(NODE.copy().name("c1").obj()))
    feed.apply(add(MakeQueue("q").resource_version("1").card_quota('{"NVIDIA-A100": 4}').obj()))
    card_pod = POD.copy().gpus(1).card("NVIDIA-A100").queue("q")
    ghost = card_pod.copy().name("old").uid("u-old").node("gone").phase("Running").obj()
    for i, pod in enumerate((POD, card_pod, POD, card_pod)):
        if i == ghost_after:
            feed.apply(add(ghost))
        feed.apply(add(pod.copy().name(f"p{i}").uid(f"u{i}").obj()))
        attempt = scheduler.schedule_one()
        assert attempt is not None and attempt.node in ("g1", "c1"), attempt


def test_a_listener_subscribing_late_is_told_of_every_ghost_row() -> None:
    cluster = ClusterState()
    cluster.set_node(NODE.copy().name("n1").info())
    cluster.add_pod(POD.copy().name("old").node("gone").phase("Running").info())
    seen: list[tuple[int, bool]] = []

    class Listener:
        def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
            seen.append((row, new is not None))

        def pod_added(self, pod: PodInfo, row: int) -> None:
            seen.append((row, True))

        def pod_removed(self, pod: PodInfo, row: int) -> None:
            raise AssertionError("nothing is removed")

    cluster.subscribe(Listener())
    assert seen == [(0, True), (1, False), (1, True)]  # the node, the ghost row, the pod on it
