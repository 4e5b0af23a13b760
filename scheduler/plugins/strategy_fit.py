"""``resource-strategy-fit``: thin glue over :mod:`common.model.strategy_fit` (spec
``resource-strategy-fit.md``). The engine's :class:`~common.model.strategy_fit.ScorePlan` picks the
cluster's resource columns that score the pod and scores all nodes from ``allocatable[N, R]`` and
``requested[N, R]`` directly.

A plan depends only on the pod's requests and override annotations (and the cluster's columns), so it
is memoised per those; its scores are row-wise, so they are kept per plan in a
:class:`~scheduler.cluster.row_cache.RowCache` that recomputes only the rows changed since, one
resource column at a time (:meth:`~common.model.strategy_fit.ScorePlan.score_nodes_by_column`)."""

from __future__ import annotations

from typing import Final

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model import strategy_fit as engine
from gpuq_k8s.common.model.annotations import RESOURCE_STRATEGY_SCORING_TYPE, RESOURCE_STRATEGY_WEIGHT
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.scheduler.cluster.row_cache import RowCache, Rows
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import BoolArray, FloatArray, Handle, PreScorePlugin, ScorePlugin
from gpuq_k8s.scheduler.framework.registry import PluginSettings, plugin_args
from gpuq_k8s.scheduler.framework.status import Status

_MAX_PLANS: Final = 1024

# A plan's identity: its columns, requests, types and weights (bytes), the missing and plugin weights.
_PlanKey = tuple[bytes, bytes, bytes, bytes, float, int]


def _plan_key(plan: engine.ScorePlan) -> _PlanKey:
    return (
        plan.columns.tobytes(),
        plan.request.tobytes(),
        plan.most_allocated.tobytes(),
        plan.weights.tobytes(),
        plan.missing_weight,
        plan.plugin_weight,
    )


class ResourceStrategyFit(PreScorePlugin, ScorePlugin):
    name = plugin_names.RESOURCE_STRATEGY_FIT

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        args = plugin_args(settings, engine.ResourceStrategyFitArgs)
        self.args = args or engine.ResourceStrategyFitArgs.parse({})
        self._plans: dict[
            tuple[Resources, str | None, str | None, int], tuple[engine.ScorePlan, _PlanKey]
        ] = {}
        self._by_key: dict[_PlanKey, engine.ScorePlan] = {}
        self._scores: RowCache[_PlanKey] = RowCache(
            handle.cluster, self._score_rows, compute_few=self._score_few
        )

    @property
    def scoring(self) -> bool:
        return self.args.plugin_weight > 0  # resourceStrategyFitWeight 0: scoring off (Semantics 11)

    def _score_rows(self, key: _PlanKey, rows: Rows | None) -> FloatArray:
        cluster = self.handle.cluster
        plan = self._by_key[key]
        if rows is None:
            n = cluster.n
            return plan.score_nodes_by_column(cluster.allocatable[:n], cluster.requested[:n])
        return plan.score_nodes_by_column(cluster.allocatable[rows], cluster.requested[rows])

    def _score_few(self, key: _PlanKey, rows: list[int]) -> list[float]:
        cluster = self.handle.cluster
        return self._by_key[key].score_few(cluster.allocatable, cluster.requested, rows)

    def _plan(self, pod: PodInfo) -> tuple[engine.ScorePlan, _PlanKey | None]:
        columns = self.handle.cluster.columns.names
        annotations = pod.annotations
        memo = (
            pod.requests,
            annotations.get(RESOURCE_STRATEGY_SCORING_TYPE),
            annotations.get(RESOURCE_STRATEGY_WEIGHT),
            len(columns),
        )
        known = self._plans.get(memo)
        if known is not None:
            return known
        strategy = engine.pod_strategy(self.args, pod)
        for event in strategy.events:
            self.handle.record(event)
        plan = engine.score_plan(strategy, pod.requests, columns)
        if strategy.events:
            return plan, None  # a malformed override warns on every attempt: not memoised
        if len(self._plans) >= _MAX_PLANS:
            self._plans.clear()
            self._by_key.clear()
            self._scores.clear()
        key = _plan_key(plan)
        # Pods whose requests differ only outside the scored columns (a GPU pod's cpu) share one
        # plan object, so that score() finds it in the row cache instead of scoring every row.
        plan = self._by_key.setdefault(key, plan)
        self._plans[memo] = (plan, key)
        return plan, key

    def pre_score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> Status:
        plan, key = self._plan(pod)
        if plan.columns.size == 0:
            return Status.skip()
        state.write(plugin_names.RESOURCE_STRATEGY_FIT, plan)
        if key is not None:
            state.write(f"{plugin_names.RESOURCE_STRATEGY_FIT}/key", key)
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> FloatArray:
        cluster = self.handle.cluster
        plan = state.read(plugin_names.RESOURCE_STRATEGY_FIT, engine.ScorePlan)
        if plan is None:
            plan = engine.score_plan(engine.pod_strategy(self.args, pod), pod.requests, cluster.columns.names)
        key = state.read(f"{plugin_names.RESOURCE_STRATEGY_FIT}/key", tuple)
        if key is not None and self._by_key.get(key) is plan:
            scores: FloatArray = self._scores.get(key)  # the cache's own: the framework only reads it
            return scores
        n = cluster.n
        return plan.score_nodes_by_column(cluster.allocatable[:n], cluster.requested[:n])
