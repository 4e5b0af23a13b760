"""``nodeorder``: kube-scheduler's default scorers with Volcano's weights, glue over
:mod:`common.model.nodeorder`.

The resource scorers (leastrequested, mostrequested, balancedresource) are row-wise, so their
weighted sum is kept per pod class (the pod's cpu, memory and GPU requests) in a
:class:`~scheduler.cluster.row_cache.RowCache` that recomputes only the rows bound or released since.
The normalised scorers (nodeaffinity, tainttoleration) are normalised over the pod's candidate
nodes, as Volcano's batch node order does: their raw per-row values are kept per constraint set
until a node's labels or taints change, and normalised per attempt (one pass over N rows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np

from gpuq_k8s.common.model import nodeorder as engine
from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.events import EventRecord, invalid_annotation
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quantity import CPU, MEMORY
from gpuq_k8s.scheduler.cluster.row_cache import RowCache, Rows
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import BoolArray, FloatArray, Handle, PreScorePlugin, ScorePlugin
from gpuq_k8s.scheduler.framework.registry import PluginSettings, plugin_args
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.plugins.node_selection import (
    Requirement,
    compile_preferred,
    term_mask,
    untolerated_preferences,
)

_MAX_CLASSES: Final = 256
_GPU: Final = engine.BALANCED_RESOURCES[2]

# A resource class: the pod's non-zero cpu and memory, and its real cpu, memory and GPU requests.
_ResourceKey = tuple[int, int, int, int, int]
_Terms = tuple[tuple[int, tuple[Requirement, ...]], ...]


@dataclass(frozen=True, slots=True)
class _PodScoring:
    resources: _ResourceKey
    terms: _Terms | None
    taint_ids: tuple[int, ...]


class NodeOrder(PreScorePlugin, ScorePlugin):
    name = plugin_names.NODEORDER

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        self.args = plugin_args(settings, engine.NodeOrderArgs) or engine.NodeOrderArgs.parse({})
        # Per row: the non-zero cpu and memory requests of the pods on the node (kube's
        # NonZeroRequested), kept by the ClusterListener calls below.
        self._nonzero = np.zeros((0, 2), dtype=np.int64)
        self._resources: RowCache[_ResourceKey] = RowCache(
            handle.cluster, self._resource_rows, compute_few=self._resource_few
        )
        self._raw: dict[tuple[object, ...], engine.Int64Array] = {}
        self._raw_generation = -1
        self._warned: set[EventRecord] = set()
        handle.cluster.subscribe(self)

    @property
    def scoring(self) -> bool:
        return self.args.scoring  # every weight 0: no node-order function (Semantics 11)

    # -- ClusterListener ----------------------------------------------------------------------------
    def _row(self, row: int) -> None:
        if row >= self._nonzero.shape[0]:
            grown = np.zeros((max(16, 2 * (row + 1)), 2), dtype=np.int64)
            grown[: self._nonzero.shape[0]] = self._nonzero
            self._nonzero = grown

    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        self._row(row)
        if new is None:
            self._nonzero[row] = 0

    def pod_added(self, pod: PodInfo, row: int) -> None:
        self._row(row)
        cpu, memory = engine.pod_nonzero(pod.requests)
        self._nonzero[row, 0] += cpu
        self._nonzero[row, 1] += memory

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        cpu, memory = engine.pod_nonzero(pod.requests)
        self._nonzero[row, 0] -= cpu
        self._nonzero[row, 1] -= memory

    # -- resource scorers ---------------------------------------------------------------------------
    def _column(self, name: str, rows: Rows | slice) -> tuple[engine.Int64Array, engine.Int64Array]:
        cluster = self.handle.cluster
        column = cluster.columns.get(name)
        if column is None:
            size = cluster.n if isinstance(rows, slice) else rows.shape[0]
            zero = np.zeros(size, dtype=np.int64)
            return zero, zero
        return cluster.allocatable[rows, column], cluster.requested[rows, column]

    def _resource_rows(self, key: _ResourceKey, rows: Rows | None) -> FloatArray:
        args = self.args
        cluster = self.handle.cluster
        where: Rows | slice = slice(0, cluster.n) if rows is None else rows
        self._row(cluster.n)
        nonzero_cpu, nonzero_memory = key[0], key[1]
        cpu_alloc, cpu_used = self._column(CPU, where)
        memory_alloc, memory_used = self._column(MEMORY, where)
        nonzero = self._nonzero[where]
        total = np.zeros(cpu_alloc.shape[0], dtype=np.float64)
        for weight, most in ((args.least_requested, False), (args.most_requested, True)):
            if weight:
                scores = engine.fit_scores(
                    (cpu_alloc, memory_alloc),
                    (nonzero[:, 0], nonzero[:, 1]),
                    (nonzero_cpu, nonzero_memory),
                    most=most,
                )
                total += scores * weight
        cpu, memory, gpu = key[2], key[3], key[4]
        if args.balanced_resource and (cpu or memory or gpu):
            allocatable = [cpu_alloc, memory_alloc]
            used = [cpu_used, memory_used]
            asked = [cpu, memory]
            if gpu:
                gpu_alloc, gpu_used = self._column(_GPU, where)
                allocatable.append(gpu_alloc)
                used.append(gpu_used)
                asked.append(gpu)
            total += engine.balanced_scores(allocatable, used, asked) * args.balanced_resource
        return total

    def _resource_few(self, key: _ResourceKey, rows: list[int]) -> list[float]:
        """:meth:`_resource_rows` of a few rows in plain Python (the same values)."""
        args = self.args
        cluster = self.handle.cluster
        self._row(cluster.n)
        names = [CPU, MEMORY] + ([_GPU] if key[4] else [])
        columns = [cluster.columns.get(name) for name in names]
        asked = [key[2], key[3], key[4]][: len(names)]
        # One gather per column, then Python ints: cheaper than indexing numpy element by element.
        index = np.array(rows, dtype=np.intp)
        zeros = [0] * len(rows)
        caps_columns = [zeros if c is None else cluster.allocatable[index, c].tolist() for c in columns]
        used_columns = [zeros if c is None else cluster.requested[index, c].tolist() for c in columns]
        nonzero_rows = self._nonzero[index].tolist()
        balanced = args.balanced_resource and (key[2] or key[3] or key[4])
        fits = [(w, most) for w, most in ((args.least_requested, False), (args.most_requested, True)) if w]
        out: list[float] = []
        caps_rows = zip(*caps_columns, strict=True)
        used_rows = zip(*used_columns, strict=True)
        for caps, used, nonzero in zip(caps_rows, used_rows, nonzero_rows, strict=True):
            total = 0.0
            for weight, most in fits:
                total += float(engine.fit_score_one(caps[:2], nonzero, key[:2], most=most) * weight)
            if balanced:
                total += float(engine.balanced_score_one(caps, used, asked) * args.balanced_resource)
            out.append(total)
        return out

    # -- normalised scorers ---------------------------------------------------------------------------
    def _raw_scores(
        self, kind: str, key: object, compute: Callable[[], engine.Int64Array]
    ) -> engine.Int64Array:
        """Per-row raw scores of a constraint set, kept until a node's labels or taints change."""
        cluster = self.handle.cluster
        if self._raw_generation != cluster.static_generation or len(self._raw) >= _MAX_CLASSES:
            self._raw.clear()
            self._raw_generation = cluster.static_generation
        cached = self._raw.get((kind, key, cluster.n))
        if cached is None:
            cached = self._raw[(kind, key, cluster.n)] = compute()
        return cached

    def _affinity_counts(self, terms: _Terms) -> engine.Int64Array:
        cluster = self.handle.cluster
        n = cluster.n
        counts = np.zeros(n, dtype=np.int64)
        for weight, term in terms:
            counts += term_mask(cluster, term, n) * weight
        return counts

    def _taint_counts(self, taint_ids: tuple[int, ...]) -> engine.Int64Array:
        cluster = self.handle.cluster
        n = cluster.n
        counts: engine.Int64Array = cluster.node_taints[:n][:, list(taint_ids)].sum(axis=1, dtype=np.int64)
        return counts

    # -- extension points -----------------------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> Status:
        requests = pod.requests
        nonzero = engine.pod_nonzero(requests)
        resources = (
            nonzero[0],
            nonzero[1],
            requests.get(CPU, 0),
            requests.get(MEMORY, 0),
            requests.get(_GPU, 0),
        )
        terms: _Terms | None = None
        if self.args.node_affinity:
            try:
                terms = compile_preferred(pod)
            except InvalidValue as err:
                # A pod that predates validation: its preference is not scored, and it says so (once).
                event = invalid_annotation(pod.ref, f"{err}; preferred node affinity not scored")
                if event not in self._warned:
                    if len(self._warned) >= _MAX_CLASSES:
                        self._warned.clear()
                    self._warned.add(event)
                    self.handle.record(event)
        taint_ids: tuple[int, ...] = ()
        if self.args.taint_toleration:
            taint_ids = tuple(untolerated_preferences(self.handle.cluster, pod))
        state.write(plugin_names.NODEORDER, _PodScoring(resources, terms, taint_ids))
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> FloatArray:
        scoring = state.read(plugin_names.NODEORDER, _PodScoring)
        if scoring is None:
            self.pre_score(state, pod, feasible)
            scoring = state.read(plugin_names.NODEORDER, _PodScoring)
            assert scoring is not None
        args = self.args
        total: FloatArray = self._resources.get(scoring.resources).copy()
        if scoring.terms is not None and args.node_affinity:
            terms = scoring.terms
            raw = self._raw_scores("affinity", terms, lambda: self._affinity_counts(terms))
            total += engine.normalize(raw, feasible, reverse=False) * args.node_affinity
        if args.taint_toleration:
            ids = scoring.taint_ids
            if not ids:  # no intolerable taint on any node: every candidate scores 100 (only
                # candidates' scores are read, so the constant goes on every row in one pass)
                total += float(engine.MAX_NODE_SCORE * args.taint_toleration)
            else:
                raw = self._raw_scores("taints", ids, lambda: self._taint_counts(ids))
                total += engine.normalize(raw, feasible, reverse=True) * args.taint_toleration
        return total
