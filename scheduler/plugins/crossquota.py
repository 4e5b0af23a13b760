"""``crossquota``: thin glue over :mod:`common.model.crossquota` (spec ``crossquota.md``).

Keeps the engine's per-node inputs as rows aligned with the cluster state: ``is_gpu[N]``,
``quota[N, Rq]`` (refreshed when a node changes) and ``used[N, Rq]``, the CPU pods' usage (updated
when a pod is bound or released). Filter and Score hand slices of these to the engine's vectorised
:func:`~common.model.crossquota.filter_nodes` / :func:`~common.model.crossquota.score_nodes`.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from common.model import crossquota as engine
from common.model.nodes import NodeInfo
from common.model.pods import PodInfo
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    FilterPlugin,
    FilterResult,
    FloatArray,
    Handle,
    PreFilterPlugin,
    ReasonMasks,
    ScorePlugin,
)
from scheduler.framework.registry import PluginSettings, plugin_args
from scheduler.framework.status import Status

NAME: Final = "crossquota"


def exceeded(resource: str) -> str:
    """The aggregated reason, as upstream's predicate words it (``<res> quota exceeded``)."""
    return f"{resource} quota exceeded"


class CrossQuota(PreFilterPlugin, FilterPlugin, ScorePlugin):
    name = NAME
    events = frozenset({ClusterEvent.POD_DELETED, ClusterEvent.NODE_ADDED, ClusterEvent.NODE_CHANGED})

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        self.args = plugin_args(settings, engine.CrossQuotaArgs) or engine.parse_arguments({})
        width = len(self.args.quota_resources)
        self._is_gpu: BoolArray = np.zeros(0, dtype=np.bool_)
        self._quota: npt.NDArray[np.int64] = np.zeros((0, width), dtype=np.int64)
        self._used: npt.NDArray[np.int64] = np.zeros((0, width), dtype=np.int64)
        handle.cluster.subscribe(self)

    def _ensure(self, row: int) -> None:
        if row < self._is_gpu.shape[0]:
            return
        size = max(16, row + 1, self._is_gpu.shape[0] * 2)
        width = len(self.args.quota_resources)
        is_gpu = np.zeros(size, dtype=np.bool_)
        quota = np.zeros((size, width), dtype=np.int64)
        used = np.zeros((size, width), dtype=np.int64)
        k = self._is_gpu.shape[0]
        is_gpu[:k], quota[:k], used[:k] = self._is_gpu, self._quota, self._used
        self._is_gpu, self._quota, self._used = is_gpu, quota, used

    # -- ClusterListener --------------------------------------------------------------------------
    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        self._ensure(row)
        if new is None:
            self._is_gpu[row] = False
            self._quota[row] = 0
            self._used[row] = 0
            return
        self._is_gpu[row] = self.args.is_gpu_node(new.allocatable)
        if self._is_gpu[row]:
            quota = engine.node_quota(self.args, new)
            self._quota[row] = quota.vector(self.args)
            if old is None or old.annotations != new.annotations:
                for event in quota.events:
                    self.handle.record(event)
        else:
            self._quota[row] = 0

    def pod_added(self, pod: PodInfo, row: int) -> None:
        if self.args.is_cpu_pod(pod.requests):
            self._ensure(row)
            self._used[row] += self.args.usage_vector(pod.requests)

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        if self.args.is_cpu_pod(pod.requests):
            self._used[row] -= self.args.usage_vector(pod.requests)

    # -- extension points -------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        prepared = engine.prepare_pod(self.args, pod)
        for event in prepared.events:
            self.handle.record(event)
        if not prepared.is_cpu_pod:
            return Status.skip()
        state.write(NAME, prepared)
        return Status.success()

    def _prepared(self, state: CycleState, pod: PodInfo) -> engine.CrossQuotaPod:
        prepared = state.read(NAME, engine.CrossQuotaPod)
        return prepared if prepared is not None else engine.prepare_pod(self.args, pod)

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        n = self.handle.cluster.n
        self._ensure(n)
        prepared = self._prepared(state, pod)
        is_gpu, quota, used = self._is_gpu[:n], self._quota[:n], self._used[:n]
        result = engine.filter_nodes(self.args, prepared, is_gpu, quota, used)

        def reasons() -> ReasonMasks:
            rejected = ~result.fits
            out: list[tuple[BoolArray, str]] = []
            for j, resource in enumerate(self.args.quota_resources):
                over = rejected & (used[:, j] + prepared.request[j] > quota[:, j])
                if over.any():
                    out.append((over, exceeded(resource)))
                rejected &= ~over
            return out

        return FilterResult(np.asarray(result.fits, dtype=np.bool_), reasons)

    def score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> FloatArray:
        n = self.handle.cluster.n
        self._ensure(n)
        prepared = self._prepared(state, pod)
        return engine.score_nodes(self.args, prepared, self._is_gpu[:n], self._quota[:n], self._used[:n])
