"""The hot path's caches (issue 4): the cluster's change log, the per-class row cache, memoised pod
vectors and node masks, and the lazily worked-out Filter outcome. Each must give what a fresh
computation gives after any change."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cluster.change_log import ChangeLog
from gpuq_k8s.scheduler.cluster.row_cache import FEW_ROWS, RowCache, Rows
from gpuq_k8s.scheduler.cluster.state import ClusterState
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import FilterPlugin, FilterResult
from gpuq_k8s.scheduler.framework.runtime import Framework
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.scheduler.simulate.run import VirtualClock
from tests.testing.builders import MakeNode, MakePod

NODE = MakeNode().alloc(cpu="8", memory="64Gi")
POD = MakePod().req(cpu="1", memory="1Gi").created("2024-01-01T00:00:00Z")


class Counting:
    """A row-wise compute (free cpu per row) that records what it was asked for."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self.calls: list[list[int] | None] = []

    def __call__(self, key: str, rows: Rows | None) -> npt.NDArray[np.int64]:
        self.calls.append(None if rows is None else sorted(rows.tolist()))
        column = self.cluster.columns.index[key]
        free = self.cluster.allocatable[:, column] - self.cluster.requested[:, column]
        result: npt.NDArray[np.int64] = free[: self.cluster.n] if rows is None else free[rows]
        return result.copy()


def fresh(cluster: ClusterState, key: str) -> list[int]:
    column = cluster.columns.index[key]
    values: list[int] = (
        cluster.allocatable[: cluster.n, column] - cluster.requested[: cluster.n, column]
    ).tolist()
    return values


def cluster_of(count: int) -> ClusterState:
    cluster = ClusterState()
    for i in range(count):
        cluster.set_node(NODE.copy().name(f"n{i:03d}").info())
    return cluster


def test_row_cache_recomputes_only_the_rows_changed_since_its_last_use() -> None:
    cluster = cluster_of(40)
    compute = Counting(cluster)
    cache: RowCache[str] = RowCache(cluster, compute)
    assert cache.get("cpu").tolist() == fresh(cluster, "cpu")
    assert compute.calls == [None]
    assert cache.get("cpu").tolist() == fresh(cluster, "cpu")
    assert compute.calls == [None]  # nothing changed: no work
    cluster.add_pod(POD.copy().name("a").req(cpu="2").node("n007").phase("Running").info())
    cluster.add_pod(POD.copy().name("b").node("n007").phase("Running").info())
    cluster.add_pod(POD.copy().name("c").node("n030").phase("Running").info())
    assert cache.get("cpu").tolist() == fresh(cluster, "cpu")
    assert compute.calls[-1] == [7, 30]
    cluster.remove_pod("ns/a")
    assert cache.get("cpu").tolist() == fresh(cluster, "cpu")
    assert compute.calls[-1] == [7]


def test_row_cache_hands_a_few_rows_to_compute_few_and_many_to_compute() -> None:
    cluster = cluster_of(400)
    compute = Counting(cluster)
    few_calls: list[list[int]] = []

    def few(key: str, rows: list[int]) -> list[int]:
        few_calls.append(sorted(rows))
        return [fresh(cluster, key)[row] for row in rows]

    cache: RowCache[str] = RowCache(cluster, compute, compute_few=few)
    cache.get("cpu")
    cluster.add_pod(POD.copy().name("a").req(cpu="2").node("n007").phase("Running").info())
    cluster.add_pod(POD.copy().name("b").node("n300").phase("Running").info())
    assert cache.get("cpu").tolist() == fresh(cluster, "cpu")
    assert few_calls == [[7, 300]] and compute.calls == [None]
    for i in range(FEW_ROWS + 1):
        cluster.add_pod(POD.copy().name(f"m{i}").node(f"n{i:03d}").phase("Running").info())
    assert cache.get("cpu").tolist() == fresh(cluster, "cpu")
    assert compute.calls[-1] == list(range(FEW_ROWS + 1)) and len(few_calls) == 1


