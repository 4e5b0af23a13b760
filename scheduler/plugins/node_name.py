"""NodeName (kube-scheduler's plugin of that name, Filter): a pod that names a node in ``spec.nodeName``
fits only that node (:mod:`common.model.placement.node_name`).

A member of ``predicates`` that no switch turns off (kube-scheduler's default profile runs it; Volcano
has no switch for it). A pod without ``spec.nodeName``, every pod gpuq queues, skips the filter in
PreFilter, so it costs nothing per node. A node that does not match is unresolvable: no preemption
changes a node's name. Retried when a node is added (kube-scheduler's Node/Add; with queueing hints
on, as in 1.36, no node update can change the verdict).
"""

from __future__ import annotations

import numpy as np

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.placement.node_name import DOES_NOT_MATCH, fits
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    FilterPlugin,
    FilterResult,
    PreFilterPlugin,
)
from gpuq_k8s.scheduler.framework.status import Status


class NodeName(PreFilterPlugin, FilterPlugin):
    name = plugin_names.NODE_NAME
    events = frozenset({ClusterEvent.NODE_ADDED})

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        return Status.success() if pod.node_name else Status.skip()

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        cluster = self.handle.cluster
        n = cluster.n
        matches = np.fromiter((fits(pod.node_name, name) for name in cluster.names[:n]), np.bool_, n)
        passed: BoolArray = cluster.alive[:n] & matches
        rejected = cluster.alive[:n] & ~matches
        return FilterResult(passed, lambda: [(rejected, DOES_NOT_MATCH)], unresolvable=rejected)
