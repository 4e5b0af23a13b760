"""VolumeZone (kube-scheduler's ``volumezone``): a pod's bound volumes' zone and region labels must match
the node's (:mod:`common.model.placement.volumes.zones`), over every node row at once.

PreFilter reads the topologies of the pod's bound volumes (a missing claim or volume, or an unbound
claim that no ``WaitForFirstConsumer`` class explains, keeps the pod pending with kube-scheduler's
message), and skips a pod without any; Filter compares them with each node's labels
(``node(s) had no available volume zone``, UnschedulableAndUnresolvable).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.placement.volumes.zones import (
    ERR_REASON_CONFLICT,
    TOPOLOGY_LABELS,
    PodTopologies,
    pod_topologies,
)
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    FilterPlugin,
    FilterResult,
    Handle,
    PreFilterPlugin,
)
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.plugins.storage_view import claim_event_concerns, storage_view

_KEY: Final = plugin_names.VOLUME_ZONE


class VolumeZone(PreFilterPlugin, FilterPlugin):
    name = plugin_names.VOLUME_ZONE
    # kube-scheduler's EventsToRegister: StorageClass added, node added or relabelled, PVC and PV
    # added or updated.
    events = frozenset(
        {
            ClusterEvent.STORAGE_CLASS_CHANGED,
            ClusterEvent.NODE_ADDED,
            ClusterEvent.NODE_CHANGED,
            ClusterEvent.PVC_CHANGED,
            ClusterEvent.PV_CHANGED,
        }
    )

    def queueing_hint(self, event: ClusterEvent, pod: PodInfo, old: object, new: object) -> bool:
        return claim_event_concerns(event, pod, old, new)

    def __init__(self, handle: Handle) -> None:
        super().__init__(handle)
        self.storage = storage_view(handle.objects)

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        if not any(v.claim and not v.ephemeral for v in pod.volumes):
            return Status.skip()
        found = pod_topologies(pod, self.storage)
        if found.problem:
            return Status.unresolvable(found.problem)
        if not found.topologies:
            return Status.skip()
        state.write(_KEY, found)
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        found = state.read(_KEY, PodTopologies)
        cluster = self.handle.cluster
        n = cluster.n
        if found is None:
            return FilterResult.all_pass(n)
        labels = cluster.labels
        constrained = np.zeros(n, dtype=np.bool_)
        for key in TOPOLOGY_LABELS:
            constrained |= labels.exists(key, n)
        fits = np.ones(n, dtype=np.bool_)
        for topology in found.topologies:
            own = labels.one_of(topology.key, topology.values, n)
            if topology.ga_key != topology.key:  # a beta key the node lacks: its GA twin instead
                own = np.where(
                    labels.exists(topology.key, n), own, labels.one_of(topology.ga_key, topology.values, n)
                )
            fits &= own
        failed: BoolArray = constrained & ~fits
        if not failed.any():
            return FilterResult.all_pass(n)
        return FilterResult(~failed, lambda: ((failed, ERR_REASON_CONFLICT),), failed)
