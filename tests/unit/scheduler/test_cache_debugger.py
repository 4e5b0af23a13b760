"""The cache debugger (scheduler/cache_debugger.py, kube-scheduler's CacheComparer/CacheDumper): the
scheduler's state against the informers' nodes and pods, and the capacity-scheduling ledger against
the bound pods.

Upstream cases ported (kubernetes v1.36.4 pkg/scheduler/backend/cache/debugger/comparer_test.go):
``TestCompareNodes`` (missed and redundant nodes) and ``TestComparePods`` (missed and redundant pods,
bound and pending, the pending ones being the queue's)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from gpuq_k8s.common.model.elastic.ledger import ElasticQuotaInfos
from gpuq_k8s.common.model.elastic.quota import ElasticQuota
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.scheduler import cache_debugger
from gpuq_k8s.scheduler.cache_debugger import CacheDebugger, compare, dump, snapshot
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.plugins.capacity_scheduling import CapacityScheduling
from tests.testing.builders import MakeElasticQuota, MakeNode, MakePod, MakePodGroup
from tests.testing.config import config_text
from tests.testing.scheduler import make_scheduler, plugin_of

NS = "team"


def _cluster() -> tuple[Scheduler, list[dict[str, Any]]]:
    """Two nodes, a bound pod on each, one pending pod of ours; and the same as an informer holds it."""
    sched, _ = make_scheduler("capacity-scheduling")
    sched.put_object(MakeElasticQuota("eq", NS).min(cpu="4").max(cpu="8").obj())
    for name in ("n1", "n2"):
        sched.set_node(MakeNode(name).alloc(cpu="8", memory="16Gi", pods="110").info())
    pods = [
        MakePod("run-1", NS).req(cpu="1").node("n1").obj(),
        MakePod("run-2", NS).req(cpu="1").node("n2").obj(),
        MakePod("wait", NS).req(cpu="100").obj(),  # fits no node: stays pending
    ]
    for obj in pods:
        sched.add_pod(PodInfo.from_dict(obj))
    return sched, pods


def _lines(sched: Scheduler, nodes: list[str], pods: list[dict[str, Any]], **kw: Any) -> list[str]:
    return [str(m) for m in compare(snapshot(sched, nodes, pods, **kw)).mismatches]


def test_the_same_state_has_no_mismatch() -> None:
    sched, pods = _cluster()
    assert _lines(sched, ["n1", "n2"], pods) == []
    found = compare(snapshot(sched, ["n1", "n2"], pods))
    assert (found.nodes, found.pods, found.unreadable) == (2, 3, 0)


# comparer_test.go TestCompareNodes: (name, actual = the informer's, cached = the scheduler's, missing,
# redundant).
NODE_CASES = [
    ("redundant cached value", ["foo", "bar"], ["bar", "foo", "foobar"], [], ["foobar"]),
    ("missing cached value", ["foo", "bar", "foobar"], ["bar", "foo"], ["foobar"], []),
    ("proper cache set", ["foo", "bar", "foobar"], ["bar", "foobar", "foo"], [], []),
]


@pytest.mark.parametrize(
    ("actual", "cached", "missing", "redundant"), [c[1:] for c in NODE_CASES], ids=[c[0] for c in NODE_CASES]
)
def test_compare_nodes(
    actual: list[str], cached: list[str], missing: list[str], redundant: list[str]
) -> None:
    sched, _ = make_scheduler()
    for name in cached:
        sched.set_node(MakeNode(name).alloc(cpu="8", memory="16Gi", pods="110").info())
    assert _lines(sched, actual, []) == [
        *(f"node {n}: in the informer, not in the scheduler" for n in missing),
        *(f"node {n}: in the scheduler, gone from the informer" for n in redundant),
    ]


# comparer_test.go TestComparePods: (name, actual = the informer's pods, cached = bound pods the
# scheduler counts, queued = pods pending in the scheduler, missing, redundant). Upstream's pods are
# bare UIDs; here a cached pod is bound to n1 in the informer, a queued one pending, a missing one
# bound (the bind the scheduler never saw), a redundant one counted on n1 and gone from the informer.
POD_CASES = [
    ("redundant cached value", ["foo", "bar"], ["bar", "foo", "foobar"], [], [], ["foobar"]),
    ("redundant and queued values", ["foo", "bar"], ["foo", "foobar"], ["bar"], [], ["foobar"]),
    ("missing cached value", ["foo", "bar", "foobar"], ["bar", "foo"], [], ["foobar"], []),
    ("missing and queued values", ["foo", "bar", "foobar"], ["foo"], ["bar"], ["foobar"], []),
    ("correct cache set", ["foo", "bar", "foobar"], ["bar", "foobar", "foo"], [], [], []),
    ("queued cache value", ["foo", "bar", "foobar"], ["foobar", "foo"], ["bar"], [], []),
]


@pytest.mark.parametrize(
    ("actual", "cached", "queued", "missing", "redundant"),
    [c[1:] for c in POD_CASES],
    ids=[c[0] for c in POD_CASES],
)
def test_compare_pods(
    actual: list[str], cached: list[str], queued: list[str], missing: list[str], redundant: list[str]
) -> None:
    sched, _ = make_scheduler()
    sched.set_node(MakeNode("n1").alloc(cpu="8", memory="16Gi", pods="110").info())
    for name in cached:
        sched.add_pod(PodInfo.from_dict(MakePod(name, NS).req(cpu="1").node("n1").obj()))
    for name in queued:
        sched.add_pod(PodInfo.from_dict(MakePod(name, NS).req(cpu="100").obj()))
    informer = [
        (
            MakePod(name, NS).req(cpu="100") if name in queued else MakePod(name, NS).req(cpu="1").node("n1")
        ).obj()
        for name in actual
    ]
    assert _lines(sched, ["n1"], informer) == [
        *(
            f"pod {NS}/{n}: bound to n1 in the informer, not counted by the scheduler"
            for n in sorted(missing)
        ),
        *(
            f"pod {NS}/{n}: counted on n1 by the scheduler, not bound in the informer"
            for n in sorted(redundant)
        ),
    ]


def test_a_pod_deleted_in_the_informer_and_still_counted_is_reported() -> None:
    """comparer_test.go TestComparePods, a redundant pod: the delete the scheduler missed (the day in
    the life's stuck preemption: a victim gone from the API, still terminating for the scheduler)."""
    sched, pods = _cluster()
    informer = [p for p in pods if p["metadata"]["name"] != "run-2"]
    assert _lines(sched, ["n1", "n2"], informer) == [
        f"pod {NS}/run-2: counted on n2 by the scheduler, not bound in the informer"
    ]


def test_a_pod_bound_elsewhere_or_unknown_and_a_pending_pod_lost() -> None:
    sched, pods = _cluster()
    informer = [
        MakePod("run-1", NS).req(cpu="1").node("n2").obj(),  # moved: the scheduler missed a re-create
        pods[1],
        pods[2],
        MakePod("late", NS).req(cpu="1").node("n1").obj(),  # bound by another hand, not seen
        MakePod("new", NS).req(cpu="1").obj(),  # pending, never delivered to the scheduler
    ]
    assert _lines(sched, ["n1", "n2"], informer) == [
        f"pod {NS}/late: bound to n1 in the informer, not counted by the scheduler",
        f"pod {NS}/run-1: bound to n2, counted on n1",
        f"pending pod {NS}/new: pending in the informer, unknown to the scheduler",
    ]


def test_a_pod_pending_for_the_scheduler_and_gone_from_the_informer() -> None:
    sched, pods = _cluster()
    assert _lines(sched, ["n1", "n2"], pods[:2]) == [
        f"pending pod {NS}/wait: pending in the scheduler, gone or finished in the informer"
    ]


def test_an_assumed_pod_whose_bind_the_watch_has_not_shown_is_no_mismatch() -> None:
    sched, pods = _cluster()
    sched.add_pod(PodInfo.from_dict(MakePod("ours", NS).req(cpu="1").node("n1").obj()))
    unbound_yet = MakePod("ours", NS).req(cpu="1").obj()
    assert _lines(sched, ["n1", "n2"], [*pods, unbound_yet], assumed={f"{NS}/ours"}) == []


def test_a_pending_pod_in_no_queue_pool_is_never_tried() -> None:
    sched, pods = _cluster()
    sched.queue.delete(f"{NS}/wait")
    assert _lines(sched, ["n1", "n2"], pods) == [
        f"pending pod {NS}/wait: in no queue pool, not held by its PodGroup: never tried"
    ]


def test_a_pod_held_for_the_enqueue_of_a_group_that_is_not_pending_is_never_tried() -> None:
    """The day's case (a standby that took over): pods held for the enqueue of a PodGroup its members
    had made Running; the enqueue action admits Pending groups only, so they were never tried."""
    sched, _ = make_scheduler(config=config_text("priority, gang", "predicates", actions="enqueue, allocate"))
    sched.set_node(MakeNode("n1").alloc(cpu="8", memory="16Gi", pods="110").info())
    sched.put_object(MakePodGroup("pg", NS).min_member(2).obj())
    member = MakePod("m", NS).req(cpu="1").annotation("scheduling.k8s.io/group-name", "pg")
    pods = [member.copy().name(f"m-{i}").obj() for i in range(3)]
    for obj in pods:
        sched.add_pod(PodInfo.from_dict(obj))
    assert _lines(sched, ["n1"], pods) == []  # held while Pending: waiting for the enqueue action
    # What the standby held before the fix: the group Running by its members, a pod still held.
    sched.podgroups.groups[f"{NS}/pg"].phase = "Running"
    assert _lines(sched, ["n1"], pods) == [
        f"pending pod {NS}/m-{i}: held for the enqueue of PodGroup {NS}/pg, which is Running: never tried"
        for i in range(3)
    ]


def test_a_ledger_charge_left_for_a_pod_no_longer_bound_is_reported() -> None:
    sched, pods = _cluster()
    infos = plugin_of(sched, CapacityScheduling).infos
    infos.reserve(NS, f"{NS}/leaked", Resources({"cpu": 2000}))
    assert _lines(sched, ["n1", "n2"], pods) == [
        f"ledger: ElasticQuota ledger of {NS}: charged, not bound: ['{NS}/leaked']"
    ]


def test_the_ledger_audit_finds_pods_bound_and_not_charged_and_sums_that_drifted() -> None:
    infos = ElasticQuotaInfos()
    pod = PodInfo.from_dict(MakePod("a", NS).req(cpu="1").node("n1").obj())
    infos.upsert(ElasticQuota.from_dict(MakeElasticQuota("eq", NS).min(cpu="4").max(cpu="8").obj()))
    assert infos.audit([pod]) == [f"ElasticQuota ledger of {NS}: bound, not charged: ['{NS}/a']"]
    infos.reserve_pod(pod)
    assert infos.audit([pod]) == []
    infos.unreserve(NS, pod.key)
    infos.reserve(NS, pod.key, Resources({"cpu": 3000}))  # charged again with another request: sums follow
    assert infos.audit([pod]) == []


def test_the_dump_lists_each_node_with_its_pods_and_the_queue() -> None:
    sched, _ = _cluster()
    sched.schedule_one()  # "wait" fits no node: unschedulable
    lines = dump(snapshot(sched, (), ()))
    assert lines[:2] == [f"node n1: 1 pod(s) counted: {NS}/run-1", f"node n2: 1 pod(s) counted: {NS}/run-2"]
    assert lines[2].startswith(f"queue unschedulable: 1 pod(s): {NS}/wait (1 attempt(s), parked 0s: ")
    assert "quota exceeded in ElasticQuota/team/eq (max)" in lines[2], lines[2]


def test_a_gang_waiting_in_permit_is_assumed_not_a_mismatch_and_the_dump_shows_it() -> None:
    """Two of a 3-pod gang wait in Permit (the third gated): the scheduler counts them on the node,
    the informer has them pending; the comparison counts them as assumed, the dump says who waits."""
    sched, _ = make_scheduler(config=config_text("priority, gang", "predicates"))
    sched.set_node(MakeNode("n1").alloc(cpu="8", memory="16Gi", pods="110").info())
    sched.put_object(MakePodGroup("big", NS).min_member(3).obj())
    pods = [MakePod(f"big-{i}", NS).group("big").req(cpu="1") for i in range(3)]
    pods[2] = pods[2].scheduling_gates("example.com/wait")
    for pod in pods:
        sched.add_pod(pod.info())
    sched.run_enqueue()
    while sched.schedule_one() is not None:
        pass
    found = compare(snapshot(sched, ["n1"], [p.obj() for p in pods]))
    assert (found.mismatches, found.assumed) == ((), 2)
    assert found.summary() == "1 nodes, 3 pods, 0 unreadable, 2 assumed not yet bound, 0 mismatch(es)"
    assert f"waiting in Permit for gang {NS}/big (0s): {NS}/big-0 on n1, {NS}/big-1 on n1" in dump(
        snapshot(sched, (), ())
    )


# -- on SIGUSR2: the same lines, in steps, one run at a time -------------------------------------------


def _drifted() -> tuple[Scheduler, list[str], list[dict[str, Any]]]:
    """The cluster with a mismatch of every kind the pods give, and a parked pod for the dump."""
    sched, pods = _cluster()
    sched.schedule_one()  # "wait" is parked
    for i in range(5):
        sched.add_pod(PodInfo.from_dict(MakePod(f"extra-{i}", NS).req(cpu="1").node("n1").obj()))
    informer = [
        *pods[:2],
        pods[2],
        MakePod("late", NS).req(cpu="1").node("n2").obj(),
        MakePod("new", NS).req(cpu="1").obj(),
    ]
    return sched, ["n1", "n3"], informer


def _expected(sched: Scheduler, nodes: list[str], pods: list[dict[str, Any]]) -> list[str]:
    found = compare(snapshot(sched, nodes, pods))
    return [
        *(f"WARNING cache mismatch: {m}" for m in found.mismatches),
        f"INFO cache comparison: {found.summary()}",
        *(f"INFO cache dump: {line}" for line in dump(snapshot(sched, (), ()))),
    ]


def _logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.levelname} {r.getMessage()}" for r in caplog.records]


