"""Each bind outcome (scheduler/backend.py ``Result``) and its effect on the ledger and the queue:
the Scheduler's binding step with the in-memory backend answering each outcome on demand, the
informer feed delivering what the watch would, and the quota ledger read from the ElasticQuota
plugin (what its status is written from)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from gpuq_k8s.common.kube.diff import Change
from gpuq_k8s.common.kube.informer import InformerSet
from gpuq_k8s.scheduler.backend import Result
from gpuq_k8s.scheduler.cycle import Attempt
from gpuq_k8s.scheduler.failure import SCHEDULER_ERROR_REASON
from gpuq_k8s.scheduler.kube.feed import Feed
from gpuq_k8s.scheduler.plugins.capacity_scheduling import CapacityScheduling
from tests.testing.builders import MakeElasticQuota
from tests.testing.clock import FakeClock
from tests.testing.feed import CONFIG, NODE, POD, InformerCache, add, key
from tests.testing.scheduler import make_scheduler

# Room for one pod of 1 cpu: a second one placed while the first is charged would overspend.
QUOTA = MakeElasticQuota("q").resource_version("1").min(cpu="1").max(cpu="1")


class World:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.scheduler, self.backend = make_scheduler(config=CONFIG, clock=self.clock)
        self.feed = Feed(self.scheduler)
        self.feed.ready = True
        self.feed.apply(add(NODE.copy().name("n1").obj()))
        self.feed.apply(add(NODE.copy().name("n2").obj()))
        self.feed.apply(add(QUOTA.obj()))

    def used_cpu(self) -> int:
        """The quota ledger: cpu charged to the ElasticQuota of ``ns``."""
        plugin = cast(CapacityScheduling, self.scheduler.framework.plugin("capacity-scheduling"))
        return int(plugin.infos.used_numbers("ns").get("cpu", 0))

    def drain(self) -> list[Attempt]:
        attempts = []
        while (attempt := self.scheduler.schedule_one()) is not None:
            attempts.append(attempt)
        return attempts

    def place(self, name: str) -> Attempt:
        """Create pod ``name`` and run its attempt, its bind held in flight."""
        self.backend.held.add(f"ns/{name}")
        self.feed.apply(add(POD.copy().name(name).uid(f"uid-{name}").obj()))
        (attempt,) = self.drain()
        assert attempt.node == "n1"
        assert self.used_cpu() == 1  # reserved while the bind is in flight
        return attempt

    def queued(self) -> bool:
        self.clock.now += 3600  # past any backoff
        return bool(self.drain())


def deleting(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return obj


def test_bound_stays_charged_and_leaves_the_queue() -> None:
    world = World()
    world.place("p")
    world.backend.complete("ns/p", Result.DONE)
    assert world.used_cpu() == 1 and world.scheduler.cluster.pods["ns/p"].node_name == "n1"
    assert "ns/p" not in world.scheduler.pending and not world.queued()
    assert "ns/p" not in world.backend.conditions


def test_gone_404_is_forgotten_never_requeued_and_gets_no_condition() -> None:
    world = World()
    world.place("p")
    world.backend.complete("ns/p", Result.GONE)
    assert world.used_cpu() == 0 and "ns/p" not in world.scheduler.cluster.pods
    assert "ns/p" not in world.scheduler.pending and not world.queued()
    assert world.backend.conditions == {} and world.backend.bindings == {}


def test_not_bound_unreserves_and_requeues_with_a_scheduler_error() -> None:
    world = World()
    world.place("p")
    world.backend.complete("ns/p", Result.NOT_BOUND)
    assert world.used_cpu() == 0 and "ns/p" not in world.scheduler.cluster.pods
    assert world.backend.conditions["ns/p"].reason == SCHEDULER_ERROR_REASON
    assert "ns/p" in world.scheduler.pending
    world.backend.bind_results.clear()
    assert world.queued()  # retried after its backoff, and bound this time
    assert world.backend.bindings == {"ns/p": "n1"} and world.used_cpu() == 1


def test_bound_elsewhere_unreserves_ours_and_the_watch_charges_it_where_it_is() -> None:
    world = World()
    world.place("p")
    world.backend.complete("ns/p", Result.ELSEWHERE)
    assert world.used_cpu() == 0 and "ns/p" not in world.scheduler.cluster.pods
    assert "ns/p" not in world.scheduler.pending and not world.queued()
    assert world.backend.conditions == {}  # a bound pod never gets PodScheduled=False
    world.feed.apply(add(POD.copy().name("p").uid("uid-p").node("n2").resource_version("2").obj()))
    assert world.scheduler.cluster.pods["ns/p"].node_name == "n2" and world.used_cpu() == 1


def test_bound_elsewhere_seen_on_the_watch_first_is_not_uncharged_by_the_late_answer() -> None:
    world = World()
    world.place("p")
    world.feed.apply(add(POD.copy().name("p").uid("uid-p").node("n2").resource_version("2").obj()))
    world.backend.complete("ns/p", Result.ELSEWHERE)
    assert world.scheduler.cluster.pods["ns/p"].node_name == "n2" and world.used_cpu() == 1
    assert world.backend.conditions == {} and not world.queued()


def test_a_pod_deleted_while_its_bind_is_in_flight_is_not_retried() -> None:
    """The watch delivers the delete, then the bind answers (the pod was gone, or the answer is a
    failure): nothing is charged, nothing requeued, no condition written."""
    for answer in (Result.GONE, Result.NOT_BOUND):
        world = World()
        world.place("p")
        pod = POD.copy().name("p").uid("uid-p").obj()
        world.feed.apply(Change("delete", key(pod), pod))
        assert world.used_cpu() == 0 and "ns/p" not in world.scheduler.pending
        world.backend.complete("ns/p", answer)
        assert world.used_cpu() == 0 and "ns/p" not in world.scheduler.cluster.pods
        assert world.backend.conditions == {} and not world.queued()
        assert world.feed.assumed == set()


def test_a_deleting_pod_leaves_pending_at_once_and_its_failed_bind_is_not_retried() -> None:
    world = World()
    world.place("p")
    world.feed.apply(add(deleting(POD.copy().name("p").uid("uid-p").resource_version("2").obj())))
    assert "ns/p" not in world.scheduler.pending
    world.backend.complete("ns/p", Result.NOT_BOUND)
    assert world.used_cpu() == 0 and world.backend.conditions == {} and not world.queued()


def test_a_bind_that_lands_after_the_delete_was_observed_is_not_assumed() -> None:
    world = World()
    world.place("p")
    pod = POD.copy().name("p").uid("uid-p").obj()
    world.feed.apply(Change("delete", key(pod), pod))
    world.feed.assume("ns/p")  # the kube backend's on_bound, after the API accepted the bind
    world.backend.complete("ns/p", Result.DONE)
    assert world.feed.assumed == set() and "ns/p" not in world.scheduler.cluster.pods
    assert world.used_cpu() == 0


def test_no_quota_overspend_while_a_bind_is_unanswered() -> None:
    """Outcome unknown: the pod stays charged, so a second pod waits instead of overspending."""
    world = World()
    world.place("p")
    world.clock.now += 24 * 3600.0
    world.feed.apply(add(POD.copy().name("q").uid("uid-q").obj()))
    (attempt,) = world.drain()
    assert attempt.node == "" and "ElasticQuota" in attempt.message
    assert world.used_cpu() == 1
    world.backend.complete("ns/p", Result.NOT_BOUND)  # a read of the pod proved it unbound
    assert world.used_cpu() == 0
    world.backend.bind_results.clear()
    world.clock.now += 3600
    world.drain()
    assert len(world.backend.bindings) == 1 and len(world.scheduler.cluster.pods) == 1  # p or q, not both
    assert world.used_cpu() == 1


@pytest.mark.parametrize(
    ("cached", "expected"),
    [
        (None, Result.GONE),  # the watch delivered the delete
        (deleting(POD.copy().name("p").uid("uid-p").obj()), Result.GONE),
        (POD.copy().name("p").uid("uid-other").obj(), Result.GONE),  # re-created under that name
        (POD.copy().name("p").uid("uid-p").node("n1").obj(), Result.DONE),
        (POD.copy().name("p").uid("uid-p").node("n2").obj(), Result.ELSEWHERE),
        (POD.copy().name("p").uid("uid-p").obj(), None),  # still pending: the bind goes out
    ],
)
def test_what_the_watch_says_before_a_bind_is_sent(
    cached: dict[str, Any] | None, expected: Result | None
) -> None:
    world = World()
    if cached is not None and cached.pop("deleting", False):
        cached["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    informers = InformerSet([])
    pods = {} if cached is None else {key(cached): cached}
    informers.informers = {"Pod": InformerCache(pods)}  # type: ignore[dict-item]
    world.feed.informers = informers
    assert world.feed.settled(POD.copy().name("p").uid("uid-p").info(), "n1") is expected
