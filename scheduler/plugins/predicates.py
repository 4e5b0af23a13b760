"""``predicates``: can the pod run on the node at all, for every node at once.

The checks and their messages are kube-scheduler's (NodeReady, NodeUnschedulable, TaintToleration,
NodeAffinity, NodeResourcesFit), and like kube-scheduler a node is reported under the first check it
fails, in that order. Resource fit compares ``requested + request <= allocatable`` only on the
columns the pod asks for (extended resources and the pod count included), so its cost is N x k for a
pod requesting k resources, never N x R.

The node masks (selector/affinity, taints, readiness, schedulability) are cached per distinct
constraint set until a node's labels, taints or conditions change (``ClusterState.static_generation``);
the resource fit is one comparison per asked resource over the cluster's contiguous ``free`` columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.predicates import PredicatesArgs
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    FilterResult,
    Handle,
    Plugin,
    PreFilterPlugin,
    ReasonMasks,
)
from gpuq_k8s.scheduler.framework.registry import PluginSettings, plugin_args
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.plugins.node_selection import (
    NOT_READY_TAINT,
    UNSCHEDULABLE_TAINT,
    NodeSelection,
    compile_selection,
    selection_mask,
    tolerates,
    untolerated_taints,
)
from gpuq_k8s.scheduler.plugins.resource_fit import NodeResourcesFit, insufficient

NOT_READY: Final = "node(s) were not ready"
UNSCHEDULABLE: Final = "node(s) were unschedulable"
AFFINITY: Final = "node(s) didn't match Pod's node affinity/selector"


def untolerated(key: str, value: str) -> str:
    return f"node(s) had untolerated taint {{{key}: {value}}}"


# Node-mask classes remembered; beyond this the cache starts over.
_MAX_CLASSES: Final = 256


@dataclass(frozen=True, slots=True)
class _PodPredicates:
    selection: NodeSelection
    tolerates_unschedulable: bool
    tolerates_not_ready: bool


@dataclass(frozen=True, slots=True)
class _NodeMasks:
    """What a constraint set makes of the nodes; shared by every pod of the class: read-only."""

    not_ready: BoolArray
    unschedulable: BoolArray
    taint_ids: tuple[int, ...]
    tainted: BoolArray
    selected: BoolArray
    ok: BoolArray  # selected, tolerated, schedulable and ready
    unresolvable: BoolArray


_UNCONSTRAINED: Final = _PodPredicates(NodeSelection((), None), False, False)


class Predicates(PreFilterPlugin, NodeResourcesFit):
    name = plugin_names.PREDICATES
    events = frozenset(
        {
            ClusterEvent.POD_DELETED,
            ClusterEvent.NODE_ADDED,
            ClusterEvent.NODE_CHANGED,
            ClusterEvent.DEVICE_CLASS_CHANGED,  # the resource fit's extended resources DRA serves
        }
    )

    # Its node checks read labels, taints and readiness too: the resource fit's hint (a node change
    # helps only with more room) is not this plugin's.
    def queueing_hint(self, event: ClusterEvent, pod: PodInfo, old: object, new: object) -> bool:
        if event is ClusterEvent.DEVICE_CLASS_CHANGED:  # only the resource fit reads classes
            return NodeResourcesFit.queueing_hint(self, event, pod, old, new)
        return Plugin.queueing_hint(self, event, pod, old, new)

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        args = plugin_args(settings, PredicatesArgs) or PredicatesArgs()
        # Volcano's predicate.NodeAffinityEnable / predicate.TaintTolerationEnable: these two of
        # kube-scheduler's filters are part of this plugin's node masks, so they are switched here
        # (the other switches decide which member plugins are built: scheduler/plugins/__init__.py).
        self._node_affinity = args.node_affinity
        self._taint_toleration = args.taint_toleration
        self._masks: dict[tuple[object, ...], _NodeMasks] = {}
        self._masks_generation = -1
        # (distinct taints known, the ids of those a pod without tolerations does not tolerate)
        self._intolerant: tuple[int, tuple[int, ...]] = (-1, ())

    def _node_masks(self, pre: _PodPredicates, pod: PodInfo) -> _NodeMasks:
        cluster = self.handle.cluster
        n = cluster.n
        if self._masks_generation != cluster.static_generation or len(self._masks) >= _MAX_CLASSES:
            self._masks.clear()
            self._masks_generation = cluster.static_generation
        if not self._taint_toleration:
            taint_ids: tuple[int, ...] = ()
        elif pod.tolerations:
            taint_ids = tuple(untolerated_taints(cluster, pod))
        else:  # tolerates nothing: every NoSchedule/NoExecute taint, the same until a taint is new
            if self._intolerant[0] != len(cluster.taints):
                self._intolerant = (len(cluster.taints), tuple(untolerated_taints(cluster, pod)))
            taint_ids = self._intolerant[1]
        key = (pre.selection, taint_ids, pre.tolerates_unschedulable, pre.tolerates_not_ready, n)
        masks = self._masks.get(key)
        if masks is not None:
            return masks
        not_ready = np.zeros(n, dtype=np.bool_) if pre.tolerates_not_ready else ~cluster.ready[:n]
        unschedulable = (
            np.zeros(n, dtype=np.bool_) if pre.tolerates_unschedulable else cluster.unschedulable[:n].copy()
        )
        tainted: BoolArray = (
            np.asarray(cluster.node_taints[:n, list(taint_ids)].any(axis=1), dtype=np.bool_)
            if taint_ids
            else np.zeros(n, dtype=np.bool_)
        )
        selected = (
            np.ones(n, dtype=np.bool_)
            if pre.selection.unconstrained
            else selection_mask(cluster, pre.selection, n)
        )
        masks = _NodeMasks(
            not_ready,
            unschedulable,
            taint_ids,
            tainted,
            selected,
            selected & ~tainted & ~unschedulable & ~not_ready,
            ~selected | tainted | unschedulable | not_ready,
        )
        self._masks[key] = masks
        return masks

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        if not self._node_affinity:
            state.write(
                plugin_names.PREDICATES,
                _PodPredicates(
                    _UNCONSTRAINED.selection,
                    tolerates(pod.tolerations, UNSCHEDULABLE_TAINT),
                    tolerates(pod.tolerations, NOT_READY_TAINT),
                ),
            )
            return Status.success()
        if not pod.node_selector and not pod.affinity and not pod.tolerations:
            state.write(plugin_names.PREDICATES, _UNCONSTRAINED)  # most pods: nothing to compile
            return Status.success()
        state.write(
            plugin_names.PREDICATES,
            _PodPredicates(
                compile_selection(pod),
                tolerates(pod.tolerations, UNSCHEDULABLE_TAINT),
                tolerates(pod.tolerations, NOT_READY_TAINT),
            ),
        )
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        cluster = self.handle.cluster
        pre = state.read(plugin_names.PREDICATES, _PodPredicates)
        if pre is None:
            self.pre_filter(state, pod)
            pre = state.read(plugin_names.PREDICATES, _PodPredicates)
            assert pre is not None
        n = cluster.n
        masks = self._node_masks(pre, pod)
        key = self._fit_key(pod)
        columns = key[0]
        over = self._over(key, n)
        binding = [column_over for column_over in over if column_over is not None]
        if not binding:
            passed: BoolArray = masks.ok
        elif len(binding) == 1:
            passed = np.greater(masks.ok, binding[0])  # ok & ~over
        else:
            over_any = np.logical_or(binding[0], binding[1])
            for column_over in binding[2:]:
                over_any |= column_over
            passed = np.greater(masks.ok, over_any)
        not_ready, unschedulable, selected = masks.not_ready, masks.unschedulable, masks.selected
        taint_ids = masks.taint_ids

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
                column_over = over[i]
                if column_over is None:
                    continue  # no live node short of it
                hit = left & column_over
                if hit.any():
                    out.append((hit, insufficient(cluster.columns.names[column])))
            return out

        unresolvable = masks.unresolvable
        if binding:
            short = self.unresolvable(key)  # allocatable below the request: no eviction helps
            if short.any():
                unresolvable = unresolvable | short
        return FilterResult(passed, reasons, unresolvable=unresolvable)
