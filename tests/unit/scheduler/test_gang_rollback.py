"""Gangs that do not reach their quorum (scheduler/gang_cycle.py through scheduler/cycle.py's
reject_waiting, expire_waiting and a member's failure; the rule: common/model/gang.py
rollback_on_failure, its table in tests/unit/common/model/test_gang_rollback_rule.py; the gang
plugin): a member no node takes rolls its waiting siblings back at once
when its gang can no longer reach minMember with the members still to be tried (Volcano discards a
job not ready at its session's end; coscheduling's PostFilter "optimistic rejection"); members that
wait for a sibling not tried (gated here) hold their reserved pods no longer than their Permit
timeout; and a rollback wakes at once the pods its release can help, so a gang that fits gets the
room before the one that does not (Volcano's gang plugin discards a job that is not ready at the end
of each session: it holds nothing; coscheduling rejects a gang past ``permitWaitingTimeSeconds``)."""

from __future__ import annotations

from gpuq_k8s.common.model import kinds
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.interfaces import ClusterEvent
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from tests.testing.builders import GPU, MakeNode, MakePod, MakePodGroup
from tests.testing.clock import FakeClock
from tests.testing.config import config_text
from tests.testing.scheduler import make_scheduler

GPU_NODE = MakeNode("gpu-1").alloc(cpu="32", memory="256Gi", pods="110", **{GPU: "8"})


def _gang(
    sched: Scheduler, name: str, size: int, *, min_member: int, gpus: int, first: int, gated: int = 0
) -> None:
    """``size`` pods of ``gpus`` GPUs; the last ``gated`` of them with a scheduling gate (never tried)."""
    sched.put_object(MakePodGroup(name, "ml").min_member(min_member).obj())
    for i in range(size):
        pod = MakePod(f"{name}-{i}", "ml").group(name).req(cpu="1").gpus(gpus)
        if i >= size - gated:
            pod = pod.scheduling_gates("example.com/wait")
        sched.add_pod(pod.created(f"2024-05-01T10:00:{first + i:02d}Z").info())


def _drain(sched: Scheduler) -> None:
    sched.run_enqueue()
    while sched.schedule_one() is not None or sched.run_enqueue():
        pass


def _two_gangs(timeout: float, gated: int = 1) -> tuple[Scheduler, MemoryBackend, FakeClock]:
    """The issue's case: a 3 x 4-GPU gang (two of its pods fit the 8-GPU node and wait in Permit; the
    third ``gated``, so not tried) and a 2 x 2-GPU gang that fits, created after it."""
    clock = FakeClock()
    config = config_text(
        "priority, gang", "predicates", arguments={"gang": {"permitWaitingTimeSeconds": timeout}}
    )
    sched, backend = make_scheduler(config=config, clock=clock)
    sched.set_node(GPU_NODE.info())
    _gang(sched, "big", 3, min_member=3, gpus=4, first=0, gated=gated)
    _gang(sched, "small", 2, min_member=2, gpus=2, first=10)
    _drain(sched)
    return sched, backend, clock


def test_a_member_no_node_takes_rolls_its_waiting_siblings_back_at_once() -> None:
    """The third 4-GPU pod finds no node and no member is left to try, so the two waiting in Permit
    are rejected then, not at the timeout (Volcano: the job is not ready at the session's end;
    coscheduling.go PostFilter likewise): the small gang binds in the same drain
    (it failed first behind them; the rollback woke it). Before, they held the node 60 s."""
    sched, backend, _ = _two_gangs(timeout=60.0, gated=0)
    assert sched.framework.waiting.gangs() == []
    assert backend.bindings == {"ml/small-0": "gpu-1", "ml/small-1": "gpu-1"}
    assert sched.reasons["ml/big-0"] == "PodGroup ml/big: only 2 of minMember 3 pod(s) could be placed"
    assert "Insufficient nvidia.com/gpu" in sched.reasons["ml/big-2"]


def test_members_still_to_be_tried_keep_the_waiting_ones() -> None:
    """Volcano's allocate_test.go "prepredicate failed and tasks are not used up, continue on until
    min member meet" (also ported in test_volcano_gang.py through simulate): a master fails where the
    other master waits, but two workers are still to be tried, so the waiting one stays; the first
    worker completes minMember 2 and both bind."""
    sched, backend = make_scheduler(config=config_text("priority, gang", "predicates"))
    for name, role in (("n1", "master"), ("n2", "worker")):
        sched.set_node(MakeNode(name).alloc(cpu="1", memory="2Gi", pods="110").label("nodeRole", role).info())
    sched.put_object(MakePodGroup("pg1", "ml").min_member(2).obj())
    for i, role in enumerate(("master", "master", "worker", "worker")):
        pod = MakePod(f"p{i}", "ml").group("pg1").req(cpu="1").node_selector({"nodeRole": role})
        sched.add_pod(pod.created(f"2024-05-01T10:00:0{i}Z").info())
    _drain(sched)
    assert backend.bindings == {"ml/p0": "n1", "ml/p2": "n2"}


