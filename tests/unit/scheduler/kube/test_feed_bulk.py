"""The start's bulk path for bound pods (``Scheduler.add_bound_pods``, ``ClusterState.add_pods``, the
feed's pages): the scheduler it leaves is the one ``add_pod`` per pod leaves, on a generated cluster
(the determinism fixture's workload, tests/bench/bench_simulate.py), with pods the bulk path must
leave to ``add_pod`` mixed in (finished ones, on unknown nodes, asking new resources, in PodGroups,
seen twice); the pending pods then scheduled the same way."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from gpuq_k8s.common.kube.diff import Change
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.scheduler.cluster.pod_index import PodIndex
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins.capacity_scheduling import CapacityScheduling
from tests.bench.bench_simulate import _nodes, _pods, _scheduler
from tests.testing.builders import MakeNode, MakePod
from tests.testing.feed import make_feed

PORT = 8080
# PodGroups of every namespace as a start finds them (their phase, minMember): the bound pods counted
# one by one move a Running one to Pending and back, an Inqueue or a Completed one to Running.
GANGS = (("Running", 3), ("Inqueue", 2), ("Completed", 2), ("Pending", 3))


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
        elif i % 11 == 0:  # what the bulk listeners (ClusterState.add_pods' pods_added) look at
            placed = _placed(placed, i % 3)
        elif i % 3 == 0:  # a member of a gang whose phase its bound pods move (GANGS)
            annotations = {**placed.annotations, "scheduling.k8s.io/group-name": f"gang-{i // 3 % 4}"}
            placed = dataclasses.replace(placed, annotations=annotations, phase=("Running", "Pending")[i % 2])
        bound.append(placed)
    bound.append(bound[5])  # a pod seen twice (a first list that failed and was retried)
    bound.append(dataclasses.replace(bound[7], labels={"moved": "yes"}))
    return nodes, bound, pods[600:] + _probes()


def _probes() -> list[PodInfo]:
    """Pending pods each placed by what one bulk listener counted: the host port, the disk, the app of
    the anti-affinity term of the pods :func:`_placed` made."""
    probes: list[PodInfo] = []
    for i in range(20):
        made = MakePod(f"probe-{i}", "team-0").req(cpu="100m").priority(0).scheduler("gpuq-scheduler")
        port = made.copy().name(f"port-{i}").host_port(PORT)
        disk = made.copy().name(f"disk-{i}").volume({"name": "disk", "gcePersistentDisk": {"pdName": "d"}})
        app = made.copy().name(f"app-{i}").label("app", "app-2")
        probes += [port.info(), disk.info(), app.info()]
    return probes


def _placed(pod: PodInfo, shape: int) -> PodInfo:
    """``pod`` with a host port, a claim and a disk volume, or an anti-affinity term to its app (the
    node ports, volume and pod index listeners'), on its node."""
    made = MakePod(pod.name, pod.namespace).req(cpu="100m").priority(0).node(pod.node_name)
    made = made.label("app", f"app-{shape}").phase("Running")
    if shape == 0:
        made = made.host_port(PORT)
    elif shape == 1:
        made = made.pvc(f"claim-{pod.name}").volume({"name": "disk", "gcePersistentDisk": {"pdName": "d"}})
    else:
        term = {"labelSelector": {"matchLabels": {"app": "app-2"}}, "topologyKey": "kubernetes.io/hostname"}
        made = made.spec(
            affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        )
    return made.info()


def _ports(pod: PodInfo) -> bool:
    return bool(pod.host_ports)


def _volumes(pod: PodInfo) -> bool:
    return bool(pod.volumes)


def _affinity(pod: PodInfo) -> bool:
    return bool(pod.affinity)


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
        "phases": dict(sched.podgroups.phases()),
        # the existing pods' affinity terms the pod index holds (topology spread makes it by default)
        # what preemption's quick answer reads (the priority plugin's bound jobs per queue)
        "priorities": getattr(sched.framework.plugin("priority"), "_by_queue", None),
        "indexed": sorted(
            sched.framework.shared(PodIndex, lambda: PodIndex(cluster, sched.objects))._indexed
        ),
        **elastic_state(sched),
    }


