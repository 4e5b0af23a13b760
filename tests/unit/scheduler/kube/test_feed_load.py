"""The streamed start (scheduler/kube/feed.py ``Feed.load``): bound pods fed page by page while the
pod list goes on, pending pods last. It must leave the scheduler exactly as the synchronous replay
does, whatever the pages' timing: the same attempts, in the same order, on the same nodes."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from gpuq_k8s.common.kube.informer import InformerSet
from gpuq_k8s.scheduler.cycle import Attempt, Scheduler
from gpuq_k8s.scheduler.kube.feed import Feed
from tests.testing.feed import NODE, POD, InformerCache, key, make_feed


def drain(scheduler: Scheduler) -> list[tuple[str, str]]:
    attempts: list[Attempt] = []
    while (attempt := scheduler.schedule_one()) is not None:
        attempts.append(attempt)
    return [(a.pod.name, a.node) for a in attempts]


def objects() -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    nodes = [NODE.copy().name(n).obj() for n in ("n1", "n2")]
    pods = [
        POD.copy().name("bound-1").uid("u-b1").req(cpu="3").node("n1").obj(),
        POD.copy().name("pending-1").uid("u-p1").req(cpu="2").obj(),
        POD.copy().name("bound-2").uid("u-b2").req(cpu="1").node("n2").obj(),
        POD.copy().name("pending-2").uid("u-p2").req(cpu="3").obj(),
        POD.copy().name("pending-3").uid("u-p3").req(cpu="1").obj(),
    ]
    # Listed by a first pod list that failed half-way, deleted before the list that succeeded.
    gone = POD.copy().name("gone").uid("u-g").req(cpu="4").node("n2").obj()
    return nodes, pods, gone


def informers(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], *, synced: bool) -> InformerSet:
    result = InformerSet([])
    result.informers = {
        "Node": InformerCache({key(n): n for n in nodes}),  # type: ignore[dict-item]
        "Pod": InformerCache({key(p): p for p in pods}, synced=synced),  # type: ignore[dict-item]
    }
    return result


def replayed() -> list[tuple[str, str]]:
    scheduler, _, feed, _ = make_feed()
    feed.ready = False
    nodes, pods, _ = objects()
    feed.replay(informers(nodes, pods, synced=True))
    return drain(scheduler)


def test_pages_fed_as_they_come_leave_the_scheduler_as_the_replay_does() -> None:
    scheduler, _, feed, _ = make_feed()
    feed.ready = False
    nodes, pods, gone = objects()
    cache = informers(nodes, pods, synced=False)

    async def start() -> Feed:
        feed.page(1, [gone, pods[0]])  # before the nodes are in: kept
        loading = asyncio.create_task(feed.load(cache))
        await asyncio.sleep(0)
        feed.page(2, pods[:2])  # the list was retried (a new number): its pages again
        feed.page(2, pods[2:])
        for _ in range(10):  # the event loop's turns: load feeds the nodes, then the kept pages
            await asyncio.sleep(0)
        # Bound pods count before the list is complete; pending ones wait for it.
        assert {"ns/bound-1", "ns/bound-2"} <= set(scheduler.cluster.pods)
        assert not scheduler.pending and not feed.ready
        assert drain(scheduler) == []
        cache["Pod"].synced.set()
        await loading
        return feed

    asyncio.run(start())
    assert feed.ready
    assert "ns/gone" not in scheduler.cluster.pods  # only the failed list had it
    attempts = drain(scheduler)
    assert attempts == replayed()
    # bound-1 holds 3 of n1's 4 cpu, bound-2 1 of n2's (the gone pod's 4 cpu count nowhere):
    # pending-1 (2 cpu) goes to n2, pending-2 (3 cpu) then fits nowhere, pending-3 takes n1's last.
    assert attempts == [("pending-1", "n2"), ("pending-2", ""), ("pending-3", "n1")]


def test_pod_changes_while_other_kinds_list_are_not_lost() -> None:
    """The day in the life's overspent node (issue 28): a standby's pod list completed while other
    kinds still listed; meanwhile a pending pod was bound, a bound pod finished. The pod watch's
    changes are not delivered before the end of ``load``: it must feed the pods as the cache holds
    them then, not as the pages had them, or the scheduler counts the finished pod's room as used
    (pods that fit wait) and the bound pod's as free (a node overspent), and tries to bind it again."""
    scheduler, _, feed, _ = make_feed()
    feed.ready = False
    nodes = [NODE.copy().name("n1").obj()]
    finishing = POD.copy().name("finishing").uid("u-f").req(cpu="3").node("n1")
    binding = POD.copy().name("binding").uid("u-b").req(cpu="1")
    listed = [
        finishing.copy().resource_version("10").obj(),
        binding.copy().resource_version("11").obj(),
        POD.copy().name("waiting").uid("u-w").req(cpu="3").resource_version("12").obj(),
    ]
    finished = finishing.copy().phase("Succeeded").resource_version("20").obj()
    bound = binding.copy().node("n1").resource_version("21").obj()
    cache = informers(nodes, listed, synced=False)

    async def start() -> None:
        loading = asyncio.create_task(feed.load(cache))
        await asyncio.sleep(0)
        feed.page(1, listed)
        for _ in range(5):
            await asyncio.sleep(0)
        # The watch moves the cache on (its changes are not delivered yet), then the list is done.
        pods = cast(dict[tuple[str, str], dict[str, Any]], cache["Pod"].items())  # InformerCache's dict
        pods[key(finished)] = finished
        pods[key(bound)] = bound
        cache["Pod"].synced.set()
        await loading

    asyncio.run(start())
    assert feed.ready
    assert "ns/binding" not in scheduler.pending
    assert scheduler.cluster.pods["ns/binding"].node_name == "n1"
    # n1 has 4 cpu: the finished pod's 3 are free again, the bound pod holds 1: "waiting" fits
    # (as the pages had them: "binding" would be tried, and "waiting" would not fit).
    assert drain(scheduler) == [("waiting", "n1")]
