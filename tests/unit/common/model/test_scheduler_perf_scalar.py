"""The scalar few-row score paths equal the engines' vectorised forms bit for bit (issue 4).

Between two pods of a class only a handful of node rows change, and rescoring them through numpy
costs more in per-call overhead than in arithmetic, so the scheduler's row cache hands up to
``FEW_ROWS`` rows to the engines' scalar forms (``NodeScorer.score_few``, ``ScorePlan.score_few``,
``predicate.fits_few``). Equal totals go to the first node name, so every float must be the
vectorised one (``-0.0`` included), and every verdict the vectorised filter's.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuq_k8s.common.model import strategy_fit as sf
from gpuq_k8s.common.model.crossquota.args import CrossQuotaArgs
from gpuq_k8s.common.model.crossquota.pod import CrossQuotaPod, ScoringStrategy
from gpuq_k8s.common.model.crossquota.predicate import filter_nodes, fits_few
from gpuq_k8s.common.model.crossquota.score import NodeScorer, node_scorer
from tests.testing.reference_scoring import crossquota_score_nodes

IntArray = npt.NDArray[np.int64]

RESOURCES: tuple[str, ...] = ("cpu", "memory", "ephemeral-storage", "example.com/a", "example.com/b")
RESOURCES += ("example.com/c", "example.com/d", "example.com/e", "example.com/f")


def _same(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@st.composite
def _case(draw: st.DrawFn) -> tuple[NodeScorer, npt.NDArray[np.bool_], IntArray, IntArray, list[int]]:
    k = draw(st.integers(1, len(RESOURCES)))
    resources = RESOURCES[:k]
    arguments: dict[str, object] = {
        "gpu-resource-names": "nvidia.com/gpu",
        "quota-resources": ",".join(resources),
    }
    for r in resources:
        arguments[f"weight.{r}"] = draw(st.integers(0, 7))
    arguments["crossQuotaWeight"] = draw(st.integers(0, 20))
    args = CrossQuotaArgs.parse(arguments)
    request = np.array([draw(st.sampled_from([0, 0, 1, 250, 1000, 4096])) for _ in resources], dtype=np.int64)
    pod = CrossQuotaPod(draw(st.booleans()), request, draw(st.sampled_from(list(ScoringStrategy))))
    n = draw(st.integers(1, 30))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # 2**53 + 1 is not a float64: the int -> float rounding must be numpy's too.
    choices = np.array([0, 0, 500, 1000, 4096, 64000, 2**40, 2**53 + 1], dtype=np.int64)
    quota = np.asfortranarray(rng.choice(choices, size=(n, k)))
    used = np.asfortranarray(rng.integers(0, 70000, size=(n, k), dtype=np.int64))
    is_gpu = rng.random(n) < 0.7
    rows = draw(st.lists(st.integers(0, n - 1), max_size=16))
    return node_scorer(args, pod), is_gpu, quota, used, rows


@settings(max_examples=400, deadline=None)
@given(_case())
def test_crossquota_score_few_equals_score_nodes_rows(
    case: tuple[NodeScorer, npt.NDArray[np.bool_], IntArray, IntArray, list[int]],
) -> None:
    scorer, is_gpu, quota, used, rows = case
    expected = scorer.score_nodes(is_gpu, quota, used)[np.array(rows, dtype=np.intp)]
    assert _same(np.array(scorer.score_few(is_gpu, quota, used, rows), dtype=np.float64), expected)
    # The scheduler hands over Python-list mirrors of the same rows: the same bits.
    lists = scorer.score_few(is_gpu.tolist(), quota.tolist(), used.tolist(), rows)
    assert _same(np.array(lists, dtype=np.float64), expected)


@settings(max_examples=400, deadline=None)
@given(_case())
def test_crossquota_fits_few_equals_filter_nodes_rows(
    case: tuple[NodeScorer, npt.NDArray[np.bool_], IntArray, IntArray, list[int]],
) -> None:
    scorer, is_gpu, quota, used, rows = case
    fits = filter_nodes(scorer.args, scorer.pod, is_gpu, quota, used).fits
    expected = fits[np.array(rows, dtype=np.intp)]
    assert fits_few(scorer.pod, is_gpu, quota, used, rows) == expected.tolist()
    assert fits_few(scorer.pod, is_gpu.tolist(), quota.tolist(), used.tolist(), rows) == expected.tolist()


def test_crossquota_fits_few_example() -> None:
    """``crossquota.md`` "Predicate": a CPU pod fits a GPU node while used + request <= quota for
    every quota resource; a non-GPU node always fits."""
    pod = CrossQuotaPod(True, np.array([1000, 0], dtype=np.int64), ScoringStrategy.MOST_ALLOCATED)
    quota = np.array([[4000, 10], [4000, 10], [1500, 10], [0, 0]], dtype=np.int64)
    used = np.array([[3000, 10], [3001, 0], [1000, 0], [5, 5]], dtype=np.int64)
    is_gpu = np.array([True, True, True, False])
    assert fits_few(pod, is_gpu, quota, used, [0, 1, 2, 3]) == [True, False, False, True]
    gpu_pod = CrossQuotaPod(False, pod.request, ScoringStrategy.MOST_ALLOCATED)
    assert fits_few(gpu_pod, is_gpu, quota, used, [1, 2]) == [True, True]


def test_crossquota_score_few_least_allocated_example() -> None:
    """Semantics of ``crossquota.md`` "Score": LeastAllocated = (quota - used - request) / quota,
    weighted, times the plugin weight; an overflowing or non-GPU node scores 0."""
    args = CrossQuotaArgs.parse({"gpu-resource-names": "nvidia.com/gpu", "quota-resources": "cpu"})
    pod = CrossQuotaPod(True, np.array([1000], dtype=np.int64), ScoringStrategy.LEAST_ALLOCATED)
    quota = np.array([[4000], [4000], [1500]], dtype=np.int64)
    used = np.array([[1000], [0], [1000]], dtype=np.int64)
    is_gpu = np.array([True, False, True])
    scores = node_scorer(args, pod).score_few(is_gpu, quota, used, [0, 1, 2, 0])
    expected = 0.5 * args.plugin_weight
    assert scores == [expected, 0.0, 0.0, expected]


@st.composite
def _plan_case(draw: st.DrawFn) -> tuple[sf.ScorePlan, IntArray, IntArray, list[int]]:
    r = draw(st.integers(1, 10))
    k = draw(st.integers(1, r))
    columns = np.array(sorted(draw(st.permutations(range(r)))[:k]), dtype=np.intp)
    plan = sf.ScorePlan(
        columns,
        np.array([draw(st.sampled_from([1, 250, 1000, 4096, 2**40])) for _ in range(k)], dtype=np.int64),
        np.array([draw(st.booleans()) for _ in range(k)], dtype=np.bool_),
        np.array([float(draw(st.integers(0, 7))) for _ in range(k)], dtype=np.float64),
        float(draw(st.integers(0, 3))),
        draw(st.integers(0, 20)),
    )
    n = draw(st.integers(1, 30))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    choices = np.array([0, 0, 500, 1000, 4096, 64000, 2**40, 2**53 + 1], dtype=np.int64)
    allocatable = np.asfortranarray(rng.choice(choices, size=(n, r)))
    requested = np.asfortranarray(rng.integers(0, 70000, size=(n, r), dtype=np.int64))
    rows = draw(st.lists(st.integers(0, n - 1), max_size=16))
    return plan, allocatable, requested, rows


@settings(max_examples=400, deadline=None)
@given(_plan_case())
def test_strategy_fit_score_few_equals_score_nodes_by_column_rows(
    case: tuple[sf.ScorePlan, IntArray, IntArray, list[int]],
) -> None:
    plan, allocatable, requested, rows = case
    expected = plan.score_nodes_by_column(allocatable, requested)[np.array(rows, dtype=np.intp)]
    assert _same(np.array(plan.score_few(allocatable, requested, rows), dtype=np.float64), expected)


def test_strategy_fit_score_few_most_allocated_example() -> None:
    """``resource-strategy-fit.md`` "Score": MostAllocated = (used + request) / allocatable, weighted,
    times 100 and the plugin weight; an overflowing node scores 0, a zero-capacity column scores 0."""
    plan = sf.ScorePlan(
        np.array([0, 1], dtype=np.intp),
        np.array([1000, 0], dtype=np.int64),
        np.array([True, True]),
        np.array([1.0, 1.0]),
        0.0,
        1,
    )
    allocatable = np.array([[4000, 0], [4000, 0], [1500, 0]], dtype=np.int64)
    requested = np.array([[1000, 0], [0, 0], [1000, 0]], dtype=np.int64)
    scores = plan.score_few(allocatable, requested, [0, 1, 2])
    assert scores == [25.0, 12.5, 0.0]


def test_eight_or_more_scored_resources_add_in_order_for_one_row_as_for_many() -> None:
    """numpy's row sum may go pairwise from 8 terms, differently for one row than for many; the
    engines add left to right everywhere, so one changed row rescored alone gets the same bits."""
    resources = RESOURCES[:9]
    arguments: dict[str, object] = {
        "gpu-resource-names": "nvidia.com/gpu",
        "quota-resources": ",".join(resources),
    }
    args = CrossQuotaArgs.parse(arguments)
    pod = CrossQuotaPod(True, np.ones(9, dtype=np.int64), ScoringStrategy.LEAST_ALLOCATED)
    scorer = node_scorer(args, pod)
    rng = np.random.default_rng(7)
    quota = np.asfortranarray(rng.choice(np.array([500, 4096, 64000, 2**40, 2**53 + 1]), size=(64, 9)))
    used = np.asfortranarray(rng.integers(0, 400, size=(64, 9), dtype=np.int64))
    is_gpu = np.ones(64, dtype=np.bool_)
    full = scorer.score_nodes(is_gpu, quota, used)
    assert _same(full, crossquota_score_nodes(args, pod, is_gpu, quota, used))
    for row in range(64):
        alone = crossquota_score_nodes(
            args, pod, is_gpu[row : row + 1], quota[row : row + 1], used[row : row + 1]
        )
        assert alone.tobytes() == full[row : row + 1].tobytes()
        assert scorer.score_few(is_gpu, quota, used, [row]) == [full[row]]
