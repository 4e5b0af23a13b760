"""capacity-scheduling's enqueue in the cycle (design.md Semantics 4, "Enqueue"): a PodGroup its
ElasticQuota cannot hold stays Pending, so it reserves nothing in its queue's card quota.

Found by the day in the life (issue 28): training gangs of a team over its guarantee were admitted by
capacity-card's job-mode check while the ElasticQuotas' guaranteed pool had no room for them; Inqueue,
they reserved the training Queue's card quota, and a single pod of the other team that fitted every
quota waited until they gave up, for 92 s."""

from __future__ import annotations

import json

import pytest

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.outlook import NEVER, outlook_of
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from tests.testing.builders import GPU, MakeElasticQuota, MakeNode, MakePod, MakePodGroup, MakeQueue
from tests.testing.config import config_text
from tests.testing.scheduler import make_scheduler

A100 = "NVIDIA-A100"
NODE = MakeNode("gpu-1").product(A100).alloc(cpu="64", memory="512Gi", pods="110", **{GPU: "16"})
CONFIG = config_text("priority, gang", "predicates, capacity-card, capacity-scheduling")


def _pod(name: str, ns: str, gpus: int) -> MakePod:
    return MakePod(name, ns).req(cpu="1").gpus(gpus).card(A100).queue("training")


def _cluster(card_quota: int, *, a: int, b: int) -> tuple[Scheduler, MemoryBackend]:
    """Teams a and b, each ElasticQuota min 4 max 16 GPUs (the guaranteed pool: 8), one Queue
    ``training`` with ``card_quota`` A100; ``a`` and ``b`` GPUs already running per team."""
    sched, backend = make_scheduler(config=CONFIG)
    sched.set_node(NODE.info())
    queue = (
        MakeQueue("training").card_quota(json.dumps({A100: card_quota})).capability(cpu="100", memory="1Ti")
    )
    sched.put_object(queue.obj())
    for ns in ("a", "b"):
        sched.put_object(MakeElasticQuota("eq", ns).min({GPU: "4"}).max({GPU: "16"}).obj())
    for ns, count in (("a", a), ("b", b)):
        if count:
            sched.add_pod(_pod("running", ns, count).node("gpu-1").info())
    return sched, backend


def _gang(sched: Scheduler, ns: str, name: str, pods: int, gpus: int) -> None:
    sched.put_object(MakePodGroup(name, ns).queue("training").min_member(pods).obj())
    for i in range(pods):
        sched.add_pod(_pod(f"{name}-{i}", ns, gpus).group(name).info())


def _run(sched: Scheduler) -> None:
    sched.run_enqueue()
    while sched.schedule_one() is not None or sched.run_enqueue():
        pass


def test_a_gang_the_guaranteed_pool_cannot_hold_stays_pending_and_reserves_no_cards() -> None:
    # a runs 4 (its min), b 2: the pool (8) has 2 left. a's gang asks 4 more, beyond a's own min.
    sched, backend = _cluster(10, a=4, b=2)
    _gang(sched, "a", "gang", 2, 2)
    sched.run_enqueue()  # the queue's card quota has room for it (6 + 4 <= 10): the ElasticQuota has not
    assert sched.podgroups.groups["a/gang"].phase == "Pending"
    refusal = sched.podgroups.enqueue_refusals["a/gang"]
    assert "the sum of all ElasticQuota min (guaranteed pool) by PodGroup a/gang" in refusal
    sched.add_pod(_pod("single", "b", 2).info())  # within b's min and the pool's room
    _run(sched)
    # The queue's card quota (10) holds 6 running + the single pod's 2: the gang reserved nothing.
    assert backend.bindings == {"b/single": "gpu-1"}
    warnings = [e for e in backend.events if e.obj == "PodGroup/a/gang"]
    # Once; then the card quota (8 + 4 > 10) refuses it too, capacity-card's tier-order first.
    assert [e.reason for e in warnings] == ["InsufficientElasticQuota", "InsufficientScalarQuota"]


def test_a_gang_within_its_own_min_is_enqueued_and_takes_back_what_is_borrowed() -> None:
    # b borrows: 8 of the pool's 8. a's gang asks 4: within a's own min, so reclaim can make room.
    sched, backend = _cluster(16, a=0, b=8)
    _gang(sched, "a", "gang", 2, 2)
    sched.run_enqueue()
    assert sched.podgroups.groups["a/gang"].phase == "Inqueue"
    _run(sched)
    assert list(backend.evictions) == ["b/running"]  # capacity-scheduling takes b's borrowing back