def test_row_cache_with_its_own_log_sees_only_the_rows_logged_there() -> None:
    """A plugin whose inputs change less often than the cluster keeps its own log: rows changed in
    the cluster but not in that log are not recomputed (the compute must not depend on them)."""
    cluster = cluster_of(40)
    own = ChangeLog()
    compute = Counting(cluster)
    cache: RowCache[str] = RowCache(cluster, compute, log=own)
    cache.get("cpu")
    cluster.add_pod(POD.copy().name("a").req(cpu="2").node("n007").phase("Running").info())
    cluster.add_pod(POD.copy().name("b").req(cpu="2").node("n009").phase("Running").info())
    own.record(9, cluster.n)
    values = cache.get("cpu").tolist()
    assert compute.calls[-1] == [9]
    expected = fresh(cluster, "cpu")
    assert values[9] == expected[9] and values[7] == expected[7] + 2000  # row 7 not logged: kept


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            lambda c: [
                c.add_pod(POD.copy().name(f"p{i}").node(f"n{i:03d}").phase("Running").info())
                for i in range(20)
            ],
            "more changes than N/8",
        ),
        (lambda c: c.set_node(NODE.copy().name("n999").info()), "a new row"),
    ],
)
def test_row_cache_recomputes_everything_when_that_is_cheaper_or_rows_grew(change: Any, why: str) -> None:
    cluster = cluster_of(40)
    compute = Counting(cluster)
    cache: RowCache[str] = RowCache(cluster, compute)
    cache.get("cpu")
    change(cluster)
    assert cache.get("cpu").tolist() == fresh(cluster, "cpu"), why
    assert compute.calls[-1] is None, why


def test_row_cache_generation_invalidates_and_classes_are_bounded() -> None:
    cluster = cluster_of(20)
    compute = Counting(cluster)
    generation = [0]
    cache: RowCache[str] = RowCache(cluster, compute, classes=2, generation=lambda: generation[0])
    cache.get("cpu")
    generation[0] += 1
    cache.get("cpu")
    assert compute.calls == [None, None]
    cache.get("memory")
    cache.get("cpu")  # cpu is now the most recently used
    cache.get("pods")  # evicts memory
    assert len(cache) == 2
    calls = len(compute.calls)
    cache.get("cpu")
    assert len(compute.calls) == calls
    cache.get("memory")
    assert compute.calls[-1] is None


def test_change_log_drops_its_head_and_then_answers_none() -> None:
    cluster = cluster_of(4)
    since = cluster.log.position
    for i in range(5000):
        cluster.add_pod(POD.copy().name(f"p{i}").req(cpu="1m").node(f"n{i % 4:03d}").phase("Running").info())
    assert cluster.log.since(since, 10**9) is None
    recent = cluster.log.position
    cluster.add_pod(POD.copy().name("x").req(cpu="1m").node("n002").phase("Running").info())
    assert cluster.log.since(recent, 10) == [2]


def test_static_generation_moves_with_labels_taints_and_conditions_only() -> None:
    cluster = cluster_of(2)
    generation = cluster.static_generation
    cluster.set_node(NODE.copy().name("n000").alloc(cpu="16").info())  # allocatable only
    assert cluster.static_generation == generation
    cluster.set_node(NODE.copy().name("n000").alloc(cpu="16").labels({"zone": "a"}).info())
    assert cluster.static_generation > generation
    generation = cluster.static_generation
    cluster.remove_node("n001")
    assert cluster.static_generation > generation


def test_pod_vector_is_shared_read_only_and_follows_new_columns() -> None:
    cluster = cluster_of(1)
    first, second = POD.copy().name("a").req(cpu="2").info(), POD.copy().name("b").req(cpu="2").info()
    vector = cluster.pod_vector(first)
    assert cluster.pod_vector(second) is vector
    with pytest.raises(ValueError, match="read-only"):
        vector[0] = 5
    cluster.set_node(MakeNode("g").alloc({"cpu": "8", "example.com/x": "1"}).info())
    assert cluster.pod_vector(first).shape[0] == cluster.width


def scheduler() -> Scheduler:
    return Scheduler(SchedulerConfig.default(), default_registry(), MemoryBackend(), clock=VirtualClock())


