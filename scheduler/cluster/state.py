"""The scheduler's view of the cluster: nodes as rows of numpy arrays, bound pods per node.

Filter and Score run over all nodes at once, so everything a predicate reads is a column:
``allocatable[N, R]`` and ``requested[N, R]`` (int64, gpuq's integer units), ``alive``, ``ready`` and
``unschedulable`` masks, a :class:`LabelIndex` and a node x taint matrix. Binding or removing a pod
updates one row in place; nothing of size N x R is rebuilt per pod.

Rows are stable: a removed node leaves a dead row (``alive`` False) that the next new node reuses,
so the per-node arrays plugins keep stay aligned without renumbering. Plugins that keep such arrays
subscribe with :meth:`ClusterState.subscribe`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Final, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from common.model.nodes import NodeInfo, Taint
from common.model.pods import PodInfo
from common.model.quantity import PODS
from common.model.resources import Resources
from scheduler.cluster.labels import LabelIndex

G = TypeVar("G", bound=np.generic)
Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# kubelet's default --max-pods: a node manifest written for `gpuq simulate` rarely states `pods`.
DEFAULT_MAX_PODS: Final = 110
_INITIAL_ROWS: Final = 16
_INITIAL_COLUMNS: Final = 8


class ClusterListener(Protocol):
    """Told about every change, after the arrays are updated."""

    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None: ...

    def pod_added(self, pod: PodInfo, row: int) -> None: ...

    def pod_removed(self, pod: PodInfo, row: int) -> None: ...


class ResourceColumns:
    """Resource name -> column of the [N, R] arrays; grows when a new resource name appears."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.names)

    def get(self, name: str) -> int | None:
        return self.index.get(name)

    def add(self, name: str) -> int:
        column = self.index.get(name)
        if column is None:
            column = self.index[name] = len(self.names)
            self.names.append(name)
        return column


