"""The reserve action and the reservation plugin in gpuq's pod-at-a-time cycle (scheduler/actions/
reserve.py, scheduler/plugins/reservation.py; design.md Semantics 15): a starving job is elected, nodes
are locked for it one reserve step at a time, locked nodes take no other job's pods, and the lock ends
when the target job is placed, gone, or its lock times out. Volcano's design
(docs/design/job-resource-reservation-design.md): "These nodes will be locked and no pod can be
scheduled to them until the target job is scheduled"."""

from __future__ import annotations

from typing import Any

from gpuq_k8s.common.model.reservation import Lock
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from tests.testing.builders import MakeNode, MakePod, MakePodGroup
from tests.testing.clock import FakeClock
from tests.testing.config import config_text
from tests.testing.scheduler import make_scheduler

ACTIONS = "enqueue, reserve, allocate, backfill"
NODE = MakeNode().alloc(cpu="4", memory="16Gi", pods="110")


def _scheduler(
    *, arguments: dict[str, Any] | None = None, switches: dict[str, Any] | None = None
) -> tuple[Scheduler, MemoryBackend, FakeClock]:
    """Two 4-cpu nodes, each running a 3-cpu pod; a 4-cpu pod of priority 100 (the starving job)."""
    clock = FakeClock()
    config = config_text(
        "priority, gang, reservation",
        "predicates",
        actions=ACTIONS,
        arguments={"reservation": arguments} if arguments else None,
        switches={"reservation": switches} if switches else None,
    )
    sched, backend = make_scheduler(config=config, clock=clock)
    for name in ("a", "b"):
        sched.set_node(NODE.copy().name(name).info())
        sched.add_pod(MakePod(f"filler-{name}").req(cpu="3").node(name).info())
    sched.add_pod(MakePod("big").req(cpu="4").priority(100).created("2026-01-01T00:00:00Z").info())
    _drain(sched)
    return sched, backend, clock


def _drain(sched: Scheduler) -> None:
    sched.run_enqueue()
    while sched.schedule_one() is not None or sched.run_enqueue():
        pass


def _lock(sched: Scheduler) -> Lock | None:
    return sched.framework.reservation_lock


def test_the_starving_job_is_elected_and_one_node_locked_per_step() -> None:
    sched, _, _ = _scheduler()
    assert "Insufficient cpu" in sched.reasons["ns/big"]
    assert sched.run_reserve() is False
    lock = _lock(sched)
    # Both nodes have 1 cpu idle: equal idles go to the last node by name (Volcano's LessEqual loop).
    assert lock is not None and (lock.target, lock.nodes) == ("Pod/ns/big", ("b",))
    sched.run_reserve()
    lock = _lock(sched)
    assert lock is not None and lock.nodes == ("b", "a")
    sched.run_reserve()  # every node locked: nothing more to lock
    assert _lock(sched) == lock


def test_locked_nodes_take_no_pod_of_another_job_and_the_target_gets_the_room() -> None:
    sched, backend, clock = _scheduler()
    sched.run_reserve()  # b locked for big
    sched.add_pod(MakePod("small-1").req(cpu="1").info())
    sched.add_pod(MakePod("small-2").req(cpu="1").info())
    _drain(sched)
    # small-1 takes a's last cpu; small-2 would have fitted b, which is locked.
    assert backend.bindings == {"ns/small-1": "a"}
    assert "1 node(s) locked for the target job Pod/ns/big (reservation)" in sched.reasons["ns/small-2"]
    # The filler on b leaves: the room goes to the target job, not to small-2.
    sched.delete_pod("ns/filler-b")
    clock.now = 60.0  # past big's backoff
    _drain(sched)
    assert backend.bindings["ns/big"] == "b"
    assert "ns/small-2" not in backend.bindings
    # The next reserve step sees the target placed: the lock is released, small-2 retried at once,
    # and, still waiting, it is the next target job (Volcano's next session elects it too).
    assert sched.run_reserve() is True
    lock = _lock(sched)
    assert lock is not None and lock.target == "Pod/ns/small-2"
    assert sched.queue.has_active()


def test_without_the_lock_the_small_pod_takes_the_room_the_starving_job_waits_for() -> None:
    """The same cluster without reserve: what the lock prevents (Volcano's motivation, issue 13)."""
    clock = FakeClock()
    config = config_text("priority, gang", "predicates", actions="enqueue, allocate, backfill")
    sched, backend = make_scheduler(config=config, clock=clock)
    for name in ("a", "b"):
        sched.set_node(NODE.copy().name(name).info())
        sched.add_pod(MakePod(f"filler-{name}").req(cpu="3").node(name).info())
    sched.add_pod(MakePod("big").req(cpu="4").priority(100).info())
    sched.add_pod(MakePod("small-1").req(cpu="1").info())
    sched.add_pod(MakePod("small-2").req(cpu="1").info())
    _drain(sched)
    assert backend.bindings == {"ns/small-1": "a", "ns/small-2": "b"}


