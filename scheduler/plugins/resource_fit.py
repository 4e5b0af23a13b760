"""Node resource fit: does the pod's request fit a node's free resources, for every node at once
(kube-scheduler's NodeResourcesFit filter; the rule and its messages:
:mod:`common.model.placement.resource_fit`).

``requested + request <= allocatable`` is compared only on the columns the pod asks for (extended
resources, ``ephemeral-storage``, ``hugepages-*`` and the pod count included), read as
``free >= request`` over the cluster's contiguous ``free`` columns, so its cost is N x k for a pod
requesting k resources, never N x R. The ``predicates`` plugin runs it after its node checks; without an
enabled ``predicates`` the allocate action runs it alone (``scheduler/actions/allocate.py``), as Volcano's
allocate checks a task's request against the node's idle resources whatever plugins are configured.

A node whose allocatable is below the request (the pod count aside) is unresolvable, as kube's
``InsufficientResource.Unresolvable``: kept per request class in a
:class:`~scheduler.cluster.row_cache.RowCache` over a change log of the rows whose allocatable changed, so
it costs nothing per attempt until a node changes. Retried when a pod leaves a node, a node is added or
its allocatable changes, the latter two only if the pod fits that node empty and, for an update, the
node has more of something the pod asks (kube's queueing hints).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import numpy as np

from gpuq_k8s.common.model.devices.classes import IMPLICIT_PREFIX
from gpuq_k8s.common.model.devices.extended import is_extended_resource_name
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.placement.resource_fit import TOO_MANY_PODS, fits_empty, insufficient, more_room
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quantity import PODS
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.scheduler.cluster.change_log import ChangeLog
from gpuq_k8s.scheduler.cluster.row_cache import RowCache, Rows
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    FilterPlugin,
    FilterResult,
    Handle,
    ReasonMasks,
)
from gpuq_k8s.scheduler.plugins.dra_view import dra_view

__all__ = ["NAME", "TOO_MANY_PODS", "FitKey", "NodeResourcesFit", "insufficient"]

NAME: Final = "node-resources-fit"

# Request classes remembered; beyond this the cache starts over.
_MAX_CLASSES: Final = 256

# A request class: the columns asked for and the amounts (pod count included).
FitKey = tuple[tuple[int, ...], tuple[int, ...]]


class NodeResourcesFit(FilterPlugin):
    name = NAME
    events = frozenset(
        {
            ClusterEvent.POD_DELETED,
            ClusterEvent.NODE_ADDED,
            ClusterEvent.NODE_ALLOCATABLE_CHANGED,
            # a class naming an extended resource the pod asks hands it to DRA (DRAExtendedResource)
            ClusterEvent.DEVICE_CLASS_CHANGED,
        }
    )

    def __init__(self, handle: Handle) -> None:
        super().__init__(handle)
        self._fit_keys: dict[Resources, FitKey] = {}
        self._fit_keys_width = -1
        # Rows whose allocatable changed: the only input of the unresolvable rows.
        self._allocatable_log = ChangeLog()
        self._unresolvable: RowCache[tuple[FitKey, frozenset[int]]] = RowCache(
            handle.cluster, self._unresolvable_rows, log=self._allocatable_log
        )
        handle.cluster.subscribe(self)

    # -- ClusterListener ----------------------------------------------------------------------------
    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        # Every set, not only a changed allocatable: a row deleted under its pods reads 0 until the
        # node comes back (scheduler/cluster/state.py), and is recomputed then.
        self._allocatable_log.record(row, self.handle.cluster.n)

    def pod_added(self, pod: PodInfo, row: int) -> None:
        pass

    def pods_added(self, pods: Sequence[PodInfo], rows: Sequence[int]) -> None:
        pass

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        pass

    # -- the filter ---------------------------------------------------------------------------------
    def _fit_key(self, pod: PodInfo) -> FitKey:
        cluster = self.handle.cluster
        if self._fit_keys_width != len(cluster.columns) or len(self._fit_keys) >= _MAX_CLASSES:
            self._fit_keys.clear()
            self._fit_keys_width = len(cluster.columns)
        key = self._fit_keys.get(pod.requests)
        if key is None:
            request = cluster.pod_vector(pod)
            columns = np.flatnonzero(request)
            key = (tuple(columns.tolist()), tuple(request[columns].tolist()))
            self._fit_keys[pod.requests] = key
        return key

    def _over(self, key: FitKey, n: int) -> list[BoolArray | None]:
        """Per asked resource, the rows where ``requested + request > allocatable``, read as
        ``free < request``: one pass over one contiguous column (the cluster arrays are column-major).
        None for a resource every live node has enough of (at or below the cluster's free floor)."""
        cluster = self.handle.cluster
        free, floor = cluster.free, cluster.free_floor()
        less = np.less
        over: list[BoolArray | None] = [
            None if floor[c] >= amount else less(free[:n, c], amount) for c, amount in zip(*key, strict=True)
        ]
        delegated = self._delegated(key)
        if delegated:
            # DRA serves these on the nodes with none of them allocatable (upstream's
            # shouldDelegateResourceToDRA): not compared there; DynamicResources allocates them.
            for i, column in enumerate(key[0]):
                found = over[i]
                if column in delegated and found is not None:
                    over[i] = found & (cluster.allocatable[:n, column] > 0)
        return over

    def _delegated(self, key: FitKey) -> frozenset[int]:
        return dra_served_columns(self.handle, key[0])

    def _unresolvable_rows(self, both: tuple[FitKey, frozenset[int]], rows: Rows | None) -> BoolArray:
        """Rows whose allocatable is below the request of some resource but the pod count (a
        resource DRA serves: only where some is allocatable)."""
        key, delegated = both
        cluster = self.handle.cluster
        allocatable = cluster.allocatable[: cluster.n] if rows is None else cluster.allocatable[rows]
        out = np.zeros(allocatable.shape[0], dtype=np.bool_)
        pods = cluster.columns.get(PODS)
        for column, amount in zip(*key, strict=True):
            if column in delegated:
                out |= (allocatable[:, column] < amount) & (allocatable[:, column] > 0)
            elif column != pods:
                out |= allocatable[:, column] < amount
        return out

    def unresolvable(self, key: FitKey) -> BoolArray:
        """The rows that could never hold a pod of request class ``key`` (read-only: the cache's)."""
        return self._unresolvable.get((key, self._delegated(key)))

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        cluster = self.handle.cluster
        n = cluster.n
        key = self._fit_key(pod)
        over = self._over(key, n)
        passed: BoolArray = cluster.alive[:n].copy()
        for column_over in over:
            if column_over is not None:
                passed &= ~column_over

        def reasons() -> ReasonMasks:
            out: list[tuple[BoolArray, str]] = []
            left = cluster.alive[:n].copy()
            for column, column_over in zip(key[0], over, strict=True):
                if column_over is None:
                    continue
                hit = left & column_over
                if hit.any():
                    out.append((hit, insufficient(cluster.columns.names[column])))
            return out

        binding = any(column_over is not None for column_over in over)
        return FilterResult(passed, reasons, unresolvable=self.unresolvable(key) if binding else None)

    def queueing_hint(self, event: ClusterEvent, pod: PodInfo, old: object, new: object) -> bool:
        if event is ClusterEvent.DEVICE_CLASS_CHANGED:
            return _names_asked_resource(new, pod) and not _names_asked_resource(old, pod)
        if isinstance(new, NodeInfo) and event in (
            ClusterEvent.NODE_ADDED,
            ClusterEvent.NODE_ALLOCATABLE_CHANGED,
        ):
            request = pod.requests_with_pod_count
            if not fits_empty(request, new.allocatable):
                return False
            return not isinstance(old, NodeInfo) or more_room(request, old.allocatable, new.allocatable)
        return True


def dra_served_columns(handle: Handle, columns: Iterable[int]) -> frozenset[int]:
    """Of the resource ``columns``, those of extended resources a DeviceClass serves
    (``extendedResourceName`` or its implicit name): kube-scheduler's DRAExtendedResource. On a node
    with none of such a resource allocatable, DRA serves it (upstream's
    ``shouldDelegateResourceToDRA``): it is no node room there, for Filter as for preemption."""
    names = handle.cluster.columns.names
    candidates = [c for c in columns if is_extended_resource_name(names[c])]
    if not candidates:
        return frozenset()
    classes = dra_view(handle.objects).extended_classes()
    return frozenset(c for c in candidates if classes.get(names[c]) is not None)


def _names_asked_resource(device_class: object, pod: PodInfo) -> bool:
    """Whether ``device_class`` (a DeviceClass object) serves an extended resource ``pod`` asks, by
    ``spec.extendedResourceName`` or its implicit name (upstream's
    ``isSchedulableAfterDeviceClassChange``)."""
    if not isinstance(device_class, Mapping) or not pod.extended_spec:
        return False
    meta, spec = device_class.get("metadata"), device_class.get("spec")
    names = {f"{IMPLICIT_PREFIX}{meta.get('name')}"} if isinstance(meta, Mapping) else set()
    if isinstance(spec, Mapping) and spec.get("extendedResourceName"):
        names.add(str(spec["extendedResourceName"]))
    return any(pod.requests.get(name) for name in names)
