"""``predicates``: can the pod run on the node at all, for every node at once.

The checks and their messages are kube-scheduler's (NodeReady, NodeUnschedulable, TaintToleration,
NodeAffinity, NodeResourcesFit), and like kube-scheduler a node is reported under the first check it
fails, in that order. Resource fit compares ``requested + request <= allocatable`` only on the
columns the pod asks for (extended resources and the pod count included), so its cost is N x k for a
pod requesting k resources, never N x R.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from common.model.pods import PodInfo
from common.model.quantity import PODS
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    FilterPlugin,
    FilterResult,
    Handle,
    PreFilterPlugin,
    ReasonMasks,
)
from scheduler.framework.registry import PluginSettings
from scheduler.framework.status import Status
from scheduler.plugins.node_selection import (
    NOT_READY_TAINT,
    UNSCHEDULABLE_TAINT,
    NodeSelection,
    compile_selection,
    selection_mask,
    tolerates,
    untolerated_taints,
)

NAME: Final = "predicates"
NOT_READY: Final = "node(s) were not ready"
UNSCHEDULABLE: Final = "node(s) were unschedulable"
AFFINITY: Final = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS: Final = "Too many pods"


def insufficient(resource: str) -> str:
    return TOO_MANY_PODS if resource == PODS else f"Insufficient {resource}"


def untolerated(key: str, value: str) -> str:
    return f"node(s) had untolerated taint {{{key}: {value}}}"


@dataclass(frozen=True, slots=True)
class _PodPredicates:
    selection: NodeSelection
    tolerates_unschedulable: bool
    tolerates_not_ready: bool


class Predicates(PreFilterPlugin, FilterPlugin):
    name = NAME
    events = frozenset({ClusterEvent.POD_DELETED, ClusterEvent.NODE_ADDED, ClusterEvent.NODE_CHANGED})

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        state.write(
            NAME,
            _PodPredicates(
                compile_selection(pod),
                tolerates(pod.tolerations, UNSCHEDULABLE_TAINT),
                tolerates(pod.tolerations, NOT_READY_TAINT),
            ),
        )
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        cluster = self.handle.cluster
        pre = state.read(NAME, _PodPredicates)
        if pre is None:
            self.pre_filter(state, pod)
            pre = state.read(NAME, _PodPredicates)
            assert pre is not None
        n = cluster.n
        request = cluster.pod_vector(pod)
        columns = np.flatnonzero(request)
        need = request[columns]
        over = cluster.requested[:n, columns] + need > cluster.allocatable[:n, columns]
        fits: BoolArray = np.asarray(~over.any(axis=1), dtype=np.bool_)

        not_ready = np.zeros(n, dtype=np.bool_) if pre.tolerates_not_ready else ~cluster.ready[:n]
        unschedulable = (
            np.zeros(n, dtype=np.bool_) if pre.tolerates_unschedulable else cluster.unschedulable[:n]
        )
        taint_ids = untolerated_taints(cluster, pod)
        tainted = cluster.node_taints[:n, taint_ids].any(axis=1) if taint_ids else np.zeros(n, dtype=np.bool_)
        selected = (
            np.ones(n, dtype=np.bool_)
            if pre.selection.unconstrained
            else selection_mask(cluster, pre.selection, n)
        )
        passed: BoolArray = fits & selected & ~tainted & ~unschedulable & ~not_ready

        def reasons() -> ReasonMasks:
            out: list[tuple[BoolArray, str]] = []
            left = cluster.alive[:n].copy()
            for mask, message in ((not_ready, NOT_READY), (unschedulable, UNSCHEDULABLE)):
                hit = left & mask
                if hit.any():
                    out.append((hit, message))
                left &= ~mask
            for tid in taint_ids:
                hit = left & cluster.node_taints[:n, tid]
                if hit.any():
                    taint = cluster.taints[tid]
                    out.append((hit, untolerated(taint.key, taint.value)))
                left &= ~hit
            hit = left & ~selected
            if hit.any():
                out.append((hit, AFFINITY))
            left &= selected
            for i, column in enumerate(columns):
                hit = left & over[:, i]
                if hit.any():
                    out.append((hit, insufficient(cluster.columns.names[column])))
            return out

        return FilterResult(passed, reasons, unresolvable=~selected | tainted | unschedulable | not_ready)