class ClusterState:
    def __init__(self) -> None:
        self.columns = ResourceColumns()
        self.columns.add(PODS)
        self._rows = _INITIAL_ROWS
        self._cols = _INITIAL_COLUMNS
        self.n = 0  # rows in use, dead ones included; arrays are sliced [:n]
        self.names: list[str] = []
        self.nodes: list[NodeInfo | None] = []
        self.row_of: dict[str, int] = {}
        self._free_rows: list[int] = []
        self.allocatable: Int64Array = np.zeros((self._rows, self._cols), dtype=np.int64)
        self.requested: Int64Array = np.zeros((self._rows, self._cols), dtype=np.int64)
        self.alive: BoolArray = np.zeros(self._rows, dtype=np.bool_)
        self.ready: BoolArray = np.zeros(self._rows, dtype=np.bool_)
        self.unschedulable: BoolArray = np.zeros(self._rows, dtype=np.bool_)
        # Rank of each live node's name in sorted order: the deterministic tie-break.
        self.name_rank: Int64Array = np.zeros(self._rows, dtype=np.int64)
        self.labels = LabelIndex(self._rows)
        self.taint_ids: dict[Taint, int] = {}
        self.taints: list[Taint] = []
        self.node_taints: BoolArray = np.zeros((self._rows, 4), dtype=np.bool_)
        self.pods: dict[str, PodInfo] = {}
        self.pods_on: list[dict[str, PodInfo]] = []
        self.generation = 0
        self._listeners: list[ClusterListener] = []
        self._rank_dirty = False

    # -- observers ---------------------------------------------------------------------------------
    def subscribe(self, listener: ClusterListener) -> None:
        """Register and replay the current state to the listener (nodes, then pods)."""
        self._listeners.append(listener)
        for row in range(self.n):
            node = self.nodes[row]
            if node is not None:
                listener.node_changed(row, None, node)
        for pod in self.pods.values():
            listener.pod_added(pod, self.row_of[pod.node_name])

    # -- resource vectors ----------------------------------------------------------------------------
    def vector(self, resources: Mapping[str, int], *, grow: bool = True) -> Int64Array:
        """``resources`` as a dense int64 row; unknown names add a column (dropped if not ``grow``)."""
        if grow:
            for name in resources:
                if name not in self.columns.index:
                    self._add_column(name)
        out = np.zeros(self._cols, dtype=np.int64)
        for name, amount in resources.items():
            column = self.columns.get(name)
            if column is not None:
                out[column] = amount
        return out

    def pod_vector(self, pod: PodInfo) -> Int64Array:
        """A pod's request as it counts against a node: its requests plus one pod."""
        return self.vector(pod.requests_with_pod_count)

    def _add_column(self, name: str) -> None:
        column = self.columns.add(name)
        if column >= self._cols:
            self._cols *= 2
            self.allocatable = _grow_cols(self.allocatable, self._cols)
            self.requested = _grow_cols(self.requested, self._cols)

    @property
    def width(self) -> int:
        """Allocated columns; vectors from :meth:`vector` have this length."""
        return self._cols

    # -- nodes -----------------------------------------------------------------------------------
    def _grow_rows(self) -> None:
        rows = self._rows * 2
        self.allocatable = _grow_rows(self.allocatable, rows)
        self.requested = _grow_rows(self.requested, rows)
        self.node_taints = _grow_rows(self.node_taints, rows)
        self.alive = _grow_rows(self.alive, rows)
        self.ready = _grow_rows(self.ready, rows)
        self.unschedulable = _grow_rows(self.unschedulable, rows)
        self.name_rank = _grow_rows(self.name_rank, rows)
        self.labels.grow(rows)
        self._rows = rows

    def _taint_id(self, taint: Taint) -> int:
        tid = self.taint_ids.get(taint)
        if tid is None:
            tid = self.taint_ids[taint] = len(self.taints)
            self.taints.append(taint)
            if tid >= self.node_taints.shape[1]:
                grown = np.zeros((self._rows, self.node_taints.shape[1] * 2), dtype=np.bool_)
                grown[:, : self.node_taints.shape[1]] = self.node_taints
                self.node_taints = grown
        return tid

    def set_node(self, node: NodeInfo) -> int:
        """Add or update a node; returns its row. Pods already bound to it are kept."""
        allocatable = node.allocatable
        if PODS not in allocatable:
            allocatable = allocatable + {PODS: DEFAULT_MAX_PODS}
            node = replace(node, allocatable=allocatable)
        row = self.row_of.get(node.name)
        old: NodeInfo | None = None
        if row is None:
            if self._free_rows:
                row = self._free_rows.pop()
                self.names[row] = node.name
                self.nodes[row] = node
            else:
                if self.n == self._rows:
                    self._grow_rows()
                row = self.n
                self.n += 1
                self.names.append(node.name)
                self.nodes.append(node)
                self.pods_on.append({})
            self.row_of[node.name] = row
            self._rank_dirty = True
        else:
            old = self.nodes[row]
            self.nodes[row] = node
        self.allocatable[row] = self.vector(allocatable)
        self.alive[row] = True
        self.ready[row] = node.ready
        self.unschedulable[row] = node.unschedulable
        self.node_taints[row] = False
        for taint in node.taints:
            self.node_taints[row, self._taint_id(taint)] = True
        self.labels.set_node(row, node.labels)
        self.generation += 1
        for listener in self._listeners:
            listener.node_changed(row, old, node)
        return row

    def remove_node(self, name: str) -> list[PodInfo]:
        """Remove a node; returns the pods that were bound to it (they no longer count anywhere)."""
        row = self.row_of.pop(name, None)
        if row is None:
            return []
        orphans = list(self.pods_on[row].values())
        for pod in orphans:
            self.remove_pod(pod.key)
        old = self.nodes[row]
        self.nodes[row] = None
        self.names[row] = ""
        self.alive[row] = False
        self.ready[row] = False
        self.allocatable[row] = 0
        self.requested[row] = 0
        self.node_taints[row] = False
        self.labels.clear_node(row)
        self._free_rows.append(row)
        self._rank_dirty = True
        self.generation += 1
        for listener in self._listeners:
            listener.node_changed(row, old, None)
        return orphans

    def node(self, row: int) -> NodeInfo:
        node = self.nodes[row]
        if node is None:
            raise KeyError(f"row {row} holds no node")
        return node

    def live_rows(self) -> Iterator[int]:
        return (row for row in range(self.n) if self.nodes[row] is not None)

    def ranks(self) -> Int64Array:
        """Per-row rank of the node name among live nodes (dead rows rank last)."""
        if self._rank_dirty:
            live = sorted((name, row) for row, name in enumerate(self.names) if self.nodes[row] is not None)
            self.name_rank[: self.n] = np.iinfo(np.int64).max
            for rank, (_, row) in enumerate(live):
                self.name_rank[row] = rank
            self._rank_dirty = False
        return self.name_rank[: self.n]

    @property
    def node_count(self) -> int:
        return len(self.row_of)

    # -- pods ------------------------------------------------------------------------------------
    def add_pod(self, pod: PodInfo) -> bool:
        """Count a bound pod on its node; idempotent per pod key. False if its node is unknown."""
        if not pod.holds_resources:
            return False
        row = self.row_of.get(pod.node_name)
        if row is None:
            return False
        previous = self.pods.get(pod.key)
        if previous is not None:
            if previous.node_name == pod.node_name and previous.requests == pod.requests:
                self.pods[pod.key] = pod
                self.pods_on[row][pod.key] = pod
                return True
            self.remove_pod(pod.key)
        self.requested[row] += self.pod_vector(pod)
        self.pods[pod.key] = pod
        self.pods_on[row][pod.key] = pod
        self.generation += 1
        for listener in self._listeners:
            listener.pod_added(pod, row)
        return True

    def remove_pod(self, key: str) -> PodInfo | None:
        """Stop counting a pod (deleted, finished, unbound); idempotent."""
        pod = self.pods.pop(key, None)
        if pod is None:
            return None
        row = self.row_of[pod.node_name]
        del self.pods_on[row][key]
        self.requested[row] -= self.pod_vector(pod)
        self.generation += 1
        for listener in self._listeners:
            listener.pod_removed(pod, row)
        return pod

    def pods_on_node(self, name: str) -> Iterable[PodInfo]:
        row = self.row_of.get(name)
        return () if row is None else tuple(self.pods_on[row].values())

    def node_requested(self, row: int) -> Resources:
        """A node's requested total as a Resources vector (for explanations, not the hot path)."""
        values = self.requested[row]
        return Resources({name: int(values[c]) for c, name in enumerate(self.columns.names) if values[c]})


def _grow_rows(array: npt.NDArray[G], rows: int) -> npt.NDArray[G]:
    grown = np.zeros((rows, *array.shape[1:]), dtype=array.dtype)
    grown[: array.shape[0]] = array
    return grown


def _grow_cols(array: Int64Array, cols: int) -> Int64Array:
    grown = np.zeros((array.shape[0], cols), dtype=np.int64)
    grown[:, : array.shape[1]] = array
    return grown