def test_node_mask_cache_follows_label_changes() -> None:
    sched = scheduler()
    sched.set_node(NODE.copy().name("a").labels({"zone": "z1"}).info())
    sched.set_node(NODE.copy().name("b").labels({"zone": "z2"}).info())
    sched.add_pod(POD.copy().name("p1").node_selector({"zone": "z2"}).info())
    first = sched.schedule_one()
    assert first is not None and first.node == "b"
    sched.set_node(NODE.copy().name("a").labels({"zone": "z2"}).info())
    sched.set_node(NODE.copy().name("b").labels({"zone": "z1"}).info())
    sched.add_pod(POD.copy().name("p2").node_selector({"zone": "z2"}).info())
    second = sched.schedule_one()
    assert second is not None and second.node == "a"


def test_fit_follows_binds_and_releases_on_the_same_node() -> None:
    sched = scheduler()
    sched.set_node(NODE.copy().name("a").alloc(cpu="2").info())
    sched.add_pod(POD.copy().name("p1").req(cpu="2").info())
    sched.add_pod(POD.copy().name("p2").req(cpu="2").info())
    placed = sched.schedule_one()
    refused = sched.schedule_one()
    assert placed is not None and placed.node == "a"
    assert refused is not None and refused.node == "" and "Insufficient cpu" in refused.message
    sched.delete_pod("ns/p1")
    sched.clock.now += 100.0  # type: ignore[attr-defined]
    retried = sched.schedule_one()
    assert retried is not None and retried.node == "a"


def test_a_node_removed_under_its_pods_keeps_them_counted_on_a_ghost_row_until_they_go() -> None:
    """A node deleted under its pods (formerly a KeyError, then a release of the pods): the pods
    still exist until deleted and keep counting on the node's row, which no new node takes and no pod
    is placed on; the row is reused once the last of them is gone."""
    sched = scheduler()
    sched.set_node(NODE.copy().name("a").alloc(cpu="2").info())
    sched.set_node(NODE.copy().name("b").alloc(cpu="2").info())
    sched.add_pod(POD.copy().name("running").req(cpu="2").node("a").phase("Running").info())
    sched.remove_node("a")
    assert sched.cluster.pods["ns/running"].node_name == "a"
    assert sched.cluster.node_count == 1 and sched.cluster.has_row("a")
    sched.set_node(NODE.copy().name("c").alloc(cpu="2").info())
    assert sched.cluster.row_of["c"] == 2  # not a's row: its pod is still there
    sched.add_pod(POD.copy().name("p").req(cpu="2").info())
    placed = sched.schedule_one()
    assert placed is not None and placed.node == "b"  # equal scores: the first live name
    sched.delete_pod("ns/running")
    assert not sched.cluster.has_row("a")
    sched.set_node(NODE.copy().name("d").alloc(cpu="2").info())
    assert sched.cluster.row_of["d"] == 0  # a's row, free again
    assert int(sched.cluster.requested[0].sum()) == 0


def test_a_node_recreated_under_its_pods_takes_its_ghost_row_back() -> None:
    cluster = cluster_of(2)
    cluster.add_pod(POD.copy().name("r").req(cpu="3").node("n001").phase("Running").info())
    cluster.remove_node("n001")
    cluster.set_node(NODE.copy().name("n001").info())
    row = cluster.row_of["n001"]
    assert row == 1 and "ns/r" in cluster.pods_on[row]
    assert fresh(cluster, "cpu")[row] == 5000  # 8 cores, 3 of them still taken


class _LiveFilter(FilterPlugin):
    """A Filter whose verdict is its own cache and whose reasons read live state, as crossquota's."""

    name = "live"

    def __init__(self, handle: Any, verdict: npt.NDArray[np.bool_]) -> None:
        super().__init__(handle)
        self.verdict = verdict

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        return FilterResult(self.verdict, lambda: [(~self.verdict, "live says no")])


