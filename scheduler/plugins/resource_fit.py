"""Node resource fit: does the pod's request fit a node's free resources, for every node at once.

``requested + request <= allocatable`` is compared only on the columns the pod asks for (extended
resources and the pod count included), read as ``free >= request`` over the cluster's contiguous
``free`` columns, so its cost is N x k for a pod requesting k resources, never N x R. The
``predicates`` plugin runs it after its node checks; without an enabled ``predicates`` the allocate
action runs it alone (``scheduler/actions/allocate.py``), as Volcano's allocate checks a task's
request against the node's idle resources whatever plugins are configured.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quantity import PODS
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    FilterPlugin,
    FilterResult,
    Handle,
    ReasonMasks,
)

NAME: Final = "node-resources-fit"
TOO_MANY_PODS: Final = "Too many pods"

# Request classes remembered; beyond this the cache starts over.
_MAX_CLASSES: Final = 256

# A request class: the columns asked for and the amounts (pod count included).
FitKey = tuple[tuple[int, ...], tuple[int, ...]]


def insufficient(resource: str) -> str:
    return TOO_MANY_PODS if resource == PODS else f"Insufficient {resource}"


class NodeResourcesFit(FilterPlugin):
    name = NAME
    events = frozenset({ClusterEvent.POD_DELETED, ClusterEvent.NODE_ADDED, ClusterEvent.NODE_CHANGED})

    def __init__(self, handle: Handle) -> None:
        super().__init__(handle)
        self._fit_keys: dict[Resources, FitKey] = {}
        self._fit_keys_width = -1

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
        return [
            None if floor[c] >= amount else less(free[:n, c], amount) for c, amount in zip(*key, strict=True)
        ]

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

        return FilterResult(passed, reasons)