def test_the_big_gang_waits_holding_the_node_until_its_permit_timeout() -> None:
    sched, backend, clock = _two_gangs(timeout=5.0)
    waiting = sched.framework.waiting
    assert waiting.gangs() == ["ml/big"]
    assert sorted(sched.cluster.pods) == ["ml/big-0", "ml/big-1"]  # assumed, reserved, not bound
    assert backend.bindings == {}
    assert "Insufficient nvidia.com/gpu" in sched.reasons["ml/small-0"]
    clock.now = 4.9
    assert sched.expire_waiting() == 0  # within the argument's 5 s (the 60 s default is not used)
    assert waiting.gangs() == ["ml/big"]


def test_the_rollback_wakes_the_gang_that_fits_at_once() -> None:
    sched, backend, clock = _two_gangs(timeout=5.0)
    clock.now = 5.0
    assert sched.expire_waiting() == 2
    # No event, no clock step, no backoff: the small gang's pods are ready to go at once and bind
    # together; the big gang's pods are parked, behind them.
    assert sched.queue.has_active()
    _drain(sched)
    assert backend.bindings == {"ml/small-0": "gpu-1", "ml/small-1": "gpu-1"}
    assert sched.reasons["ml/big-0"] == "PodGroup ml/big: only 2 of minMember 3 pod(s) could be placed"
    parked = sched.queue.get("ml/big-0")
    assert parked is not None and parked.pool == "unschedulable"
    assert sched.group_phases()["ml/small"] == "Running"


def test_without_the_wake_up_the_fitting_gang_would_wait_for_its_backoff() -> None:
    """The difference the rollback makes: the small gang's pods failed just before it, so their
    backoff has not passed; woken by an ordinary event they would wait for it."""
    sched, _, clock = _two_gangs(timeout=5.0)
    queued = sched.queue.get("ml/small-0")
    assert queued is not None and queued.backoff_until > clock.now
    clock.now = queued.backoff_until - 0.5
    for member in sched.framework.waiting.reject("ml/big"):
        sched.framework.run_unreserve(member.state, member.pod, member.row)
        sched.cluster.remove_pod(member.pod.key)
    # An ordinary POD_DELETED event: the small gang's pods go to backoff, not to active.
    sched.queue.on_event(ClusterEvent.POD_DELETED)
    queued = sched.queue.get("ml/small-0")
    assert queued is not None and queued.pool == "backoff"


def test_a_podgroup_update_replaces_its_task_minimums() -> None:
    """``pkg/scheduler/api/job_info_test.go`` TestParseMinMemberInfoChanged ("task member decreased",
    "task member replaced completely"): the minimums follow the PodGroup's latest ``minTaskMember``,
    none of the former left. {worker: 3} with one master and two workers: an invalid job, refused;
    changed to {master: 1, worker: 2}, the same pods are a valid job and bind."""
    clock = FakeClock()
    sched, backend = make_scheduler(config=config_text("priority, gang", "predicates"), clock=clock)
    sched.set_node(GPU_NODE.info())
    group = MakePodGroup("job", "ml").min_member(3).spec(minTaskMember={"worker": 3})
    sched.put_object(group.obj())
    for i, task in enumerate(("master", "worker", "worker")):
        pod = MakePod(f"p{i}", "ml").group("job").req(cpu="1").labels({"volcano.sh/task-spec": task})
        sched.add_pod(pod.info())
    _drain(sched)
    sched.reject_waiting()
    assert backend.bindings == {}
    assert "task worker has 2 of its minTaskMember 3" in sched.reasons["ml/p0"]
    sched.put_object(group.copy().spec(minTaskMember={"master": 1, "worker": 2}).obj())
    clock.now = 60.0  # past the pods' backoff: the PodGroup change woke them
    _drain(sched)
    assert sorted(backend.bindings) == ["ml/p0", "ml/p1", "ml/p2"]
    assert sched.objects.get(kinds.POD_GROUP, "ml", "job") is not None