def test_a_gang_is_the_target_until_minmember_of_its_pods_are_placed() -> None:
    clock = FakeClock()
    config = config_text("priority, gang, reservation", "predicates", actions=ACTIONS)
    sched, backend = make_scheduler(config=config, clock=clock)
    for name in ("a", "b"):
        sched.set_node(NODE.copy().name(name).info())
        sched.add_pod(MakePod(f"filler-{name}").req(cpu="3").node(name).info())
    sched.put_object(MakePodGroup("train", "ml").min_member(2).obj())
    for i in range(2):
        sched.add_pod(MakePod(f"train-{i}", "ml").group("train").req(cpu="2").info())
    _drain(sched)
    sched.run_reserve()
    sched.run_reserve()
    lock = _lock(sched)
    assert lock is not None and (lock.target, lock.nodes) == ("PodGroup/ml/train", ("b", "a"))
    sched.add_pod(MakePod("small").req(cpu="1").info())
    _drain(sched)
    assert "ns/small" not in backend.bindings  # both nodes locked for the gang
    sched.delete_pod("ns/filler-a")
    sched.delete_pod("ns/filler-b")
    clock.now = 60.0  # past the gang's pods' backoff
    _drain(sched)
    assert {backend.bindings["ml/train-0"], backend.bindings["ml/train-1"]} <= {"a", "b"}
    assert sched.run_reserve() is True and _lock(sched) is None
    _drain(sched)
    assert "ns/small" in backend.bindings


def test_the_lock_times_out_and_the_job_goes_behind_the_other_candidates() -> None:
    sched, _, clock = _scheduler(arguments={"lockTimeoutSeconds": 30})
    sched.add_pod(MakePod("other").req(cpu="4").priority(1).created("2026-01-02T00:00:00Z").info())
    _drain(sched)
    sched.run_reserve()
    lock = _lock(sched)
    assert lock is not None and lock.target == "Pod/ns/big"  # priority 100 before 1
    clock.now = 29.0
    assert sched.run_reserve() is False
    clock.now = 30.0
    assert sched.run_reserve() is True  # timed out: released, and the next candidate elected
    lock = _lock(sched)
    assert lock is not None and (lock.target, lock.nodes, lock.elected_at) == ("Pod/ns/other", ("b",), 30.0)
    clock.now = 60.0
    sched.run_reserve()  # other's lock timed out too: every candidate had its turn, big again
    lock = _lock(sched)
    assert lock is not None and lock.target == "Pod/ns/big"


def test_a_target_deleted_releases_the_lock() -> None:
    sched, _, _ = _scheduler()
    sched.run_reserve()
    sched.delete_pod("ns/big")
    assert sched.run_reserve() is True
    assert _lock(sched) is None


def test_a_pod_no_node_can_ever_take_is_not_elected() -> None:
    """Only a refusal freed room can cure makes a job a candidate: a pod whose node selector no node
    matches (unresolvable) would keep nodes locked for nothing."""
    clock = FakeClock()
    config = config_text("priority, gang, reservation", "predicates", actions=ACTIONS)
    sched, _ = make_scheduler(config=config, clock=clock)
    sched.set_node(NODE.copy().name("a").info())
    sched.add_pod(MakePod("nowhere").req(cpu="1").priority(100).node_selector({"zone": "mars"}).info())
    _drain(sched)
    assert "ns/nowhere" in sched.reasons
    sched.run_reserve()
    assert _lock(sched) is None


def test_enable_reserved_nodes_false_elects_but_locks_nothing() -> None:
    sched, backend, _ = _scheduler(switches={"enableReservedNodes": False})
    sched.run_reserve()
    lock = _lock(sched)
    assert lock is not None and (lock.target, lock.nodes) == ("Pod/ns/big", ())
    sched.add_pod(MakePod("small-1").req(cpu="1").info())
    sched.add_pod(MakePod("small-2").req(cpu="1").info())
    _drain(sched)
    assert backend.bindings == {"ns/small-1": "a", "ns/small-2": "b"}


def test_enable_target_job_false_elects_nothing() -> None:
    sched, _, _ = _scheduler(switches={"enableTargetJob": False})
    sched.run_reserve()
    assert _lock(sched) is None
