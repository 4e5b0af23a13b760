"""``binpack``: Volcano's binpack node score, glue over :mod:`common.model.binpack`.

The score is row-wise and depends on the pod only through its weighted requests, so it is kept per
those (the pod class) in a :class:`~scheduler.cluster.row_cache.RowCache` that recomputes only the
rows bound or released since the class was last scored.
"""

from __future__ import annotations

from typing import Final

from gpuq_k8s.common.model import binpack as engine
from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.scheduler.cluster.row_cache import RowCache, Rows
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import BoolArray, FloatArray, Handle, PreScorePlugin, ScorePlugin
from gpuq_k8s.scheduler.framework.registry import PluginSettings, plugin_args
from gpuq_k8s.scheduler.framework.status import Status

_MAX_CLASSES: Final = 1024

_Key = tuple[engine.BinpackTerm, ...]


class Binpack(PreScorePlugin, ScorePlugin):
    name = plugin_names.BINPACK

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        self.args = plugin_args(settings, engine.BinpackArgs) or engine.BinpackArgs.parse({})
        self._memo: dict[tuple[Resources, int], _Key] = {}
        self._scores: RowCache[_Key] = RowCache(handle.cluster, self._score_rows, compute_few=self._score_few)

    @property
    def scoring(self) -> bool:
        return self.args.weight > 0  # binpack.weight 0: no node-order function (Semantics 11)

    def _score_rows(self, key: _Key, rows: Rows | None) -> FloatArray:
        cluster = self.handle.cluster
        if rows is None:
            n = cluster.n
            return engine.score_nodes(self.args, key, cluster.allocatable[:n], cluster.requested[:n])
        return engine.score_nodes(self.args, key, cluster.allocatable[rows], cluster.requested[rows])

    def _score_few(self, key: _Key, rows: list[int]) -> list[float]:
        cluster = self.handle.cluster
        allocatable, requested = cluster.allocatable, cluster.requested
        pairs = ((allocatable[row].tolist(), requested[row].tolist()) for row in rows)
        return engine.score_rows(self.args, key, pairs)

    def _terms(self, pod: PodInfo) -> _Key:
        """The pod's weighted requests, memoised per request (pods of a workload share one)."""
        columns = self.handle.cluster.columns.index
        memo = (pod.requests, len(columns))
        terms = self._memo.get(memo)
        if terms is None:
            if len(self._memo) >= _MAX_CLASSES:
                self._memo.clear()
            terms = self._memo[memo] = engine.terms_for(self.args, pod.requests_with_pod_count, columns)
        return terms

    def pre_score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> Status:
        state.write(plugin_names.BINPACK, self._terms(pod))
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> FloatArray:
        terms = state.read(plugin_names.BINPACK, tuple)
        key: _Key = terms if terms is not None else self._terms(pod)
        scores: FloatArray = self._scores.get(key)  # the cache's own: the framework only reads it
        return scores