@pytest.mark.parametrize("keep", [True, False])
def test_filter_outcome_is_frozen_at_filter_time_when_kept(keep: bool) -> None:
    """Explanations are read after the run: a kept outcome must not follow the plugins' caches."""
    sched = Scheduler(SchedulerConfig.default(), default_registry(), MemoryBackend(), clock=VirtualClock())
    for i in range(4):
        sched.set_node(NODE.copy().name(f"n{i}").info())
    live = _LiveFilter(sched.framework, np.array([True, False, True, True]))
    framework = Framework(
        sched.cluster,
        sched.objects,
        sched.podgroups,
        sched.framework.record,
        lambda _: [live],
        keep_outcomes=keep,
    )
    outcome = framework.run_filter(CycleState(), POD.copy().name("p").info())
    assert outcome.feasible.tolist() == [True, False, True, True]
    live.verdict[:] = [False, False, False, True]  # the cache moves on with the next pod
    _, result, first = outcome.results[0]
    masks = [mask.tolist() for mask, _ in result.reasons()]
    if keep:
        assert first.tolist() == [False, True, False, False]
        assert result.passed.tolist() == [True, False, True, True]
        assert masks == [[False, True, False, False]]
    else:  # read lazily: valid within the attempt only, which is all a non-kept outcome is used for
        assert first.tolist() == [True, True, True, False]
        assert masks == [[True, True, True, False]]


def _true_floor(cluster: ClusterState, key: str) -> int:
    column = cluster.columns.index[key]
    live = [row for row in range(cluster.n) if cluster.alive[row]]
    return min(int(cluster.allocatable[row, column] - cluster.requested[row, column]) for row in live)


def test_free_floor_is_exact_after_binds_and_a_lower_bound_after_releases() -> None:
    """Resource fit skips a resource no live node is short of; that needs a true lower bound."""
    cluster = cluster_of(3)
    cpu = cluster.columns.index["cpu"]
    assert int(cluster.free_floor()[cpu]) == 8000
    cluster.add_pod(POD.copy().name("a").req(cpu="3").node("n001").phase("Running").info())
    cluster.add_pod(POD.copy().name("b").req(cpu="2").node("n001").phase("Running").info())
    assert int(cluster.free_floor()[cpu]) == _true_floor(cluster, "cpu") == 3000
    cluster.remove_pod("ns/b")  # the true floor rises to 5000; the kept one may stay low
    assert int(cluster.free_floor()[cpu]) <= _true_floor(cluster, "cpu") == 5000
    cluster.remove_node("n001")
    cluster.set_node(NODE.copy().name("n000").alloc(cpu="2").info())  # an update that lowers a row
    assert int(cluster.free_floor()[cpu]) <= _true_floor(cluster, "cpu") == 2000
    for i in range(64):  # enough changes: the loose floor is recomputed exactly
        cluster.add_pod(POD.copy().name(f"m{i}").req(cpu="1m").node("n002").phase("Running").info())
    assert int(cluster.free_floor()[cpu]) == _true_floor(cluster, "cpu") == 2000
    cluster.set_node(MakeNode("g").alloc({"x/y": "4"}).info())
    assert int(cluster.free_floor()[cluster.columns.index["x/y"]]) <= 0  # the others have none of it


def test_a_fifth_distinct_taint_grows_the_taint_matrix_and_is_kept() -> None:
    """Found by fuzzing: the row was written into the matrix being replaced (IndexError at start-up
    of any cluster with more than four distinct NoSchedule taints)."""
    sched = Scheduler(SchedulerConfig.default(), default_registry(), MemoryBackend(), clock=VirtualClock())
    for i in range(6):
        node = MakeNode(f"n{i}").alloc(cpu="4")
        for j in range(i + 1):
            node.taint(f"k{j}", value="v")
        sched.set_node(node.info())
    cluster = sched.cluster
    row = cluster.row_of["n5"]
    assert sorted(
        cluster.taints[t].key for t in range(len(cluster.taints)) if cluster.node_taints[row, t]
    ) == [f"k{j}" for j in range(6)]
    tolerate_all_but_k5 = [{"key": f"k{j}", "operator": "Exists"} for j in range(5)]
    sched.add_pod(POD.copy().name("p").info())
    sched.add_pod(MakePod("q").req(cpu="1").spec(tolerations=tolerate_all_but_k5).info())
    placed = {}
    while (attempt := sched.schedule_one()) is not None:
        placed[attempt.pod.name] = attempt.node
    assert placed["p"] == ""  # every node is tainted
    assert placed["q"] in {"n0", "n1", "n2", "n3", "n4"}  # only n5 has k5, which q does not tolerate
