"""The scheduler's view of the cluster: nodes as rows of numpy arrays, bound pods per node.

Filter and Score run over all nodes at once, so everything a predicate reads is a column:
``allocatable[N, R]`` and ``requested[N, R]`` (int64, gpuq's integer units), ``alive``, ``ready`` and
``unschedulable`` masks, a :class:`LabelIndex` and a node x taint matrix. Binding or removing a pod
updates one row in place; nothing of size N x R is rebuilt per pod.

Rows are stable: a removed node leaves a dead row (``alive`` False) that the next new node reuses,
so the per-node arrays plugins keep stay aligned without renumbering. Plugins that keep such arrays
subscribe with :meth:`ClusterState.subscribe`.

A node deleted while pods are bound to it leaves a *ghost* row (as kube-scheduler's cache keeps a
deleted node's pods): nothing is placed there any more (``alive`` False), but its pods go on counting,
on every quota, until their own deletes arrive (the pod garbage collector deletes them after a while;
until then they exist and are bound). Listeners are told of the removal, and the row is reused, only
once its last pod is gone: until then they charge the pods as on that node. A pod bound to a node
never seen (deleted before the scheduler started) gets a ghost row too, which the node takes over if
it appears.

Every change appends its row to a change log and node changes that can alter a label, taint or
condition bump ``static_generation``: per-pod-class results (:mod:`scheduler.cluster.row_cache`)
then recompute only the rows changed since they were last used instead of all N rows per pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Final, Literal, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model.nodes import NodeInfo, Taint
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quantity import PODS
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.scheduler.cluster.change_log import ChangeLog
from gpuq_k8s.scheduler.cluster.labels import LabelIndex

G = TypeVar("G", bound=np.generic)
Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# kubelet's default --max-pods: a node manifest written for `gpuq simulate` rarely states `pods`.
DEFAULT_MAX_PODS: Final = 110
_INITIAL_ROWS: Final = 16
_INITIAL_COLUMNS: Final = 8
_MAX_POD_VECTORS: Final = 4096
# A loose free floor is recomputed (one pass over the live rows) at most once per this many changes.
_FLOOR_EVERY: Final = 64
_NO_FLOOR: Final = np.iinfo(np.int64).max


class ClusterListener(Protocol):
    """Told about every change, after the arrays are updated."""

    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None: ...

    def pod_added(self, pod: PodInfo, row: int) -> None: ...

    def pod_removed(self, pod: PodInfo, row: int) -> None: ...


@runtime_checkable
class BulkPodListener(Protocol):
    """A listener that hears the start's bound pods a page at a time (:meth:`ClusterState.add_pods`)
    instead of one :meth:`ClusterListener.pod_added` each: the same state as those calls in order,
    for less than their cost (150,000 pods at a cold start, issue 29). ``rows[i]`` is ``pods[i]``'s
    row; every pod is new to the cluster and on a node it has."""

    def pods_added(self, pods: Sequence[PodInfo], rows: Sequence[int]) -> None: ...


@runtime_checkable
class PodUpdateListener(Protocol):
    """A listener that also hears of a counted pod whose labels, deletion mark or affinity changed while
    it stayed on its node (kube-scheduler's UpdatePodLabel; the affinity of a pod's new incarnation
    under the same name): what matches a label selector, and the terms it carries, may change."""

    def pod_updated(self, old: PodInfo, new: PodInfo, row: int) -> None: ...


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
        self._ghosts: dict[str, int] = {}  # deleted node -> its row, while pods are bound there
        self._ghost_nodes: dict[int, NodeInfo] = {}  # a ghost row -> the node it was
        self._free_rows: list[int] = []
        # Column-major: Filter and Score read one resource over all nodes (``requested[:n, c]`` is a
        # contiguous vector); numpy is many times slower on [N, k] blocks with a small row stride.
        self.allocatable: Int64Array = np.zeros((self._rows, self._cols), dtype=np.int64, order="F")
        self.requested: Int64Array = np.zeros((self._rows, self._cols), dtype=np.int64, order="F")
        # ``allocatable - requested``, kept in step row by row: resource fit is then one comparison
        # per asked column (``free < request``) instead of an addition and a comparison.
        self.free: Int64Array = np.zeros((self._rows, self._cols), dtype=np.int64, order="F")
        # Per column, a lower bound of ``free`` over live nodes: a request at or below it fits every
        # node on that resource, and Filter skips the column (memory and pod count rarely bind).
        # Binds keep it exact (a minimum only falls); releases and node updates leave it low but
        # valid ("loose") until :meth:`free_floor` recomputes it, at most once per _FLOOR_EVERY
        # changes.
        self._floor: Int64Array = np.full(self._cols, _NO_FLOOR, dtype=np.int64)
        self._floor_loose = False
        self._floor_at = -_FLOOR_EVERY
        self.alive: BoolArray = np.zeros(self._rows, dtype=np.bool_)
        self.ready: BoolArray = np.zeros(self._rows, dtype=np.bool_)
        self.unschedulable: BoolArray = np.zeros(self._rows, dtype=np.bool_)
        # Rank of each live node's name in sorted order: the deterministic tie-break.
        self.name_rank: Int64Array = np.zeros(self._rows, dtype=np.int64)
        self._rank_order: npt.NDArray[np.intp] = np.zeros(0, dtype=np.intp)
        self.labels = LabelIndex(self._rows)
        self.taint_ids: dict[Taint, int] = {}
        self.taints: list[Taint] = []
        self.node_taints: BoolArray = np.zeros((self._rows, 4), dtype=np.bool_)
        self.pods: dict[str, PodInfo] = {}
        self.pods_on: list[dict[str, PodInfo]] = []
        self.generation = 0
        self._listeners: list[ClusterListener] = []
        self._within_columns: set[Resources] = set()  # requests with a column for each resource
        self._update_listeners: list[PodUpdateListener] = []
        self._rank_dirty = False
        # Rows changed: a pod bound or released, a node set or removed.
        self.log = ChangeLog()
        # Bumped when a node's labels, taints, readiness or schedulability may have changed, or a
        # node came or went: masks that read only those are valid for one generation.
        self.static_generation = 0
        self._pod_vectors: dict[Resources, Int64Array] = {}

    # -- observers ---------------------------------------------------------------------------------
    def subscribe(self, listener: ClusterListener) -> None:
        """Register and replay the current state to the listener (nodes, then pods)."""
        self._listeners.append(listener)
        if isinstance(listener, PodUpdateListener):
            self._update_listeners.append(listener)
        ghosts = set(self._ghosts.values())
        for row in range(self.n):
            node = self.nodes[row] or self._ghost_nodes.get(row)
            if node is not None or row in ghosts:  # a ghost of a node never seen: a row all the same
                listener.node_changed(row, None, node)
        for pod in self.pods.values():
            listener.pod_added(pod, self.pod_row(pod.node_name))

    # -- change log (``self.log``) ------------------------------------------------------------------
    def _changed(self, row: int) -> None:
        self.log.record(row, self.n)

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
        """A pod's request as it counts against a node: its requests plus one pod. Read-only: pods of
        a workload share one request, so the vector is memoised per request (until a column is added)."""
        requests = pod.requests
        vector = self._pod_vectors.get(requests)
        if vector is None or vector.shape[0] != self._cols:
            if len(self._pod_vectors) >= _MAX_POD_VECTORS:
                self._pod_vectors.clear()
            vector = self.vector(pod.requests_with_pod_count)
            vector.flags.writeable = False
            self._pod_vectors[requests] = vector
        return vector

    def free_floor(self) -> Int64Array:
        """Per resource column, a lower bound of ``free`` over the live nodes (read-only): no live
        node has less of the resource left. Exact unless pods were released or nodes updated since
        it was last recomputed."""
        if self._floor_loose and self.log.position - self._floor_at >= _FLOOR_EVERY:
            n = self.n
            live = self.free[:n][self.alive[:n]]
            self._floor = (
                live.min(axis=0) if live.shape[0] else np.full(self._cols, _NO_FLOOR, dtype=np.int64)
            )
            self._floor_loose = False
            self._floor_at = self.log.position
        return self._floor

    def _add_column(self, name: str) -> None:
        column = self.columns.add(name)
        if column >= self._cols:
            self._cols *= 2
            self.allocatable = _grow_cols(self.allocatable, self._cols)
            self.requested = _grow_cols(self.requested, self._cols)
            self.free = _grow_cols(self.free, self._cols)
            floor = np.zeros(self._cols, dtype=np.int64)
            floor[: self._floor.shape[0]] = self._floor
            self._floor = floor
        # Existing rows (and the node being added) have 0 of the new resource so far.
        self._floor[column] = min(int(self._floor[column]), 0)
        self._floor_loose = True

    @property
    def width(self) -> int:
        """Allocated columns; vectors from :meth:`vector` have this length."""
        return self._cols

    # -- nodes -----------------------------------------------------------------------------------
    def _grow_rows(self) -> None:
        rows = self._rows * 2
        self.allocatable = _grow_rows(self.allocatable, rows, order="F")
        self.requested = _grow_rows(self.requested, rows, order="F")
        self.free = _grow_rows(self.free, rows, order="F")
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
            # A node deleted and re-created while its pods stayed: back on its ghost row (for the
            # listeners, which never heard of the deletion, an update).
            row = self._ghosts.pop(node.name, None)
            if row is not None:
                old = self._ghost_nodes.pop(row, None)
            elif self._free_rows:
                row = self._free_rows.pop()
            if row is not None:
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
            self.static_generation += 1
        else:
            old = self.nodes[row]
            self.nodes[row] = node
            if old is None or (
                old.labels != node.labels
                or old.taints != node.taints
                or old.ready != node.ready
                or old.unschedulable != node.unschedulable
            ):
                self.static_generation += 1
        self.allocatable[row] = self.vector(allocatable)
        self.free[row] = self.allocatable[row] - self.requested[row]
        np.minimum(self._floor, self.free[row], out=self._floor)
        self._floor_loose = self._floor_loose or old is not None  # an update may have raised it
        self.alive[row] = True
        self.ready[row] = node.ready
        self.unschedulable[row] = node.unschedulable
        self.node_taints[row] = False
        for taint in node.taints:
            tid = self._taint_id(taint)  # first: a new taint may grow (replace) the matrix
            self.node_taints[row, tid] = True
        self.labels.set_node(row, node.labels)
        self.generation += 1
        self._changed(row)
        for listener in self._listeners:
            listener.node_changed(row, old, node)
        return row

    def remove_node(self, name: str) -> None:
        """Remove a node. Pods still bound to it keep counting on its row, now a ghost, until each
        is removed (:meth:`remove_pod`); the row is freed with the last of them."""
        row = self.row_of.pop(name, None)
        if row is None:
            return
        old = self.nodes[row]
        self.nodes[row] = None
        self.names[row] = ""
        self.alive[row] = False
        self.ready[row] = False
        self.allocatable[row] = 0
        self._floor_loose = True
        self.node_taints[row] = False
        self.labels.clear_node(row)
        self._rank_dirty = True
        self.generation += 1
        self.static_generation += 1
        self._changed(row)
        if self.pods_on[row] and old is not None:
            # A ghost. The listeners hear of the removal when the row is freed: until then its pods
            # are charged as on that node (its card types, its per-GPU shares), though nothing is
            # placed there (``alive`` is False).
            self._ghosts[name] = row
            self._ghost_nodes[row] = old
            return
        self._free_row(row, old)

    def _free_row(self, row: int, old: NodeInfo | None) -> None:
        """A dead row without pods: the listeners are told the node is gone; a new node may take it."""
        self.requested[row] = 0
        self.free[row] = 0
        self._free_rows.append(row)
        if old is not None:  # a ghost of a node never seen was never announced
            for listener in self._listeners:
                listener.node_changed(row, old, None)

    def _ghost_row(self, node_name: str) -> int:
        """A ghost row for pods bound to a node this state has not seen (deleted before we listed,
        or not listed yet): they count, on their quotas, from the start; the node, if it comes,
        takes the row over."""
        if self._free_rows:
            row = self._free_rows.pop()
        else:
            if self.n == self._rows:
                self._grow_rows()
            row = self.n
            self.n += 1
            self.names.append("")
            self.nodes.append(None)
            self.pods_on.append({})
        self.alive[row] = self.ready[row] = False
        self.allocatable[row] = self.requested[row] = self.free[row] = 0
        self._ghosts[node_name] = row
        self._changed(row)
        for listener in self._listeners:  # a row without a node: per-row arrays must cover it
            listener.node_changed(row, None, None)
        return row

    def pod_row(self, node_name: str) -> int:
        """The row a bound pod counts on: its node's, or the ghost row of its deleted node."""
        row = self.row_of.get(node_name)
        return self._ghosts[node_name] if row is None else row

    def has_row(self, node_name: str) -> bool:
        """Whether pods bound to ``node_name`` count: the node is known, or deleted under its pods."""
        return node_name in self.row_of or node_name in self._ghosts

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
            self._rank()
        return self.name_rank[: self.n]

    def rank_order(self) -> npt.NDArray[np.intp]:
        """Rows ``[:n]`` by node name (dead rows last): the first maximum of a vector gathered in
        this order is the maximum with the first node name, in one argmax."""
        if self._rank_dirty:
            self._rank()
        return self._rank_order

    def _rank(self) -> None:
        live = sorted((name, row) for row, name in enumerate(self.names) if self.nodes[row] is not None)
        self.name_rank[: self.n] = np.iinfo(np.int64).max
        for rank, (_, row) in enumerate(live):
            self.name_rank[row] = rank
        dead = [row for row in range(self.n) if self.nodes[row] is None]
        self._rank_order = np.array([row for _, row in live] + dead, dtype=np.intp)
        self._rank_dirty = False

    @property
    def node_count(self) -> int:
        return len(self.row_of)

    # -- pods ------------------------------------------------------------------------------------
    def add_pod(self, pod: PodInfo) -> bool:
        """Count a bound pod on its node (a ghost row when the node is unknown); idempotent per pod
        key. False for a pod that holds nothing (finished)."""
        if not pod.holds_resources:
            return False
        previous = self.pods.get(pod.key)
        if previous is not None:
            if previous.node_name == pod.node_name and previous.requests == pod.requests:
                at = self.pod_row(pod.node_name)
                self.pods[pod.key] = pod
                self.pods_on[at][pod.key] = pod
                if (
                    previous.labels != pod.labels
                    or previous.deleting != pod.deleting
                    or previous.affinity != pod.affinity
                ):
                    for update_listener in self._update_listeners:
                        update_listener.pod_updated(previous, pod, at)
                return True
            # Before the row is looked up: removing the last pod of a ghost row frees that row.
            self.remove_pod(pod.key)
        row = self.row_of.get(pod.node_name)
        if row is None:
            row = self._ghosts.get(pod.node_name)
            if row is None:
                row = self._ghost_row(pod.node_name)
        vector = self.pod_vector(pod)
        self.requested[row] += vector
        self.free[row] -= vector
        np.minimum(self._floor, self.free[row], out=self._floor)
        self.pods[pod.key] = pod
        self.pods_on[row][pod.key] = pod
        self.generation += 1
        self._changed(row)
        for listener in self._listeners:
            listener.pod_added(pod, row)
        return True

    def can_add_at_once(self, pod: PodInfo) -> bool:
        """Whether :meth:`add_pods` takes ``pod``: new here, holding resources, on a node this state
        has (no ghost row to make) and asking only resources it has columns for (no column to add):
        nothing about it changes the rows or columns the listeners see."""
        if not (pod.holds_resources and pod.key not in self.pods and pod.node_name in self.row_of):
            return False
        requests = pod.requests
        if requests in self._within_columns:
            return True
        if not all(name in self.columns.index for name in requests):
            return False
        if len(self._within_columns) < _MAX_POD_VECTORS:  # columns are never removed: it stays so
            self._within_columns.add(requests)
        return True

    def add_pods(self, pods: Sequence[PodInfo]) -> None:
        """:meth:`add_pod` for each of ``pods`` (each one :meth:`can_add_at_once` takes, their keys
        distinct), with the arrays updated once for all of them: the same state (the start's bound
        pods, scheduler/kube/feed.py). Each listener hears of every pod in order, as from
        :meth:`add_pod`, a :class:`BulkPodListener` all at once; none of them reads ``requested``,
        ``free``, ``pods`` or another listener's state, which hold every pod already."""
        if not pods:
            return
        rows = [self.row_of[pod.node_name] for pod in pods]
        at = np.asarray(rows, dtype=np.intp)
        vectors = np.stack([self.pod_vector(pod) for pod in pods])
        np.add.at(self.requested, at, vectors)
        np.subtract.at(self.free, at, vectors)
        # free only falls while pods are added: its final value on each row is the least it was.
        np.minimum(self._floor, self.free[np.unique(at)].min(axis=0), out=self._floor)
        counted, pods_on = self.pods, self.pods_on
        for pod, row in zip(pods, rows, strict=True):
            counted[pod.key] = pod
            pods_on[row][pod.key] = pod
        self.generation += len(rows)
        self.log.record_all(rows, self.n)
        # Each listener hears them all in order, a bulk one at once (none reads another's state). An
        # error of one (gpuq's own) is raised once every other has heard them: it alone may lack some.
        failed: Exception | None = None
        for listener in self._listeners:
            try:
                if isinstance(listener, BulkPodListener):
                    listener.pods_added(pods, rows)
                    continue
                for pod, row in zip(pods, rows, strict=True):
                    listener.pod_added(pod, row)
            except Exception as err:
                failed = failed or err
        if failed is not None:
            raise failed

    def remove_pod(self, key: str) -> PodInfo | None:
        """Stop counting a pod (deleted, finished, unbound); idempotent."""
        pod = self.pods.pop(key, None)
        if pod is None:
            return None
        row = self.pod_row(pod.node_name)
        del self.pods_on[row][key]
        vector = self.pod_vector(pod)
        self.requested[row] -= vector
        self.free[row] += vector
        self._floor_loose = True
        self.generation += 1
        self._changed(row)
        for listener in self._listeners:
            listener.pod_removed(pod, row)
        if not self.pods_on[row] and self._ghosts.get(pod.node_name) == row:
            del self._ghosts[pod.node_name]
            self._free_row(row, self._ghost_nodes.pop(row, None))
        return pod

    def pods_on_node(self, name: str) -> Iterable[PodInfo]:
        row = self.row_of.get(name)
        return () if row is None else tuple(self.pods_on[row].values())

    def node_requested(self, row: int) -> Resources:
        """A node's requested total as a Resources vector (for explanations, not the hot path)."""
        values = self.requested[row]
        return Resources({name: int(values[c]) for c, name in enumerate(self.columns.names) if values[c]})


def _grow_rows(array: npt.NDArray[G], rows: int, order: Literal["C", "F"] = "C") -> npt.NDArray[G]:
    grown = np.zeros((rows, *array.shape[1:]), dtype=array.dtype, order=order)
    grown[: array.shape[0]] = array
    return grown


def _grow_cols(array: Int64Array, cols: int) -> Int64Array:
    grown = np.zeros((array.shape[0], cols), dtype=np.int64, order="F")
    grown[:, : array.shape[1]] = array
    return grown
