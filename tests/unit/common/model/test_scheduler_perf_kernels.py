"""The column-wise score kernels equal the [N, k] reference forms bit for bit, and are row-wise.

The scheduler's hot path (issue 4) scores through :class:`common.model.crossquota.score.NodeScorer`
and :meth:`common.model.strategy_fit.ScorePlan.score_nodes_by_column`, on column-major arrays and on
row subsets (its :class:`~scheduler.cluster.row_cache.RowCache`). Equal totals go to the first node
name, so "close" is not enough: every float must be the one the [N, k] form
(:mod:`tests.testing.reference_scoring`) gives on row-major input, as the scheduler passed before.
Exercised with every strategy, quota and capacity zeros (the ``safe`` divisor and the 0 score),
overflow, and 1 to 9 scored resources (numpy sums 8+ terms pairwise).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuq_k8s.common.model import strategy_fit as sf
from gpuq_k8s.common.model.crossquota.args import CrossQuotaArgs
from gpuq_k8s.common.model.crossquota.pod import CrossQuotaPod, ScoringStrategy
from gpuq_k8s.common.model.crossquota.score import node_scorer
from tests.testing.reference_scoring import crossquota_score_nodes, strategy_fit_score_nodes

IntArray = npt.NDArray[np.int64]

RESOURCES: tuple[str, ...] = ("cpu", "memory", "ephemeral-storage", "example.com/a", "example.com/b")
RESOURCES += ("example.com/c", "example.com/d", "example.com/e", "example.com/f")


def _same(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> bool:
    """Equal as stored bytes: 0.0 and -0.0 differ (an explanation prints them differently)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@st.composite
def crossquota_case(
    draw: st.DrawFn,
) -> tuple[CrossQuotaArgs, CrossQuotaPod, npt.NDArray[np.bool_], IntArray, IntArray]:
    k = draw(st.integers(1, len(RESOURCES)))
    resources = RESOURCES[:k]
    arguments: dict[str, object] = {
        "gpu-resource-names": "nvidia.com/gpu",
        "quota-resources": ",".join(resources),
    }
    for r in resources:
        arguments[f"weight.{r}"] = draw(st.integers(1, 7))
    arguments["crossQuotaWeight"] = draw(st.integers(0, 20))
    args = CrossQuotaArgs.parse(arguments)
    request = np.array([draw(st.sampled_from([0, 0, 1, 250, 1000, 4096])) for _ in resources], dtype=np.int64)
    strategy = draw(st.sampled_from(list(ScoringStrategy)))
    pod = CrossQuotaPod(True, request, strategy)
    n = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    quota = rng.choice(np.array([0, 0, 500, 1000, 4096, 64000, 2**40], dtype=np.int64), size=(n, k))
    used = rng.integers(0, 70000, size=(n, k), dtype=np.int64)
    is_gpu = rng.random(n) < 0.7
    return args, pod, is_gpu, quota, used


@settings(max_examples=300, deadline=None)
@given(crossquota_case(), st.booleans())
def test_crossquota_node_scorer_equals_score_nodes(
    case: tuple[CrossQuotaArgs, CrossQuotaPod, npt.NDArray[np.bool_], IntArray, IntArray],
    column_major: bool,
) -> None:
    args, pod, is_gpu, quota, used = case
    expected = crossquota_score_nodes(args, pod, is_gpu, quota, used)
    if column_major:
        quota, used = np.asfortranarray(quota), np.asfortranarray(used)
    scorer = node_scorer(args, pod)
    assert _same(scorer.score_nodes(is_gpu, quota, used), expected)
    rows = np.arange(0, is_gpu.shape[0], 3)
    assert _same(scorer.score_nodes(is_gpu[rows], quota[rows], used[rows]), expected[rows])


