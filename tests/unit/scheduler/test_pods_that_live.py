"""What the scheduler must get right once pods run, finish and terminate (issue 28, design.md
Semantics 18), driven through the informer feed as in a cluster, for every quota kind:

- a pod's quota (and its node's room) is returned when it reaches Succeeded or Failed, while the
  pod object still exists, not when it is deleted;
- a pod being deleted with a grace period (a preemption victim, or anyone's delete) holds its node's
  room and its quota until it is gone, as kube-scheduler counts terminating pods;
- a preemptor is nominated; the room and quota its victims free are held for it against pods of
  lower or equal priority (not higher); it binds after its victims leave, on its nominated node.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuq_k8s.common.kube.diff import Change
from gpuq_k8s.common.model import kinds
from gpuq_k8s.scheduler.backend import Result
from gpuq_k8s.scheduler.cycle import Attempt, Scheduler
from gpuq_k8s.scheduler.framework.status_sync import StatusPatch, merge_status_patches
from gpuq_k8s.scheduler.kube.feed import Feed
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from tests.testing.builders import (
    GPU,
    MakeElasticQuota,
    MakeGPUResourceQuota,
    MakeNode,
    MakePod,
    MakePodGroup,
    MakeQueue,
)
from tests.testing.clock import FakeClock as Clock
from tests.testing.feed import add, key, update
from tests.testing.feed import make_feed as make

TF = "tensor-fusion.ai/"
BASE = """\
actions: "enqueue, allocate, preempt"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
"""
NODE = MakeNode().resource_version("1").alloc(cpu="16", memory="64Gi", pods="110")
POD = MakePod().image("x").req(cpu="1").priority(0).phase("Pending").resource_version("1")

# quota kind -> (the plugin entry, objects, the node template, the pod template): two such pods
# never fit at once, by that kind alone.
KINDS: dict[str, tuple[str, list[dict[str, Any]], MakeNode, MakePod]] = {
    "node room": ("", [], NODE.copy().gpus(1), POD.copy().gpus(1)),
    "ElasticQuota": (
        "  - name: capacity-scheduling\n",
        [MakeElasticQuota("q").resource_version("1").min({GPU: "1"}).max({GPU: "1"}).obj()],
        NODE.copy().gpus(8),
        POD.copy().gpus(1),
    ),
    "capacity-card": (
        "  - name: capacity-card\n    arguments: {cardUnlimitedCpuMemory: true}\n",
        [MakeQueue("q").resource_version("1").card_quota('{"NVIDIA-A100": 1}').obj()],
        NODE.copy().product("NVIDIA-A100").gpus(8),
        POD.copy().gpus(1).card("NVIDIA-A100").queue("q"),
    ),
    "GPUResourceQuota": (
        "  - name: gpu-quota\n",
        [MakeGPUResourceQuota("q").resource_version("1").total(maxWorkers=1).obj()],
        NODE.copy().gpus(8),
        POD.copy().gpus(1).annotations({f"{TF}tflops-request": "1", f"{TF}vram-request": "1Gi"}),
    ),
    "crossquota": (
        '  - name: crossquota\n    arguments: {gpu-resource-names: "nvidia.com/gpu", quota-resources: "cpu",'
        ' quota.cpu: "3"}\n',
        [],
        NODE.copy().gpus(8),
        POD.copy().req(cpu="2"),  # a CPU pod on a GPU node: 2 of the node's 3 crossquota cpu
    ),
}


def world(kind: str) -> tuple[Scheduler, MemoryBackend, Feed, Clock, MakePod]:
    entry, objects, node, pod = KINDS[kind]
    scheduler, backend, feed, clock = make(BASE + entry)
    feed.apply(add(node.copy().name("n1").obj()))  # one node: the per-node kinds block on it
    for obj in objects:
        feed.apply(add(obj))
    return scheduler, backend, feed, clock, pod


def attempt(scheduler: Scheduler, clock: Clock) -> Attempt:
    clock.now += 3600  # past any backoff
    scheduler.queue.flush_unschedulable(0)
    tried = scheduler.schedule_one()
    assert tried is not None
    return tried


def changed(obj: dict[str, Any], version: str, **status: Any) -> dict[str, Any]:
    new = {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}
    new["status"] = {**(obj.get("status") or {}), **status}
    return new


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_quota_comes_back_at_succeeded_and_a_terminating_pod_keeps_it(kind: str) -> None:
    scheduler, backend, feed, clock, pod = world(kind)
    holder = pod.copy().name("holder").uid("u-holder").node("n1").phase("Running").obj()
    feed.apply(add(holder))
    feed.apply(add(pod.copy().name("waiter").uid("u-waiter").obj()))
    blocked = attempt(scheduler, clock)
    assert blocked.node == "" and not backend.bindings, f"{kind}: bound beside the holder"

    # Being deleted with a grace period: still running, still counted.
    terminating = changed(holder, "2")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    feed.apply(update(holder, terminating))
    still = attempt(scheduler, clock)
    assert still.node == "" and not backend.bindings, f"{kind}: a terminating pod's quota was handed out"

    # Failed (or Succeeded) while terminating: finished, its quota back though the pod still exists.
    finished = changed(terminating, "3", phase="Failed")
    feed.apply(update(terminating, finished))
    assert "ns/holder" not in scheduler.cluster.pods
    bound = attempt(scheduler, clock)
    assert bound.node == "n1" and backend.bindings == {"ns/waiter": "n1"}, kind


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_succeeded_pod_gives_its_quota_back_before_it_is_deleted(kind: str) -> None:
    scheduler, _backend, feed, clock, pod = world(kind)
    holder = pod.copy().name("holder").uid("u-holder").node("n1").phase("Running").obj()
    feed.apply(add(holder))
    feed.apply(add(pod.copy().name("waiter").uid("u-waiter").obj()))
    assert attempt(scheduler, clock).node == ""
    feed.apply(update(holder, changed(holder, "2", phase="Succeeded")))
    assert attempt(scheduler, clock).node == "n1", kind


# -- the nominator in the cycle ---------------------------------------------------------------------

PREEMPTING = BASE + "  - name: capacity-scheduling\n"


def preempted_world(
    extra: list[dict[str, Any]] | None = None,
) -> tuple[Scheduler, MemoryBackend, Feed, Clock]:
    """n1 (2 cpu) full with a low-priority victim; a high-priority pod preempts it; the eviction is
    accepted and the victim terminates (as in a cluster) until the test delivers its delete."""
    scheduler, backend, feed, clock = make(PREEMPTING)
    backend.evict_result = Result.DONE
    feed.apply(add(NODE.copy().name("n1").alloc(cpu="2").obj()))
    for obj in extra or ():
        feed.apply(add(obj))
    victim = POD.copy().name("victim").uid("u-victim").req(cpu="2").node("n1").phase("Running").obj()
    feed.apply(add(victim))
    feed.apply(add(POD.copy().name("high").uid("u-high").req(cpu="2").priority(100).obj()))
    first = scheduler.schedule_one()
    assert first is not None and first.nominated == "n1" and backend.evictions.keys() == {"ns/victim"}
    assert scheduler.nominator.node_of("ns/high") == "n1"
    assert backend.conditions["ns/high"].nominated_node == "n1"
    deleting = changed(
        victim,
        "2",
        conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}],
    )
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    feed.apply(update(victim, deleting))
    while scheduler.schedule_one() is not None:  # the activated retry: parked, not eligible
        pass
    assert backend.evictions.keys() == {"ns/victim"} and not backend.bindings
    feed.apply(Change("delete", key(deleting), deleting))
    return scheduler, backend, feed, clock


@pytest.mark.parametrize(("priority", "takes_it"), [(50, False), (100, False), (200, True)])
def test_the_room_a_preemption_freed_is_held_for_its_preemptor(priority: int, takes_it: bool) -> None:
    """The victim is gone; before the preemptor's backoff ends, another pod is tried on the freed
    room: one of lower or equal priority does not get it (the nominated pod holds it), one of higher
    priority does (kube-scheduler's addGENominatedPods)."""
    scheduler, backend, feed, clock = preempted_world()
    feed.apply(add(POD.copy().name("other").uid("u-other").req(cpu="2").priority(priority).obj()))
    other = scheduler.schedule_one()
    assert other is not None and other.pod.name == "other", "the preemptor is still in its backoff"
    assert (other.node == "n1") is takes_it
    if takes_it:
        return
    assert "ns/other" not in backend.evictions  # nothing to preempt: the room is the preemptor's
    clock.now += 3600
    bound = scheduler.schedule_one()
    assert bound is not None and bound.pod.name == "high" and bound.node == "n1"
    assert scheduler.nominator.node_of("ns/high") == ""


def test_the_quota_a_preemption_freed_is_held_for_its_preemptor() -> None:
    """The same for quota: an ElasticQuota (max 2 cpu) full with the victim; once it is gone, a
    lower-priority pod of the namespace finds a node with room (n2) but not the quota: the
    nominated preemptor's request counts against it."""
    quota = MakeElasticQuota("q").resource_version("1").min(cpu="2").max(cpu="2").obj()
    scheduler, _backend, feed, clock = preempted_world([quota, NODE.copy().name("n2").alloc(cpu="8").obj()])
    feed.apply(add(POD.copy().name("other").uid("u-other").req(cpu="2").priority(50).obj()))
    other = scheduler.schedule_one()
    assert other is not None and other.pod.name == "other" and other.node == ""
    assert "max" in other.message
    clock.now += 3600
    bound = scheduler.schedule_one()
    assert bound is not None and bound.pod.name == "high" and bound.node == "n1"


def test_a_nomination_read_back_from_the_api_is_held_and_not_preempted_for_again() -> None:
    """After a restart (or a leader switch) the nomination comes from the pod's
    status.nominatedNodeName, and the victim's DisruptionTarget condition says it is on its way: the
    preemptor waits for it instead of evicting another pod."""
    scheduler, backend, feed, clock = make(PREEMPTING)
    backend.evict_result = Result.DONE
    feed.apply(add(NODE.copy().name("n1").alloc(cpu="4").obj()))
    victim = POD.copy().name("victim").uid("u-victim").req(cpu="2").node("n1").phase("Running").obj()
    victim["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    victim["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    ]
    other = POD.copy().name("other").uid("u-other").req(cpu="2").node("n1").phase("Running").obj()
    high = POD.copy().name("high").uid("u-high").req(cpu="2").priority(100).obj()
    high["status"]["nominatedNodeName"] = "n1"
    for obj in (victim, other, high):
        feed.apply(add(obj))
    assert scheduler.nominator.node_of("ns/high") == "n1"
    waiting = scheduler.schedule_one()
    assert waiting is not None and waiting.node == "" and "not eligible to preempt again" in waiting.message
    assert not backend.evictions  # "other" is left alone
    feed.apply(Change("delete", key(victim), victim))
    clock.now += 3600
    bound = scheduler.schedule_one()
    assert bound is not None and bound.node == "n1"


def test_a_nomination_to_a_removed_node_is_dropped() -> None:
    scheduler, _, feed, _ = preempted_world()
    feed.apply(Change("delete", ("", "n1"), NODE.copy().name("n1").obj()))
    assert scheduler.nominator.node_of("ns/high") == ""


def test_a_preemption_that_finds_nothing_any_more_clears_the_nomination() -> None:
    """kube-scheduler: no candidate clears nominatedNodeName (written as a null in the condition
    patch, "" here)."""
    scheduler, backend, feed, clock = preempted_world()
    # The room is taken by a pod of higher priority than the preemptor, that nothing may evict.
    feed.apply(add(POD.copy().name("top").uid("u-top").req(cpu="2").node("n1").priority(1000).obj()))
    clock.now += 3600
    retry = scheduler.schedule_one()
    assert retry is not None and retry.pod.name == "high" and retry.node == ""
    assert scheduler.nominator.node_of("ns/high") == ""
    assert backend.conditions["ns/high"].nominated_node == ""
    # The watch's echo of the earlier write (nominatedNodeName n1) arrives late: a status-only
    # update, and this scheduler decided since; it does not bring the nomination back.
    high = POD.copy().name("high").uid("u-high").req(cpu="2").priority(100).obj()
    echo = changed(high, "3", nominatedNodeName="n1")
    feed.apply(update(high, echo))
    assert scheduler.nominator.node_of("ns/high") == ""


# -- PodGroup and Queue status ----------------------------------------------------------------------------


def test_a_podgroup_goes_pending_inqueue_running_completed_and_its_queue_counts_it() -> None:
    """Volcano's jobStatus through the cycle: enqueue admits the group (Inqueue), its two pods bound
    and running make it Running (status.running 2), both finished make it Completed (succeeded 1,
    failed 1); each sync writes the group's status and its Queue's PodGroups by phase, beside the
    Queue's other status fields (capacity-card's ``allocated``, kept as they are)."""
    scheduler, backend, feed, _clock = make(BASE + "  - name: capacity-card\n")
    feed.apply(add(NODE.copy().name("n1").obj()))
    queue = MakeQueue("q").resource_version("1").capability(cpu="8", memory="16Gi").obj()
    queue["status"] = {"state": "Open"}
    feed.apply(add(queue))
    feed.apply(add(MakePodGroup("pg").queue("q").min_member(2).resource_version("1").obj()))
    member = POD.copy().annotation("scheduling.k8s.io/group-name", "pg")
    pods = [member.copy().name(f"m-{i}").uid(f"u-{i}").obj() for i in range(2)]

    def status(kind: str, name: str, namespace: str = "ns") -> dict[str, Any]:
        scheduler.sync_status()
        return dict(backend.statuses.get((kind, namespace if kind == "PodGroup" else "", name)) or {})

    scheduler.run_enqueue()
    assert status("PodGroup", "pg")["phase"] == "Inqueue"
    zero = {"pending": 0, "running": 0, "unknown": 0, "inqueue": 0, "completed": 0}
    assert status("Queue", "q") == {"state": "Open", "allocated": {}, **zero, "inqueue": 1}
    for pod in pods:
        feed.apply(add(pod))
    while scheduler.schedule_one() is not None:
        pass
    assert backend.bindings == {"ns/m-0": "n1", "ns/m-1": "n1"}
    bound = [changed(p, "2") | {"spec": {**p["spec"], "nodeName": "n1"}} for p in pods]
    running = [changed(b, "3", phase="Running") for b in bound]
    for before, after in zip(pods, bound, strict=True):
        feed.apply(update(before, after))
    for before, after in zip(bound, running, strict=True):
        feed.apply(update(before, after))
    pg = status("PodGroup", "pg")
    assert pg["phase"] == "Running" and pg["running"] == 2
    assert status("Queue", "q") == {"state": "Open", "allocated": {"cpu": "2"}, **zero, "running": 1}
    feed.apply(update(running[0], changed(running[0], "4", phase="Succeeded")))
    pg = status("PodGroup", "pg")
    assert pg["phase"] == "Running" and pg["running"] == 1 and pg["succeeded"] == 1
    feed.apply(update(running[1], changed(running[1], "4", phase="Failed")))
    pg = status("PodGroup", "pg")
    assert pg == {"phase": "Completed", "running": 0, "succeeded": 1, "failed": 1}
    assert status("Queue", "q") == {"state": "Open", "allocated": {}, **zero, "completed": 1}
    # The Job's pods are deleted afterwards: the group stays Completed.
    for pod in running:
        feed.apply(Change("delete", key(pod), pod))
    scheduler.sync_status()
    assert scheduler.podgroups.groups["ns/pg"].phase == "Completed"


def test_status_patches_of_one_object_from_two_sources_keep_both_changes() -> None:
    base = {"state": "Open", "allocated": {"cpu": "1"}, "running": 1}
    patches = [
        StatusPatch(kinds.QUEUE, "", "q", {**base, "allocated": {"cpu": "2"}}),  # capacity-card
        # the counts
        StatusPatch(kinds.QUEUE, "", "q", {"state": "Open", "allocated": {"cpu": "1"}, "completed": 1}),
        StatusPatch(kinds.QUEUE, "", "other", {"x": 1}),
    ]
    merged = merge_status_patches(patches, lambda kind, ns, name: base)
    assert [p.status for p in merged] == [
        {"state": "Open", "allocated": {"cpu": "2"}, "completed": 1},
        {"x": 1},
    ]


def test_a_gangs_finished_pods_count_for_the_rest_of_it() -> None:
    """Found by the day in the life: a gang (minMember 2) whose first pod ran and succeeded before
    the second was placed (a fault between their binds) kept the second pending for ever: gang's
    PreFilter counted 1 pod, fewer than minMember. Volcano counts Succeeded tasks (ValidTaskNum,
    ReadyTaskNum): the second pod is placed, and the group completes."""
    scheduler, backend, feed, clock = make(BASE)
    feed.apply(add(NODE.copy().name("n1").obj()))
    group = MakePodGroup("pg").min_member(2).resource_version("1").obj()
    group["status"] = {"phase": "Running"}
    feed.apply(add(group))
    member = POD.copy().annotation("scheduling.k8s.io/group-name", "pg")
    first = member.copy().name("m-0").uid("u-0").node("n1").phase("Running").obj()
    feed.apply(add(first))
    feed.apply(update(first, changed(first, "2", phase="Succeeded")))
    # Below minMember with one pod finished and none placed: Pending again, as Volcano's jobStatus
    # makes it; the enqueue action admits it once more.
    assert scheduler.podgroups.groups["ns/pg"].phase == "Pending"
    feed.apply(add(member.copy().name("m-1").uid("u-1").obj()))
    assert scheduler.run_enqueue() == 1
    placed = attempt(scheduler, clock)
    assert placed.node == "n1" and backend.bindings == {"ns/m-1": "n1"}, placed.message
    scheduler.podgroups.pod_bound(placed.pod.with_node_name("n1"))
    assert scheduler.podgroups.groups["ns/pg"].phase == "Running"


def test_a_nominated_pod_that_no_node_can_help_any_more_holds_no_room() -> None:
    """Found by the day in the life: a nominated pod whose attempts became unschedulable-and-
    unresolvable (here: it names a PodGroup that does not exist) skipped PostFilter and kept its
    nomination, holding its room and quota against every lower-priority pod for as long as it waited.
    An attempt no preemption can help clears it, as kube-scheduler's no-candidate preemption does."""
    scheduler, _backend, feed, clock = preempted_world()
    high = POD.copy().name("high").uid("u-high").req(cpu="2").priority(100).obj()
    grouped = changed(high, "2")
    grouped["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "missing"}
    feed.apply(update(high, grouped))
    assert scheduler.nominator.node_of("ns/high") == "n1"  # an update keeps it
    clock.now += 3600
    retry = scheduler.schedule_one()
    assert retry is not None and retry.pod.name == "high" and "not found" in retry.message
    assert scheduler.nominator.node_of("ns/high") == ""
    feed.apply(add(POD.copy().name("other").uid("u-other").req(cpu="2").priority(50).obj()))
    other = scheduler.schedule_one()
    assert other is not None and other.node == "n1"  # the room is free for it now


def test_terminating_and_evicted_gang_members_are_not_ready_members() -> None:
    """Found by the day in the life: a running gang (minMember 2 of 4) gave a member to each of
    three preemptions in a row, down to one: its victims, terminating or with their eviction in
    flight, still counted as ready members, so each preemption saw members to spare."""
    scheduler, _, feed, _ = make(BASE)
    feed.apply(add(NODE.copy().name("n1").obj()))
    feed.apply(add(MakePodGroup("pg").min_member(2).resource_version("1").obj()))
    member = POD.copy().annotation("scheduling.k8s.io/group-name", "pg").node("n1").phase("Running")
    pods = [member.copy().name(f"m-{i}").uid(f"u-{i}").obj() for i in range(4)]
    for pod in pods:
        feed.apply(add(pod))
    group = scheduler.podgroups.groups["ns/pg"]
    assert scheduler.podgroups.ready_members(group) == 4
    terminating = changed(pods[0], "2")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    feed.apply(update(pods[0], terminating))
    assert scheduler.podgroups.ready_members(group) == 3
    scheduler.preempted["ns/m-1"] = scheduler.cluster.pods["ns/m-1"]  # its eviction is on its way
    assert scheduler.podgroups.ready_members(group) == 2
    assert "ns/m-0" in scheduler.cluster.pods and "ns/m-1" in scheduler.cluster.pods  # still counted


def test_the_pods_of_a_gang_left_partly_placed_go_first() -> None:
    """A leader lost between a gang's binds leaves it partly placed (Kubernetes binds pod by pod);
    the next leader sees one member bound and the other pending: that pod is tried first, before
    pods of higher priority, so the gang completes at the first room."""
    scheduler, _, feed, _ = make(BASE)
    feed.apply(add(NODE.copy().name("n1").alloc(cpu="2").obj()))
    admitted = MakePodGroup("pg").min_member(2).resource_version("1").obj()
    admitted["status"] = {"phase": "Inqueue"}  # as the lost leader wrote it
    feed.apply(add(admitted))
    member = POD.copy().annotation("scheduling.k8s.io/group-name", "pg")
    feed.apply(add(member.copy().name("m-0").uid("u-0").node("n1").phase("Running").obj()))
    feed.apply(add(POD.copy().name("urgent").uid("u-urgent").priority(1000).obj()))
    feed.apply(add(member.copy().name("m-1").uid("u-1").obj()))
    first = scheduler.schedule_one()
    assert first is not None and first.pod.name == "m-1" and first.node == "n1"
    second = scheduler.schedule_one()
    assert second is not None and second.pod.name == "urgent" and second.node == ""  # no room left
