"""The cross-quota node order (crossquota.md "Node Ordering Function").

A CPU pod on a GPU node scores ``sum(score*w)/sum(w) * crossQuotaWeight`` over the quota resources it
requests (design.md Semantics 8), where a resource's score is most-allocated ``(used + request) / quota``
or least-allocated ``(quota - used - request) / quota`` (:mod:`common.model.allocation`); anything
else scores 0.

Where upstream behaviour is kept on purpose (each is pinned by a test): a resource with quota 0 scores
0 but keeps its weight; if any requested resource would go over its quota the whole node scores 0
(upstream's ``calculateResourceScore`` error path).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model.allocation import Term, weighted_ratio_rows, weighted_ratios
from gpuq_k8s.common.model.crossquota.args import CrossQuotaArgs
from gpuq_k8s.common.model.crossquota.pod import CrossQuotaPod, ScoringStrategy


@dataclass(frozen=True, slots=True)
class NodeScorer:
    """The node order for one prepared pod, with the per-pod parts worked out once.

    One resource column at a time: numpy costs many times more on an [N, k] block with a small k
    than on k contiguous vectors, and the scheduler keeps its node arrays column-major; the floats are
    those of the [N, k] form, element by element (ties included: the tests keep that form as their
    reference). Row-wise: scoring ``rows`` of the inputs gives the full result's ``rows``. Build with
    :func:`node_scorer`.
    """

    args: CrossQuotaArgs
    pod: CrossQuotaPod
    columns: tuple[int, ...]  # the quota resources the pod requests (Semantics 8)
    requests: tuple[int, ...]
    weights: tuple[np.float64, ...]
    weight_sum: np.float64
    scores_nothing: bool
    scored: tuple[Term, ...]  # (column, request, strategy, weight) per requested quota resource

    def terms(self) -> tuple[Term, ...]:
        return self.scored

    def score_nodes(
        self,
        is_gpu_node: npt.NDArray[np.bool_],
        quota: npt.NDArray[np.int64],
        used: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.float64]:
        """float64[N] over N nodes: ``quota`` and ``used`` (CPU-pod usage) are int64[N, R]."""
        n = is_gpu_node.shape[0]
        if self.scores_nothing:
            return np.zeros(n, dtype=np.float64)
        total, overflow = weighted_ratios(quota, used, self.terms())
        scores = total / self.weight_sum * self.args.plugin_weight
        result: npt.NDArray[np.float64] = np.where(np.greater(is_gpu_node, overflow), scores, 0.0)
        return result

    def score_few(
        self,
        is_gpu_node: Sequence[bool] | npt.NDArray[np.bool_],
        quota: Sequence[Sequence[int]] | npt.NDArray[np.int64],
        used: Sequence[Sequence[int]] | npt.NDArray[np.int64],
        rows: Sequence[int],
    ) -> list[float]:
        """``score_nodes(is_gpu_node, quota, used)[rows]`` for a few rows, with Python floats.

        The inputs are indexed by row (``quota[row][column]``): numpy arrays, or the Python lists
        the scheduler mirrors them in. The same IEEE operations in the same order as
        :meth:`score_nodes` (int64 operands turned to float64 before each subtraction or division,
        as numpy's float loops do), so the same bits; for a handful of rows this costs a fraction
        of numpy's per-call overhead.
        """
        if self.scores_nothing:
            return [0.0] * len(rows)
        weight_sum = float(self.weight_sum)
        plugin_weight = float(self.args.plugin_weight)
        out = [0.0] * len(rows)
        gpu = [i for i, row in enumerate(rows) if is_gpu_node[row]]
        sums = weighted_ratio_rows(self.scored, ((quota[rows[i]], used[rows[i]]) for i in gpu))
        for i, (total, overflow) in zip(gpu, sums, strict=True):
            if not overflow:
                out[i] = total / weight_sum * plugin_weight
        return out


def node_scorer(args: CrossQuotaArgs, pod: CrossQuotaPod) -> NodeScorer:
    """Compile the node order for ``pod`` (reusable for every pod with the same request and strategy)."""
    active = pod.request > 0
    weights = args.weights()[active]
    weight_sum = weights.sum()
    nothing = not pod.is_cpu_pod or args.plugin_weight == 0 or not active.any() or weight_sum == 0
    columns = tuple(int(c) for c in np.flatnonzero(active))
    requests = tuple(int(r) for r in pod.request[active])
    most = pod.strategy is ScoringStrategy.MOST_ALLOCATED
    return NodeScorer(
        args,
        pod,
        columns,
        requests,
        tuple(weights),
        weight_sum,
        bool(nothing),
        tuple(Term(c, r, most, float(w)) for c, r, w in zip(columns, requests, weights, strict=True)),
    )
