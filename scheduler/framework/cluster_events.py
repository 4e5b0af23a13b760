"""Cluster events: what can make an unschedulable pod schedulable, and which events a change raises
(kube-scheduler's ``ClusterEvent`` of a resource and an action type, ``EventsToRegister`` and queueing
hints; its ``framework/events.go`` classifies node updates the same way).

One change raises every event it is: a node whose labels changed raises ``NODE_CHANGED`` (any update)
and ``NODE_LABELS_CHANGED``; a plugin registers the narrowest events its rejections can be lifted by
(``Plugin.events``) and may look at the change itself (``Plugin.queueing_hint``, with the object before
and after: a deleted pod that held no port of the parked pod's is no reason to retry it). A plugin that
registers nothing is retried on :data:`DEFAULT_EVENTS`: every event but those only placement rules that
read other pods' labels care about (a pod bound or relabelled never frees room or quota, and raising
them for every bind must not retry every parked pod).

The scheduler raises them (:class:`scheduler.cycle.Scheduler`) as the informers' feed or the
simulator's manifests change its view: nodes, pods and the API objects it keeps.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import PodInfo


class ClusterEvent(enum.Enum):
    """One kind of cluster change (kube-scheduler's resource and action type)."""

    # Pods counted on a node (kube's assigned pods).
    POD_DELETED = "PodDeleted"  # a pod left a node: deleted, finished or unbound (old: the pod)
    POD_BOUND = "AssignedPodAdded"  # a pod came to count on a node: bound, assumed, seen (new: the pod)
    POD_LABELS_CHANGED = "AssignedPodLabelsChanged"  # a bound pod's labels changed (old, new)
    # Pending pods.
    POD_ADDED = "PodAdded"  # a new pending pod (gang members waiting for siblings)
    # Nodes (old, new: NodeInfo; kube's Node Add, Delete and the Update kinds).
    NODE_ADDED = "NodeAdded"
    NODE_DELETED = "NodeDeleted"
    NODE_CHANGED = "NodeChanged"  # any update of what the scheduler reads of a node
    NODE_LABELS_CHANGED = "NodeLabelsChanged"
    NODE_TAINTS_CHANGED = "NodeTaintsChanged"  # taints, or spec.unschedulable (as kube counts it)
    NODE_ALLOCATABLE_CHANGED = "NodeAllocatableChanged"
    NODE_CONDITIONS_CHANGED = "NodeConditionsChanged"  # readiness
    # The API objects the scheduler keeps (old, new: the objects; added, changed or deleted).
    QUOTA_CHANGED = "QuotaChanged"  # Queue, ElasticQuota, GPUResourceQuota, PriorityClass, Namespace
    PODGROUP_CHANGED = "PodGroupChanged"
    NAMESPACE_CHANGED = "NamespaceChanged"  # its labels (namespaceSelector), or its deletion starting
    PVC_CHANGED = "PersistentVolumeClaimChanged"
    PV_CHANGED = "PersistentVolumeChanged"
    STORAGE_CLASS_CHANGED = "StorageClassChanged"
    CSI_NODE_CHANGED = "CSINodeChanged"
    PDB_CHANGED = "PodDisruptionBudgetChanged"


ALL_EVENTS: Final = frozenset(ClusterEvent)
# What a plugin that registers no events is retried on (see the module doc).
DEFAULT_EVENTS: Final = ALL_EVENTS - {ClusterEvent.POD_BOUND, ClusterEvent.POD_LABELS_CHANGED}

# The events a change of an object of each kind raises (the object store's kinds, and those the
# placement rules' informers add: PVCs, PVs, StorageClasses, CSINodes, PodDisruptionBudgets).
OBJECT_EVENTS: Final[Mapping[Kind, frozenset[ClusterEvent]]] = {
    kinds.QUEUE: frozenset({ClusterEvent.QUOTA_CHANGED}),
    kinds.ELASTIC_QUOTA: frozenset({ClusterEvent.QUOTA_CHANGED}),
    kinds.GPU_RESOURCE_QUOTA: frozenset({ClusterEvent.QUOTA_CHANGED}),
    kinds.PRIORITY_CLASS: frozenset({ClusterEvent.QUOTA_CHANGED}),
    # A Namespace's deletion starting retires its ElasticQuota (capacity-scheduling): a quota change too.
    kinds.NAMESPACE: frozenset({ClusterEvent.QUOTA_CHANGED, ClusterEvent.NAMESPACE_CHANGED}),
    kinds.POD_GROUP: frozenset({ClusterEvent.PODGROUP_CHANGED}),
    kinds.PERSISTENT_VOLUME_CLAIM: frozenset({ClusterEvent.PVC_CHANGED}),
    kinds.PERSISTENT_VOLUME: frozenset({ClusterEvent.PV_CHANGED}),
    kinds.STORAGE_CLASS: frozenset({ClusterEvent.STORAGE_CLASS_CHANGED}),
    kinds.CSI_NODE: frozenset({ClusterEvent.CSI_NODE_CHANGED}),
    kinds.POD_DISRUPTION_BUDGET: frozenset({ClusterEvent.PDB_CHANGED}),
    # The selectors of topology spread's system defaults: read at the next attempt; kube-scheduler
    # registers no event for them either.
    kinds.SERVICE: frozenset(),
    kinds.REPLICATION_CONTROLLER: frozenset(),
    kinds.REPLICA_SET: frozenset(),
    kinds.STATEFUL_SET: frozenset(),
}


def node_events(old: NodeInfo | None, new: NodeInfo) -> frozenset[ClusterEvent]:
    """The events of a node set: added, or changed and how (kube's ``NodeSchedulingPropertiesChange``)."""
    if old is None:
        return frozenset({ClusterEvent.NODE_ADDED})
    events = {ClusterEvent.NODE_CHANGED}
    if old.labels != new.labels:
        events.add(ClusterEvent.NODE_LABELS_CHANGED)
    if old.taints != new.taints or old.unschedulable != new.unschedulable:
        events.add(ClusterEvent.NODE_TAINTS_CHANGED)
    if old.allocatable != new.allocatable:
        events.add(ClusterEvent.NODE_ALLOCATABLE_CHANGED)
    if old.ready != new.ready:
        events.add(ClusterEvent.NODE_CONDITIONS_CHANGED)
    return frozenset(events)


def bound_pod_events(old: PodInfo | None, new: PodInfo) -> frozenset[ClusterEvent]:
    """The events of a pod that counts on a node being seen again: new there (or moved), or
    relabelled or marked for deletion (the pods inter-pod affinity and topology spread count change)."""
    if old is None or old.node_name != new.node_name:
        return frozenset({ClusterEvent.POD_BOUND})
    if old.labels != new.labels or old.deleting != new.deleting:
        return frozenset({ClusterEvent.POD_LABELS_CHANGED})
    return frozenset()
