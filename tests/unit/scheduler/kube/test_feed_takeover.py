"""What a standby's PodGroups are when it takes the Lease (scheduler/kube/feed.py ``adopt_admitted``,
scheduler/groups.py): a standby is fed every change but runs no enqueue action, and a PodGroup's
phase is the leader's output, not an input; so its groups follow their members only. On taking the
Lease it must hold what a fresh start would read: the groups the old leader admitted are Inqueue, and
no pod is held for the enqueue of a group that is not Pending.

Found by the day in the life (CI, seed 28): after the leader was killed, the standby that took over
kept the four pods of a gang the old leader had admitted (and preempted for) held for the enqueue
action, with no refusal, while the recount found room for them for minutes."""

from __future__ import annotations

from typing import Any

from gpuq_k8s.common.kube.informer import InformerSet
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.kube.feed import Feed
from tests.testing.builders import MakeElasticQuota, MakeNode, MakePod, MakePodGroup
from tests.testing.config import scheduler_config
from tests.testing.feed import InformerCache, add, key, make_feed, update

GPU = "nvidia.com/gpu"
CONFIG = scheduler_config("name: capacity-scheduling")  # priority, gang; predicates, capacity-scheduling
NODE = MakeNode().resource_version("1").alloc(cpu="16", memory="64Gi", pods="110").gpus(8)
MEMBER = (
    MakePod()
    .image("x")
    .req(cpu="1")
    .gpus(2)
    .priority(0)
    .phase("Pending")
    .resource_version("1")
    .annotation("scheduling.k8s.io/group-name", "pg")
)


def standby(min_member: int, pods: int) -> tuple[Scheduler, Feed, dict[str, Any], list[dict[str, Any]]]:
    """A replica fed as a standby: a node, an ElasticQuota, PodGroup ``pg`` as created (no status:
    Pending) and its pending pods."""
    scheduler, _, feed, _ = make_feed(CONFIG)
    feed.apply(add(NODE.copy().name("n1").obj()))
    feed.apply(add(MakeElasticQuota("q").resource_version("1").min({GPU: "8"}).max({GPU: "8"}).obj()))
    group = MakePodGroup("pg").min_member(min_member).resource_version("1").obj()
    feed.apply(add(group))
    members = [MEMBER.copy().name(f"m-{i}").uid(f"u-{i}").obj() for i in range(pods)]
    for pod in members:
        feed.apply(add(pod))
    return scheduler, feed, group, members


def with_phase(obj: dict[str, Any], phase: str, version: str) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}, "status": {"phase": phase}}


def podgroup_cache(*groups: dict[str, Any]) -> InformerSet:
    informers = InformerSet([])
    informers.informers = {"PodGroup": InformerCache({key(g): g for g in groups})}  # type: ignore[dict-item]
    return informers


def test_a_standby_adopts_the_podgroups_the_old_leader_admitted_on_taking_the_lease() -> None:
    scheduler, feed, group, _ = standby(min_member=2, pods=2)
    tracker = scheduler.podgroups
    assert tracker.held["ns/pg"] == {"ns/m-0", "ns/m-1"}
    # The leader admits it: a status write, which the standby does not take as an input.
    admitted = with_phase(group, "Inqueue", "2")
    feed.apply(update(group, admitted))
    assert tracker.groups["ns/pg"].phase == "Pending"
    assert scheduler.schedule_one() is None  # held: nothing to try

    feed.informers = podgroup_cache(admitted)
    assert feed.adopt_admitted() == ["ns/pg"]
    assert tracker.groups["ns/pg"].phase == "Inqueue"
    assert not tracker.held.get("ns/pg")
    assert "ns/pg" not in tracker.enqueue_refusals
    placed = []
    while (attempt := scheduler.schedule_one()) is not None:
        placed.append((attempt.pod.key, attempt.node))
    # The gang's two pods waited in Permit for each other and were placed together.
    assert sorted(placed) == [("ns/m-0", "n1"), ("ns/m-1", "n1")]
    assert feed.adopt_admitted() == []  # once


def test_only_groups_admitted_by_the_old_leader_and_pending_here_are_adopted() -> None:
    scheduler, feed, group, _ = standby(min_member=2, pods=2)
    # The API's phase Pending (not admitted) and a group unknown here change nothing.
    other = MakePodGroup("other").min_member(1).resource_version("1").obj()
    feed.informers = podgroup_cache(with_phase(group, "Pending", "2"), with_phase(other, "Inqueue", "2"))
    assert feed.adopt_admitted() == []
    assert scheduler.podgroups.groups["ns/pg"].phase == "Pending"
    assert scheduler.podgroups.held["ns/pg"] == {"ns/m-0", "ns/m-1"}


def test_pods_held_for_a_group_its_members_make_running_then_completed_are_queued() -> None:
    """The day's case: an elastic gang (minMember 2 of 4) seen by a standby, its four pods held while
    it is Pending. The leader binds two (Running here too, from its members) and they succeed
    (Completed: every placed pod finished), while the other two wait for room. The standby takes
    over: those two no longer wait for the enqueue action (the group is not Pending) and are queued
    and placed, as on a fresh start; a bound pod is no longer listed as held."""
    scheduler, feed, _, members = standby(min_member=2, pods=4)
    tracker = scheduler.podgroups
    assert tracker.held["ns/pg"] == {"ns/m-0", "ns/m-1", "ns/m-2", "ns/m-3"}
    bound = []
    for pod in members[:2]:
        after = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "2"}}
        after["spec"] = {**pod["spec"], "nodeName": "n1"}
        feed.apply(update(pod, after))
        bound.append(after)
    assert tracker.groups["ns/pg"].phase == "Running"
    assert not tracker.held.get("ns/pg")
    for pod in bound:
        done = {
            **pod,
            "metadata": {**pod["metadata"], "resourceVersion": "3"},
            "status": {"phase": "Succeeded"},
        }
        feed.apply(update(pod, done))
    assert tracker.groups["ns/pg"].phase == "Completed"
    placed = []
    while (attempt := scheduler.schedule_one()) is not None:
        placed.append((attempt.pod.key, attempt.node))
    assert sorted(placed) == [("ns/m-2", "n1"), ("ns/m-3", "n1")]
