"""The start's bulk path for bound pods (``Scheduler.add_bound_pods``, ``ClusterState.add_pods``, the
feed's pages): the scheduler it leaves is the one ``add_pod`` per pod leaves, on a generated cluster
(the determinism fixture's workload, tests/bench/bench_simulate.py), with pods the bulk path must
leave to ``add_pod`` mixed in (finished ones, on unknown nodes, asking new resources, in PodGroups,
seen twice); the pending pods then scheduled the same way."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from gpuq_k8s.common.kube.diff import Change
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from tests.bench.bench_simulate import _nodes, _pods, _scheduler
from tests.testing.builders import MakeNode, MakePod
from tests.testing.feed import make_feed


def workload(seed: int) -> tuple[list[Any], list[PodInfo], list[PodInfo]]:
    """Nodes, the bound pods of a start (in list order) and the pending pods."""
    rng = random.Random(seed)
    nodes = _nodes(60, rng)
    pods = _pods(900, rng)
    bound: list[PodInfo] = []
    for i, pod in enumerate(pods[:600]):
        on = rng.choice(nodes).name if i % 37 else "node-gone"  # a node deleted under its pods
        placed = pod.with_node_name(on)
        if i % 23 == 0:
            placed = dataclasses.replace(placed, phase="Succeeded")
        elif i % 29 == 0:
            placed = dataclasses.replace(
                placed, requests=placed.requests + Resources({"example.com/fpga": 1})
            )
        elif i % 31 == 0:
            annotations = {**placed.annotations, "scheduling.k8s.io/group-name": "pg"}
            placed = dataclasses.replace(placed, annotations=annotations)
        elif i % 8 == 0:
            placed = dataclasses.replace(placed, phase="Running")
        bound.append(placed)
    bound.append(bound[5])  # a pod seen twice (a first list that failed and was retried)
    bound.append(dataclasses.replace(bound[7], labels={"moved": "yes"}))
    return nodes, bound, pods[600:]


def state(sched: Scheduler) -> dict[str, Any]:
    cluster = sched.cluster
    n = cluster.n
    return {
        "requested": cluster.requested[:n].tolist(),
        "free": cluster.free[:n].tolist(),
        "floor kept": cluster._floor.tolist(),  # as kept, before free_floor may recompute it
        "floor": cluster.free_floor().tolist(),
        "columns": list(cluster.columns.index),
        "names": list(cluster.names),
        "pods": dict(cluster.pods),
        "pods_on": [dict(p) for p in cluster.pods_on[:n]],
        "generation": cluster.generation,
        "members": {k: set(v) for k, v in sched.podgroups.members.items()},
        "finished": dict(sched.podgroups.finished),
        "pending": dict(sched.pending),
    }


def scheduled(sched: Scheduler) -> list[tuple[str, str, str, str]]:
    out: list[tuple[str, str, str, str]] = []
    while True:
        sched.run_enqueue()
        attempt = sched.schedule_one()
        if attempt is None:
            return out
        out.append((attempt.pod.key, attempt.node, attempt.message, attempt.nominated))


def statuses(sched: Scheduler) -> Any:
    backend = sched.backend
    assert isinstance(backend, MemoryBackend)
    sched.sync_status()
    return sorted(repr(s) for s in backend.statuses.items())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_bulk_path_leaves_the_state_the_per_pod_path_leaves(seed: int) -> None:
    nodes, bound, pending = workload(seed)

    def add_each(sched: Scheduler) -> None:
        for pod in bound:
            sched.add_pod(pod)

    def add_by_pages(sched: Scheduler) -> None:
        for i in range(0, len(bound), 50):
            sched.add_bound_pods(bound[i : i + 50])

    runs: list[Scheduler] = []
    for add in (add_each, add_by_pages):
        sched = _scheduler()
        sched.put_object(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": "pg", "namespace": "team-0"},
                "spec": {"minMember": 3, "queue": "team-0"},
            }
        )
        for node in nodes:
            sched.set_node(node)
        add(sched)
        runs.append(sched)
    per_pod, bulk = runs
    assert len(per_pod.cluster.pods) > 400  # most bound pods count
    expected = state(per_pod)
    got = state(bulk)
    for key in expected:
        assert got[key] == expected[key], key
    assert statuses(bulk) == statuses(per_pod)
    for sched in runs:
        for pod in pending:
            sched.add_pod(pod)
    decisions = scheduled(per_pod)
    assert len([d for d in decisions if d[1]]) > 50  # pods placed on what the bound ones left
    assert scheduled(bulk) == decisions
    assert statuses(bulk) == statuses(per_pod)
    np.testing.assert_array_equal(bulk.cluster.free, per_pod.cluster.free)


def test_with_a_pod_pending_every_pod_goes_through_add_pod() -> None:
    sched = _scheduler()
    for node in _nodes(4, random.Random(1)):
        sched.set_node(node)
    waiting = _pods(2, random.Random(2))
    sched.add_pod(waiting[0])
    calls: list[str] = []
    original: Callable[[PodInfo], None] = sched.add_pod

    def counted(pod: PodInfo) -> None:
        calls.append(pod.key)
        original(pod)

    sched.add_pod = counted  # type: ignore[method-assign]
    placed = waiting[1].with_node_name(sched.cluster.names[0])
    sched.add_bound_pods([placed])
    assert calls == [placed.key] and placed.key in sched.cluster.pods


def test_the_feeds_pages_apply_as_one_change_each() -> None:
    """Through the feed: the pods of a page as dicts, a malformed one among them (its Warning), one
    bound twice; the same feed state, events and bindings as applying each."""
    node = MakeNode("n1").alloc(cpu="8", memory="16Gi", pods="20").resource_version("1")
    page = [
        MakePod(f"b{i}", "ns").req(cpu="1").priority(0).node("n1").resource_version(str(i)).obj()
        for i in range(5)
    ]
    page[2]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    page.append(page[1])
    pending = MakePod("w", "ns").req(cpu="2").priority(0).obj()
    runs = []
    for paged in (False, True):
        sched, backend, feed, _ = make_feed()
        feed.ready = False
        feed.apply(Change("add", ("", "n1"), node.obj()))
        if paged:
            feed._others_in = True  # Feed.load: every other kind is in
            feed.page(1, page)
        else:
            for obj in page:
                feed.apply(Change("add", ("ns", obj["metadata"]["name"]), obj))
        feed.ready = True
        feed.apply(Change("add", ("ns", "w"), pending))
        sched.run_enqueue()
        while sched.schedule_one() is not None:
            sched.run_enqueue()
        runs.append(
            (
                dict(feed._uids),
                feed.handled,
                sorted(sched.cluster.pods),
                [(e.obj, e.reason, e.message) for e in backend.events],
                dict(backend.bindings),
            )
        )
    assert runs[1] == runs[0]
    assert runs[0][4] == {"ns/w": "n1"} and "ns/b2" not in runs[0][2]