@pytest.mark.parametrize("chunk", [1, 2, 1000])
async def test_the_signal_logs_what_compare_and_dump_give_with_the_loop_run_between_steps(
    chunk: int, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run in steps of ``chunk`` pods, mismatches and lines, the debugger logs exactly the lines of
    the synchronous compare and dump, in their order; another task runs between its steps (with
    steps of 1 and 2, many times)."""
    monkeypatch.setattr(cache_debugger, "CHUNK", chunk)
    sched, nodes, pods = _drifted()
    expected = _expected(sched, nodes, pods)
    assert len(expected) > 8 and any("cache mismatch" in line for line in expected)
    debugger = CacheDebugger(logging.getLogger("test.cache_debugger"))
    ticks = 0
    running = True

    async def ticker() -> None:
        nonlocal ticks
        while running:
            ticks += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(ticker())
    caplog.set_level(logging.INFO, logger="test.cache_debugger")
    task = debugger.start(lambda: snapshot(sched, nodes, pods))
    assert task is not None
    await task
    running = False
    await other
    assert _logged(caplog) == expected
    assert ticks > (len(pods) // chunk if chunk < 1000 else 0)


async def test_a_second_signal_while_one_runs_is_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    sched, nodes, pods = _drifted()
    debugger = CacheDebugger(logging.getLogger("test.cache_debugger"))
    caplog.set_level(logging.INFO, logger="test.cache_debugger")
    taken: list[int] = []

    def take() -> cache_debugger.Snapshot:
        taken.append(1)
        return snapshot(sched, nodes, pods)

    first = debugger.start(take)
    assert first is not None and debugger.running
    assert debugger.start(take) is None
    assert taken == [1]  # the second signal took no snapshot
    await first
    assert not debugger.running
    logged = _logged(caplog)
    assert logged.count("INFO cache debugger already running: this signal is ignored") == 1
    assert sum(line.startswith("INFO cache comparison: ") for line in logged) == 1
    again = debugger.start(take)  # once done, a signal runs it again
    assert again is not None
    await again
    assert sum(line.startswith("INFO cache comparison: ") for line in _logged(caplog)) == 2


async def test_what_is_compared_is_the_state_at_the_signal(caplog: pytest.LogCaptureFixture) -> None:
    """A change the loop applies while the comparison runs (a pod bound, a node added) is not in it:
    the comparison is of the state both sides had at the signal, as the synchronous one was."""
    sched, pods = _cluster()
    debugger = CacheDebugger(logging.getLogger("test.cache_debugger"))
    caplog.set_level(logging.INFO, logger="test.cache_debugger")
    expected = _expected(sched, ["n1", "n2"], pods)
    task = debugger.start(lambda: snapshot(sched, ["n1", "n2"], pods))
    assert task is not None
    sched.add_pod(PodInfo.from_dict(MakePod("later", NS).req(cpu="1").node("n1").obj()))
    sched.set_node(MakeNode("n9").alloc(cpu="8", memory="16Gi", pods="110").info())
    await task
    assert _logged(caplog) == expected
    assert not any("later" in line or "n9" in line for line in _logged(caplog))


async def test_an_error_in_the_comparison_is_logged_and_the_next_signal_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sched, pods = _cluster()
    debugger = CacheDebugger(logging.getLogger("test.cache_debugger"))
    caplog.set_level(logging.INFO, logger="test.cache_debugger")

    def broken() -> cache_debugger.Snapshot:
        raise RuntimeError("boom")

    assert debugger.start(broken) is None
    task = debugger.start(lambda: snapshot(sched, ["n1", "n2"], [{"metadata": 7}, *pods]))
    assert task is not None
    await task
    logged = _logged(caplog)
    assert logged[0] == "ERROR cache comparison failed (an error in gpuq)"
    assert (
        "INFO cache comparison: 2 nodes, 4 pods, 1 unreadable, 0 assumed not yet bound, 0 mismatch(es)"
        in logged
    )


@pytest.mark.parametrize("chunk", [1, 1000])
async def test_the_ledger_audit_runs_in_the_steps_on_the_ledger_as_it_stood_at_the_signal(
    chunk: int, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot only copies the ledger; the audit compares the copy in the later steps: a leak
    charged before the signal is logged though it is released before those steps run, and one charged
    after the signal is not."""
    monkeypatch.setattr(cache_debugger, "CHUNK", chunk)
    sched, pods = _cluster()
    infos = plugin_of(sched, CapacityScheduling).infos
    infos.reserve(NS, f"{NS}/leaked", Resources({"cpu": 2000}))
    debugger = CacheDebugger(logging.getLogger("test.cache_debugger"))
    caplog.set_level(logging.INFO, logger="test.cache_debugger")
    task = debugger.start(lambda: snapshot(sched, ["n1", "n2"], pods))
    assert task is not None
    infos.unreserve(NS, f"{NS}/leaked")
    infos.reserve(NS, f"{NS}/later", Resources({"cpu": 1000}))
    await task
    mismatches = [line for line in _logged(caplog) if line.startswith("WARNING")]
    assert mismatches == [
        f"WARNING cache mismatch: ledger: ElasticQuota ledger of {NS}: charged, not bound: ['{NS}/leaked']"
    ]
    assert infos.audit(sched.cluster.pods.values()) == [
        f"ElasticQuota ledger of {NS}: charged, not bound: ['{NS}/later']"
    ]