def test_jobs_already_inqueue_count_against_the_quota() -> None:
    # a runs 2: a first gang of 6 is Inqueue (its pods not placed yet) and fills the guaranteed pool
    # (2 + 6 = 8); a second of 4 would make 12.
    sched, _ = _cluster(32, a=2, b=0)
    _gang(sched, "a", "first", 2, 3)
    sched.run_enqueue()
    assert sched.podgroups.groups["a/first"].phase == "Inqueue"
    _gang(sched, "a", "second", 2, 2)
    sched.run_enqueue()
    assert sched.podgroups.groups["a/second"].phase == "Pending"
    refusal = sched.podgroups.enqueue_refusals["a/second"]
    assert "(guaranteed pool) by PodGroup a/second with the jobs already Inqueue" in refusal
    assert "requested 4, available 0, used 8, limit 8" in refusal
    _run(sched)  # the first gang runs (its pods charge it now, it reserves nothing): 8 + 4 > 8 still
    assert sched.podgroups.groups["a/first"].phase == "Running"
    assert sched.podgroups.groups["a/second"].phase == "Pending"


def test_a_gang_over_max_itself_is_never_enqueued() -> None:
    sched, backend = _cluster(32, a=0, b=0)
    _gang(sched, "a", "huge", 3, 6)  # 18 > max 16
    _run(sched)
    assert backend.bindings == {}
    assert sched.podgroups.groups["a/huge"].phase == "Pending"
    assert outlook_of(sched.podgroups.enqueue_refusals["a/huge"]) == NEVER


@pytest.mark.parametrize("namespace", ["a", "free"])
def test_a_gang_that_fits_is_enqueued_and_runs(namespace: str) -> None:
    sched, backend = _cluster(16, a=2, b=2)
    _gang(sched, namespace, "gang", 2, 2)
    _run(sched)
    assert sorted(backend.bindings) == [f"{namespace}/gang-0", f"{namespace}/gang-1"]


def test_a_job_a_later_enqueue_plugin_refuses_reserves_nothing_in_the_elastic_quota() -> None:
    """volcano pkg/scheduler/plugins/capacity/capacity_test.go TestJobEnqueuedOnOtherPluginsReject:
    the quota counts a job Inqueue only once every enqueue plugin admitted it. Here capacity-scheduling
    comes first in its tier and admits ``a/first`` (4 GPUs fit a's max of 4), capacity-card after it
    refuses it (its Queue ``small`` has 2 A100); ``a/second`` of the same size, in a Queue with room,
    must then be admitted: had ``a/first`` been counted Inqueue, 4 + 4 > 4 would keep it out."""
    config = config_text("priority, gang", "predicates, capacity-scheduling, capacity-card")
    sched, backend = make_scheduler(config=config)
    sched.set_node(NODE.info())
    for name, cards in (("small", 2), ("training", 16)):
        queue = MakeQueue(name).card_quota(json.dumps({A100: cards})).capability(cpu="100", memory="1Ti")
        sched.put_object(queue.obj())
    sched.put_object(MakeElasticQuota("eq", "a").max({GPU: "4"}).obj())
    sched.put_object(MakePodGroup("first", "a").queue("small").min_member(2).obj())
    for i in range(2):
        sched.add_pod(
            MakePod(f"first-{i}", "a").req(cpu="1").gpus(2).card(A100).queue("small").group("first").info()
        )
    sched.run_enqueue()
    assert sched.podgroups.groups["a/first"].phase == "Pending"
    assert "small" in sched.podgroups.enqueue_refusals["a/first"]  # capacity-card's refusal
    _gang(sched, "a", "second", 2, 2)
    _run(sched)
    assert sched.podgroups.groups["a/second"].phase == "Running"
    assert sorted(backend.bindings) == ["a/second-0", "a/second-1"]


def test_a_podgroup_deleted_while_inqueue_reserves_nothing_any_more() -> None:
    """A job deleted while its PodGroup is Inqueue (its pods not placed): its reservation goes with it,
    else the pool stays full for every later job (found reviewing the long day's stuck gang: the
    reservations of Inqueue groups were only dropped on a phase change)."""
    sched, _ = _cluster(32, a=2, b=0)
    _gang(sched, "a", "first", 2, 3)
    sched.run_enqueue()
    assert sched.podgroups.groups["a/first"].phase == "Inqueue"  # reserves 6: the pool's 8 is full
    _gang(sched, "a", "second", 2, 2)
    sched.run_enqueue()
    assert sched.podgroups.groups["a/second"].phase == "Pending"
    for i in range(2):
        sched.delete_pod(f"a/first-{i}")
    sched.objects.delete(kinds.POD_GROUP, "a", "first")
    sched.run_enqueue()
    assert sched.podgroups.groups["a/second"].phase == "Inqueue", sched.podgroups.enqueue_refusals


