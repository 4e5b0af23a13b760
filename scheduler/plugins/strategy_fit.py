"""``resource-strategy-fit``: thin glue over :mod:`common.model.strategy_fit` (spec
``resource-strategy-fit.md``). The engine's :class:`~common.model.strategy_fit.ScorePlan` picks the
cluster's resource columns that score the pod and scores all nodes from ``allocatable[N, R]`` and
``requested[N, R]`` directly."""

from __future__ import annotations

from typing import Final

from common.model import strategy_fit as engine
from common.model.pods import PodInfo
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interfaces import BoolArray, FloatArray, Handle, PreScorePlugin, ScorePlugin
from scheduler.framework.registry import PluginSettings, plugin_args
from scheduler.framework.status import Status

NAME: Final = "resource-strategy-fit"


class ResourceStrategyFit(PreScorePlugin, ScorePlugin):
    name = NAME

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        self.args = plugin_args(settings, engine.ResourceStrategyFitArgs) or engine.parse_arguments({})

    def pre_score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> Status:
        strategy = engine.pod_strategy(self.args, pod)
        for event in strategy.events:
            self.handle.record(event)
        plan = engine.score_plan(strategy, pod.requests, self.handle.cluster.columns.names)
        if plan.columns.size == 0:
            return Status.skip()
        state.write(NAME, plan)
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> FloatArray:
        cluster = self.handle.cluster
        plan = state.read(NAME, engine.ScorePlan)
        if plan is None:
            plan = engine.score_plan(engine.pod_strategy(self.args, pod), pod.requests, cluster.columns.names)
        n = cluster.n
        return plan.score_nodes(cluster.allocatable[:n], cluster.requested[:n])