def elastic_state(sched: Scheduler) -> dict[str, Any]:
    """capacity-scheduling's part (its bulk ``pods_added``): the ElasticQuota ledger's charges and
    usage, the bound pods' priorities per namespace, what preemption could free per node."""
    plugin = sched.framework.plugin("capacity-scheduling")
    assert isinstance(plugin, CapacityScheduling)
    plugin._flush()
    infos = plugin.infos
    return {
        "elastic charged": {ns: dict(pods) for ns, pods in infos._pods.items() if pods},
        "elastic used": {ns: info.used for ns in sorted(infos._infos) if (info := infos.get(ns)) is not None},
        "elastic total": dict(infos._total_used),
        "elastic priorities": {ns: dict(c) for ns, c in plugin._priorities.items() if c},
        "elastic freeable": {ns: a.tolist() for ns, a in plugin._freeable.items()},
        "unquoted freeable": plugin._unquoted.tolist(),
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
        for namespace in (f"team-{t}" for t in range(10)):
            for k, (phase, minimum) in enumerate(GANGS):
                sched.put_object(
                    {
                        "apiVersion": "scheduling.volcano.sh/v1beta1",
                        "kind": "PodGroup",
                        "metadata": {"name": f"gang-{k}", "namespace": namespace},
                        "spec": {"minMember": minimum, "queue": "team-0"},
                        "status": {"phase": phase},
                    }
                )
        for node in nodes:
            sched.set_node(node)
        add(sched)
        runs.append(sched)
    per_pod, bulk = runs
    assert len(per_pod.cluster.pods) > 400  # most bound pods count
    counted = bulk.cluster.pods.values()
    moved = [
        key for key, phase in per_pod.podgroups.phases().items() if "gang-" in key and phase == "Running"
    ]
    assert len(moved) >= 20  # gangs moved to Running (from Inqueue, Completed, and Running via Pending)
    assert all(any(check(p) for p in counted) for check in (_ports, _volumes, _affinity))
    expected = state(per_pod)
    got = state(bulk)
    assert len(expected["elastic charged"]) >= 5 and expected["elastic priorities"]  # quotas charged
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


class _Heard:
    """A cluster listener counting the pods it hears of; ``fails`` raises in its bulk hook."""

    def __init__(self, *, fails: bool = False) -> None:
        self.fails = fails
        self.pods: list[str] = []

    def node_changed(self, row: int, old: Any, new: Any) -> None:
        return None

    def pod_added(self, pod: PodInfo, row: int) -> None:
        self.pods.append(pod.key)

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        return None


class _FailingBulk(_Heard):
    def pods_added(self, pods: Sequence[PodInfo], rows: Sequence[int]) -> None:
        self.pods.extend(pod.key for pod in pods)
        raise RuntimeError("a bug in a listener")


def test_a_listener_failing_on_a_page_is_contained_and_the_others_count_it() -> None:
    """An error of gpuq's own in one listener's bulk hook: every other listener still hears the page's
    pods, the feed contains it (the Warning, the informer's page handler returns) and goes on."""
    sched, backend, feed, _ = make_feed()
    feed.ready = False
    feed.apply(Change("add", ("", "n1"), MakeNode("n1").alloc(cpu="8", memory="16Gi", pods="20").obj()))
    failing, after = _FailingBulk(), _Heard()
    sched.cluster.subscribe(failing)
    sched.cluster.subscribe(after)
    page = [
        MakePod(f"b{i}", "ns").req(cpu="1").priority(0).node("n1").resource_version("1").obj()
        for i in range(4)
    ]
    feed._others_in = True
    feed.page(1, page)
    keys = [f"ns/b{i}" for i in range(4)]
    assert failing.pods == keys and after.pods == keys
    assert sorted(sched.cluster.pods) == keys
    warnings = [e for e in backend.events if e.type == "Warning"]
    assert len(warnings) == 1 and "a bug in a listener" in warnings[0].message
