"""Reference forms of the crossquota, resource-strategy-fit and capacity-card node scores, for the tests.

The engines score through column-wise kernels (:class:`common.model.crossquota.score.NodeScorer`,
:meth:`common.model.strategy_fit.ScorePlan.score_nodes_by_column`) and their few-rows Python forms.
The tests compare those against the two forms kept here, which nothing in the scheduler runs:

* the *scalar* forms, one node at a time over resource-name mappings, written straight from the specs
  (crossquota.md "Node Ordering Function"; resource-strategy-fit.md "config description"), which the
  engines must match to a float tolerance;
* the *[N, k] block* forms, the arithmetic the scheduler ran before the column-wise kernels, which
  the kernels must match bit for bit (ties go to the first node name, so "close" is not enough).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model.capacity_card.ordering import BASE_SCORE
from gpuq_k8s.common.model.cards.discovery import NodeCards
from gpuq_k8s.common.model.crossquota.args import CrossQuotaArgs
from gpuq_k8s.common.model.crossquota.pod import CrossQuotaPod, ScoringStrategy
from gpuq_k8s.common.model.strategy_fit import MAX_NODE_SCORE, PodStrategy, ScorePlan, ScoringType


def row_sums(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Each row of ``values`` [N, k] summed left to right, as the column and scalar forms add. numpy's
    ``sum(axis=1)`` is not a fixed order: from 8 terms on it may sum pairwise, and differently for
    one row than for many, so the reference forms sum through here (upstream adds in order too)."""
    total: npt.NDArray[np.float64] = values[:, 0].copy()
    for j in range(1, values.shape[1]):
        total += values[:, j]
    return total


# --------------------------------------------------------------------------------------------------
# crossquota


def crossquota_score_node(
    args: CrossQuotaArgs,
    requests: Mapping[str, int],
    *,
    strategy: ScoringStrategy,
    node_is_gpu: bool,
    quota: Mapping[str, int],
    used: Mapping[str, int],
) -> float:
    """Scalar score: ``sum(score*w)/sum(w) * crossQuotaWeight`` over the requested quota resources."""
    if not node_is_gpu or not args.is_cpu_pod(requests) or args.plugin_weight == 0:
        return 0.0
    total = 0.0
    weight_sum = 0
    for r in args.quota_resources:
        request = requests.get(r, 0)
        if request <= 0:  # Semantics 8
            continue
        limit = quota.get(r, 0)
        after = used.get(r, 0) + request
        if limit == 0:
            score = 0.0
        elif after > limit:
            return 0.0
        elif strategy is ScoringStrategy.MOST_ALLOCATED:
            score = after / limit
        else:
            score = (limit - after) / limit
        weight = args.weight_of(r)
        total += score * weight
        weight_sum += weight
    if weight_sum == 0:
        return 0.0
    return total / weight_sum * args.plugin_weight


def crossquota_score_nodes(
    args: CrossQuotaArgs,
    pod: CrossQuotaPod,
    is_gpu_node: npt.NDArray[np.bool_],
    quota: npt.NDArray[np.int64],
    used: npt.NDArray[np.int64],
) -> npt.NDArray[np.float64]:
    """[N, k] block score over N nodes (the inputs of ``filter_nodes``); float64[N]."""
    n = is_gpu_node.shape[0]
    active = pod.request > 0
    if not pod.is_cpu_pod or args.plugin_weight == 0 or not active.any():
        return np.zeros(n, dtype=np.float64)
    request = pod.request[active]
    q = quota[:, active]
    after = used[:, active] + request
    weights = args.weights()[active]
    weight_sum = weights.sum()
    if weight_sum == 0:
        return np.zeros(n, dtype=np.float64)
    safe_q = np.where(q == 0, 1, q).astype(np.float64)
    after_f = after.astype(np.float64)
    if pod.strategy is ScoringStrategy.MOST_ALLOCATED:
        ratio = after_f / safe_q
    else:
        ratio = (q.astype(np.float64) - after_f) / safe_q
    ratio = np.where(q == 0, 0.0, ratio)
    overflow = ((after > q) & (q != 0)).any(axis=1)
    scores: npt.NDArray[np.float64] = row_sums(ratio * weights) / weight_sum * args.plugin_weight
    return np.where(is_gpu_node & ~overflow, scores, 0.0)


# --------------------------------------------------------------------------------------------------
# resource-strategy-fit


def strategy_fit_score_node(
    strategy: PodStrategy,
    requests: Mapping[str, int],
    allocatable: Mapping[str, int],
    used: Mapping[str, int],
) -> float:
    """Scalar score of one node: ``sum(w*s)/sum(w) * 100 * resourceStrategyFitWeight``.

    ``used`` is what the pods already on the node request (kube-scheduler's "requested").
    """
    total = 0.0
    weight_sum = 0
    for resource, request in requests.items():
        if request <= 0:  # Semantics 8
            continue
        rule = strategy.strategy_for(resource)
        if rule is None:
            continue
        capacity = allocatable.get(resource, 0)
        after = used.get(resource, 0) + request
        if capacity == 0:
            score = 0.0
        elif after > capacity:
            return 0.0
        elif rule.type is ScoringType.MOST_ALLOCATED:
            score = after / capacity
        else:
            score = (capacity - after) / capacity
        total += score * rule.weight
        weight_sum += rule.weight
    if weight_sum == 0:
        return 0.0
    return total / weight_sum * MAX_NODE_SCORE * strategy.args.plugin_weight


def strategy_fit_score_nodes(
    plan: ScorePlan, allocatable: npt.NDArray[np.int64], requested: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    """[N, k] block score of ``plan``: float64[N] from allocatable[N, R] and requested[N, R] (what
    is already on each node)."""
    n = allocatable.shape[0]
    weight_sum = float(plan.weights.sum()) + plan.missing_weight
    if weight_sum == 0 or plan.columns.size == 0:
        return np.zeros(n, dtype=np.float64)
    capacity = allocatable[:, plan.columns]
    after = requested[:, plan.columns] + plan.request
    safe = np.where(capacity == 0, 1, capacity).astype(np.float64)
    after_f = after.astype(np.float64)
    ratio = np.where(plan.most_allocated, after_f / safe, (capacity.astype(np.float64) - after_f) / safe)
    ratio = np.where(capacity == 0, 0.0, ratio)
    overflow = ((after > capacity) & (capacity != 0)).any(axis=1)
    scores = row_sums(ratio * plan.weights) / weight_sum * (MAX_NODE_SCORE * plan.plugin_weight)
    result: npt.NDArray[np.float64] = np.where(overflow, 0.0, scores)
    return result


def node_order_score(alternatives: Sequence[str], node_cards: NodeCards, weight: float) -> float:
    """capacity-card "Node Ordering", one node at a time: the scalar form of
    :func:`common.model.capacity_card.ordering.node_order_scores` (200/100/50 with weight 2.0)."""
    if len(alternatives) < 2:
        return 0.0
    for i, name in enumerate(alternatives):
        if node_cards.by_name(name) is not None:
            return BASE_SCORE * 0.5**i * weight
    return 0.0
