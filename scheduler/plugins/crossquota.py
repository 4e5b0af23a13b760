"""``crossquota``: thin glue over :mod:`common.model.crossquota` (spec ``crossquota.md``).

Keeps the engine's per-node inputs as rows aligned with the cluster state: ``is_gpu[N]``,
``quota[N, Rq]`` (refreshed when a node changes) and ``used[N, Rq]``, the CPU pods' usage (updated
when a pod is bound or released). Filter and Score hand slices of these to the engine's vectorised
:func:`~common.model.crossquota.predicate.filter_nodes` and the per-class
:class:`~common.model.crossquota.score.NodeScorer`.

The arrays are column-major (the engine reads one quota resource over all nodes at a time). Filter
verdicts and scores are kept per pod class (request vector, strategy) in row caches
(:mod:`scheduler.cluster.row_cache`) fed by the plugin's own change log: a row is handed to the
engine again only when its quota, its CPU-pod usage or its GPU-ness changed, which a CPU pod bound
to a CPU node, or any GPU pod, never does. The prepared pod is memoised per
(requests, strategy annotation).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.annotations import CROSSQUOTA_SCORING_STRATEGY
from gpuq_k8s.common.model.crossquota.args import CrossQuotaArgs
from gpuq_k8s.common.model.crossquota.node_quota import node_quota
from gpuq_k8s.common.model.crossquota.pod import CrossQuotaPod, ScoringStrategy, prepare_pod
from gpuq_k8s.common.model.crossquota.predicate import filter_nodes, fits_few, quota_exceeded
from gpuq_k8s.common.model.crossquota.score import NodeScorer, node_scorer
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.scheduler.cluster.change_log import ChangeLog
from gpuq_k8s.scheduler.cluster.row_cache import RowCache, Rows
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
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
from gpuq_k8s.scheduler.framework.registry import PluginSettings, plugin_args
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.plugins.dra_extended import uses_devices

_MAX_PREPARED: Final = 1024

# A pod class as the engine sees it: (request vector bytes, strategy, is a CPU pod).
_Key = tuple[bytes, ScoringStrategy, bool]


class CrossQuota(PreFilterPlugin, FilterPlugin, ScorePlugin):
    name = plugin_names.CROSSQUOTA
    events = frozenset({ClusterEvent.POD_DELETED, ClusterEvent.NODE_ADDED, ClusterEvent.NODE_CHANGED})

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        self.args = plugin_args(settings, CrossQuotaArgs) or CrossQuotaArgs.parse({})
        width = len(self.args.quota_resources)
        self._is_gpu: BoolArray = np.zeros(0, dtype=np.bool_)
        # Column-major, as the cluster arrays: the engine reads one quota resource over all nodes.
        self._quota: npt.NDArray[np.int64] = np.zeros((0, width), dtype=np.int64, order="F")
        self._used: npt.NDArray[np.int64] = np.zeros((0, width), dtype=np.int64, order="F")
        # The same rows as Python lists, for the few-rows paths (numpy per-element reads cost more).
        self._gpu_rows: list[bool] = []
        self._quota_rows: list[list[int]] = []
        self._used_rows: list[list[int]] = []
        self._usages: dict[Resources, npt.NDArray[np.int64] | None] = {}
        # Bound pods counted as GPU pods for an extended resource a DeviceClass serves (no usage).
        self._device_pods: set[str] = set()
        self._prepared_by: dict[tuple[Resources, str | None], CrossQuotaPod] = {}
        self._scorers: dict[_Key, NodeScorer] = {}
        # Rows whose is_gpu / quota / used changed in a way a verdict or score can see.
        self._log = ChangeLog()
        self._fits: RowCache[_Key] = RowCache(
            handle.cluster, self._fit_rows, log=self._log, compute_few=self._fit_few
        )
        self._scores: RowCache[_Key] = RowCache(
            handle.cluster, self._score_rows, log=self._log, compute_few=self._score_few
        )
        self._zeros: FloatArray = np.zeros(0, dtype=np.float64)
        handle.cluster.subscribe(self)

    @property
    def scoring(self) -> bool:
        return self.args.plugin_weight > 0  # crossQuotaWeight 0: scoring off, the predicate stays

    def _ensure(self, row: int) -> None:
        if row < self._is_gpu.shape[0]:
            return
        size = max(16, row + 1, self._is_gpu.shape[0] * 2)
        width = len(self.args.quota_resources)
        is_gpu = np.zeros(size, dtype=np.bool_)
        quota = np.zeros((size, width), dtype=np.int64, order="F")
        used = np.zeros((size, width), dtype=np.int64, order="F")
        k = self._is_gpu.shape[0]
        is_gpu[:k], quota[:k], used[:k] = self._is_gpu, self._quota, self._used
        self._is_gpu, self._quota, self._used = is_gpu, quota, used
        self._gpu_rows.extend([False] * (size - k))
        self._quota_rows.extend([0] * width for _ in range(size - k))
        self._used_rows.extend([0] * width for _ in range(size - k))

    # -- ClusterListener --------------------------------------------------------------------------
    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        self._ensure(row)
        self._log.record(row, self.handle.cluster.n)
        if new is None:
            self._is_gpu[row] = False
            self._quota[row] = 0
            self._used[row] = 0
        else:
            self._is_gpu[row] = self.args.is_gpu_node(new.allocatable)
            if self._is_gpu[row]:
                quota = node_quota(self.args, new)
                self._quota[row] = quota.vector(self.args)
                if old is None or old.annotations != new.annotations:
                    for event in quota.events:
                        self.handle.record(event)
            else:
                self._quota[row] = 0
        self._gpu_rows[row] = bool(self._is_gpu[row])
        self._quota_rows[row] = self._quota[row].tolist()
        self._used_rows[row] = self._used[row].tolist()

    def _usage(self, requests: Resources) -> npt.NDArray[np.int64] | None:
        """A bound pod's contribution to ``used`` (None for a GPU pod), memoised per request."""
        if requests in self._usages:
            return self._usages[requests]
        usage = self.args.usage_vector(requests) if self.args.is_cpu_pod(requests) else None
        if len(self._usages) >= _MAX_PREPARED:
            self._usages.clear()
        self._usages[requests] = usage
        return usage

    def _device_pod(self, pod: PodInfo) -> bool:
        """A pod whose accelerators come as DRA devices: it has claims, or asks an extended resource a
        DeviceClass serves (its implicit claim). A GPU pod whatever the patterns say (issue 26)."""
        return bool(pod.resource_claims) or uses_devices(self.handle, pod)

    def pod_added(self, pod: PodInfo, row: int) -> None:
        if self._device_pod(pod):
            if not pod.resource_claims:  # decided by the DeviceClasses: remembered for its removal
                self._device_pods.add(pod.key)
            return
        usage = self._usage(pod.requests)
        if usage is not None:
            self._ensure(row)
            self._used[row] += usage
            self._used_rows[row] = self._used[row].tolist()
            if self._gpu_rows[row]:  # a non-GPU row fits and scores 0 whatever its usage
                self._log.record(row, self.handle.cluster.n)

    def pods_added(self, pods: Sequence[PodInfo], rows: Sequence[int]) -> None:
        """:meth:`pod_added` of each (a BulkPodListener: the start's bound pods a page at a time), each
        changed row's usage written once."""
        at: list[int] = []
        usages: list[npt.NDArray[np.int64]] = []
        for pod, row in zip(pods, rows, strict=True):
            if self._device_pod(pod):
                if not pod.resource_claims:
                    self._device_pods.add(pod.key)
                continue
            usage = self._usage(pod.requests)
            if usage is not None:
                at.append(row)
                usages.append(usage)
        if not at:
            return
        self._ensure(max(at))
        used = self._used
        np.add.at(used, np.asarray(at, dtype=np.intp), np.stack(usages))
        n = self.handle.cluster.n
        for row in dict.fromkeys(at):
            self._used_rows[row] = used[row].tolist()
            if self._gpu_rows[row]:
                self._log.record(row, n)

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        if pod.key in self._device_pods:
            self._device_pods.discard(pod.key)
            return
        usage = None if pod.resource_claims else self._usage(pod.requests)
        if usage is not None:
            self._used[row] -= usage
            self._used_rows[row] = self._used[row].tolist()
            if self._gpu_rows[row]:
                self._log.record(row, self.handle.cluster.n)

    # -- per-class results ------------------------------------------------------------------------
    def _inputs(self, rows: Rows | None) -> tuple[BoolArray, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        n = self.handle.cluster.n
        self._ensure(n)
        if rows is None:
            return self._is_gpu[:n], self._quota[:n], self._used[:n]
        return self._is_gpu[rows], self._quota[rows], self._used[rows]

    def _fit_rows(self, key: _Key, rows: Rows | None) -> BoolArray:
        fits = filter_nodes(self.args, self._scorers[key].pod, *self._inputs(rows)).fits
        return np.asarray(fits, dtype=np.bool_)

    def _fit_few(self, key: _Key, rows: list[int]) -> list[bool]:
        self._ensure(self.handle.cluster.n)
        return fits_few(self._scorers[key].pod, self._gpu_rows, self._quota_rows, self._used_rows, rows)

    def _score_rows(self, key: _Key, rows: Rows | None) -> FloatArray:
        return self._scorers[key].score_nodes(*self._inputs(rows))

    def _score_few(self, key: _Key, rows: list[int]) -> list[float]:
        self._ensure(self.handle.cluster.n)
        return self._scorers[key].score_few(self._gpu_rows, self._quota_rows, self._used_rows, rows)

    def _key(self, prepared: CrossQuotaPod) -> _Key:
        key = (prepared.request.tobytes(), prepared.strategy, prepared.is_cpu_pod)
        if key not in self._scorers:
            if len(self._scorers) >= _MAX_PREPARED:
                self._scorers.clear()
                self._scores.clear()
                self._fits.clear()
            self._scorers[key] = node_scorer(self.args, prepared)
        return key

    def _prepare(self, pod: PodInfo) -> CrossQuotaPod:
        memo = (pod.requests, pod.annotations.get(CROSSQUOTA_SCORING_STRATEGY))
        prepared = self._prepared_by.get(memo)
        if prepared is None:
            prepared = prepare_pod(self.args, pod)
            if prepared.events:
                return prepared  # the Warning names this pod: not shared
            if len(self._prepared_by) >= _MAX_PREPARED:
                self._prepared_by.clear()
            self._prepared_by[memo] = prepared
        if prepared.is_cpu_pod and self._device_pod(pod):
            # The memo is by requests: a pod with devices may share them with a CPU pod.
            return dataclasses.replace(prepared, is_cpu_pod=False)
        return prepared

    # -- extension points -------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        prepared = self._prepare(pod)
        for event in prepared.events:
            self.handle.record(event)
        if not prepared.is_cpu_pod:
            return Status.skip()
        state.write(plugin_names.CROSSQUOTA, prepared)
        return Status.success()

    def _prepared(self, state: CycleState, pod: PodInfo) -> CrossQuotaPod:
        prepared = state.read(plugin_names.CROSSQUOTA, CrossQuotaPod)
        return prepared if prepared is not None else self._prepare(pod)

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        n = self.handle.cluster.n
        self._ensure(n)
        prepared = self._prepared(state, pod)
        fits: BoolArray = self._fits.get(self._key(prepared))
        used, quota, request = self._used[:n], self._quota[:n], prepared.request

        def reasons() -> ReasonMasks:
            # Each rejected node under its first resource over quota, worded as the predicate words
            # it, with its numbers (``cpu quota exceeded: required=40 used=0 quota=32``); nodes with
            # the same numbers share one reason, as kube-scheduler's FitError counts them.
            rejected = ~fits
            out: list[tuple[BoolArray, str]] = []
            for j, resource in enumerate(self.args.quota_resources):
                over = rejected & (used[:, j] + request[j] > quota[:, j])
                if over.any():
                    pairs = np.stack([used[:, j][over], quota[:, j][over]], axis=1)
                    for u, q in np.unique(pairs, axis=0).tolist():
                        same = over & (used[:, j] == u) & (quota[:, j] == q)
                        out.append((same, quota_exceeded(resource, int(request[j]), u, q).message))
                rejected &= ~over
            return out

        return FilterResult(fits, reasons)

    def score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> FloatArray:
        key = self._key(self._prepared(state, pod))
        if self._scorers[key].scores_nothing:  # a GPU pod: zero everywhere
            n = self.handle.cluster.n
            if self._zeros.shape[0] != n:
                self._zeros = np.zeros(n, dtype=np.float64)
                self._zeros.flags.writeable = False
            return self._zeros
        scores: FloatArray = self._scores.get(key)
        return scores