def test_a_podgroup_found_inqueue_after_a_restart_reserves_as_one_enqueued_here() -> None:
    """A new leader finds the first gang Inqueue (its previous leader admitted it; its pods not
    placed): it reserves the pool's room as it would had this scheduler enqueued it, so the second
    gang is kept Pending here as it was before the restart."""
    sched, _ = _cluster(32, a=2, b=0)
    admitted = MakePodGroup("first", "a").queue("training").min_member(2).obj()
    admitted["status"] = {"phase": "Inqueue"}
    sched.put_object(admitted)
    for i in range(2):
        sched.add_pod(_pod(f"first-{i}", "a", 3).group("first").info())
    assert sched.podgroups.groups["a/first"].phase == "Inqueue"
    _gang(sched, "a", "second", 2, 2)
    sched.run_enqueue()
    assert sched.podgroups.groups["a/second"].phase == "Pending"
    assert "with the jobs already Inqueue" in sched.podgroups.enqueue_refusals["a/second"]


def test_a_job_whose_pods_were_tried_and_found_no_node_keeps_no_job_out() -> None:
    """Found by the day in the life (issue 28): Inqueue gangs whose pods found no node held 28 GPUs of
    the guaranteed pool for minutes; two gangs that fitted the quota and the nodes waited behind them
    ("used 452, limit 432 ... with the jobs already Inqueue", the recount 424). A job's reservation
    holds room for it on its way to running: once every member was tried and parked, it reserves
    nothing until one is tried again (common.model.elastic.enqueue.reserves)."""
    sched, backend = _cluster(32, a=0, b=4)  # b runs its min: the pool (8) has 4 left
    # a's gang asks 4, within a's own min: admitted; but its pods want a zone no node is in.
    sched.put_object(MakePodGroup("stuck", "a").queue("training").min_member(2).obj())
    for i in range(2):
        sched.add_pod(_pod(f"stuck-{i}", "a", 2).group("stuck").node_selector({"zone": "east"}).info())
    sched.run_enqueue()
    assert sched.podgroups.groups["a/stuck"].phase == "Inqueue"
    _gang(sched, "b", "next", 2, 1)  # b borrows 2: the pool holds 4 used + 4 reserved
    sched.run_enqueue()
    assert sched.podgroups.groups["b/next"].phase == "Pending"  # a's pods not tried yet: it reserves
    assert "used 8, limit 8" in sched.podgroups.enqueue_refusals["b/next"]
    _run(sched)  # a's pods are tried and parked (no node in zone east); b's gang goes in and binds
    assert {q.pod.key: q.pool for q in sched.queue.pods()} == {
        "a/stuck-0": "unschedulable",
        "a/stuck-1": "unschedulable",
    }
    assert sorted(backend.bindings) == ["b/next-0", "b/next-1"]
    # A node in zone east: a's pods may fit now, they are due for a retry, and reserve again.
    sched.set_node(
        MakeNode("gpu-2")
        .product(A100)
        .label("zone", "east")
        .alloc(cpu="64", memory="512Gi", pods="110", **{GPU: "16"})
        .info()
    )
    assert {q.pool for q in sched.queue.pods()} <= {"backoff", "active"}
    _gang(sched, "b", "third", 2, 1)  # 6 used + 4 reserved + 2 > 8
    sched.run_enqueue()
    assert sched.podgroups.groups["b/third"].phase == "Pending"
    assert "used 10, limit 8" in sched.podgroups.enqueue_refusals["b/third"]


def test_a_job_admitted_in_a_pass_counts_for_the_next_of_the_same_pass() -> None:
    """The reservations are read once per pass of the enqueue action and kept current with the jobs it
    admits: the first gang (6 of the pool's 8 with a's 2 running) is admitted, the second (4) in the
    same pass is refused as it is in a pass of its own (test_jobs_already_inqueue_count_against_the_quota)."""
    sched, _ = _cluster(32, a=2, b=0)
    _gang(sched, "a", "first", 2, 3)
    _gang(sched, "a", "second", 2, 2)
    assert sched.run_enqueue() == 1
    assert sched.podgroups.groups["a/first"].phase == "Inqueue"
    assert sched.podgroups.groups["a/second"].phase == "Pending"
    assert "requested 4, available 0, used 8, limit 8" in sched.podgroups.enqueue_refusals["a/second"]