def test_crossquota_node_scorer_of_a_gpu_pod_scores_nothing() -> None:
    args = CrossQuotaArgs.parse({"gpu-resource-names": "nvidia.com/gpu", "quota-resources": "cpu,memory"})
    pod = CrossQuotaPod(False, np.array([1000, 2**30], dtype=np.int64), ScoringStrategy.MOST_ALLOCATED)
    quota = np.full((3, 2), 64000, dtype=np.int64)
    scores = node_scorer(args, pod).score_nodes(np.ones(3, dtype=np.bool_), quota, np.zeros_like(quota))
    assert _same(scores, np.zeros(3))


def test_crossquota_node_scorer_spec_worked_numbers() -> None:
    """crossquota.md "Node Ordering": most-allocated = (used+request)/quota, weighted, x crossQuotaWeight;
    a node the pod would overflow and a CPU node score 0."""
    args = CrossQuotaArgs.parse({"gpu-resource-names": "nvidia.com/gpu", "quota-resources": "cpu"})
    pod = CrossQuotaPod(True, np.array([2000], dtype=np.int64), ScoringStrategy.MOST_ALLOCATED)
    quota = np.array([[8000], [8000], [1000], [8000]], dtype=np.int64)
    used = np.array([[2000], [0], [0], [0]], dtype=np.int64)
    is_gpu = np.array([True, True, True, False])
    scores = node_scorer(args, pod).score_nodes(is_gpu, quota, used)
    assert scores.tolist() == [5.0, 2.5, 0.0, 0.0]


@st.composite
def strategy_case(draw: st.DrawFn) -> tuple[sf.ScorePlan, IntArray, IntArray]:
    k = draw(st.integers(1, 9))
    width = k + draw(st.integers(0, 3))
    columns = np.array(sorted(draw(st.lists(st.integers(0, width - 1), min_size=k, max_size=k, unique=True))))
    plan = sf.ScorePlan(
        columns=columns.astype(np.intp),
        request=np.array([draw(st.sampled_from([1, 250, 1000, 2**30])) for _ in range(k)], dtype=np.int64),
        most_allocated=np.array([draw(st.booleans()) for _ in range(k)], dtype=np.bool_),
        weights=np.array([float(draw(st.integers(1, 9))) for _ in range(k)], dtype=np.float64),
        missing_weight=float(draw(st.sampled_from([0, 0, 3]))),
        plugin_weight=draw(st.integers(1, 10)),
    )
    n = draw(st.integers(1, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    allocatable = rng.choice(np.array([0, 0, 1000, 8000, 64000, 2**39], dtype=np.int64), size=(n, width))
    requested = rng.integers(0, 70000, size=(n, width), dtype=np.int64)
    return plan, allocatable, requested


@settings(max_examples=300, deadline=None)
@given(strategy_case(), st.booleans())
def test_strategy_fit_by_column_equals_score_nodes(
    case: tuple[sf.ScorePlan, IntArray, IntArray], column_major: bool
) -> None:
    plan, allocatable, requested = case
    expected = strategy_fit_score_nodes(plan, allocatable, requested)
    if column_major:
        allocatable, requested = np.asfortranarray(allocatable), np.asfortranarray(requested)
    assert _same(plan.score_nodes_by_column(allocatable, requested), expected)
    rows = np.arange(allocatable.shape[0])[::-2]
    assert _same(plan.score_nodes_by_column(allocatable[rows], requested[rows]), expected[rows])


def test_strategy_fit_by_column_spec_worked_numbers() -> None:
    """resource-strategy-fit.md: MostAllocated (used+request)/allocatable, LeastAllocated its complement,
    sum(score*w)/sum(w) * 100 * weight; an overflowing node scores 0."""
    plan = sf.ScorePlan(
        columns=np.array([0, 1], dtype=np.intp),
        request=np.array([2, 2], dtype=np.int64),
        most_allocated=np.array([True, False]),
        weights=np.array([1.0, 1.0]),
        missing_weight=0.0,
        plugin_weight=1,
    )
    allocatable = np.array([[8, 8], [8, 8], [1, 8]], dtype=np.int64)
    requested = np.array([[2, 2], [0, 6], [0, 0]], dtype=np.int64)
    assert plan.score_nodes_by_column(allocatable, requested).tolist() == [50.0, 12.5, 0.0]
