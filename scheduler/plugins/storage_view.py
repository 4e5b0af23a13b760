"""The storage objects of the object store, parsed, for the volume plugins (VolumeBinding, VolumeZone,
VolumeRestrictions, NodeVolumeLimits), which share one :class:`StorageView` per store
(``ObjectStore.shared``).

It is the :class:`~common.model.placement.volumes.storage.Storage` the pure rules look objects up in:
each PersistentVolumeClaim, PersistentVolume, StorageClass and CSINode is parsed once per version of
the object (a newer copy, even one refreshed without an event, is parsed again), the volumes are
indexed by class, and :attr:`StorageView.generation` moves with every change of these kinds, for the
plugins' caches. :meth:`StorageView.node_mask` evaluates a node selector (a PersistentVolume's node
affinity, a class's allowed topologies) over every node row, cached until node labels change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

import numpy as np

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.node_selector import NodeSelector
from gpuq_k8s.common.model.placement.volumes.claims import Claim, parse_claim
from gpuq_k8s.common.model.placement.volumes.csi_nodes import CSINode, parse_csi_node
from gpuq_k8s.common.model.placement.volumes.persistent_volumes import PersistentVolume, parse_volume
from gpuq_k8s.common.model.placement.volumes.storage_classes import StorageClass, parse_storage_class
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.cluster.state import BoolArray, ClusterState
from gpuq_k8s.scheduler.framework.cluster_events import ClusterEvent
from gpuq_k8s.scheduler.plugins.node_selection import Requirement, term_mask

STORAGE_KINDS: Final = frozenset(
    {kinds.PERSISTENT_VOLUME_CLAIM, kinds.PERSISTENT_VOLUME, kinds.STORAGE_CLASS, kinds.CSI_NODE}
)
_MAX_MASKS: Final = 1024
T = TypeVar("T")


class StorageView:
    def __init__(self, objects: ObjectStore) -> None:
        self._objects = objects
        self._parsed: dict[tuple[Kind, str, str], tuple[Obj, Any]] = {}
        self._by_class: dict[str, tuple[PersistentVolume, ...]] | None = None
        # volumes left out of the class index because they are malformed: ref -> the error
        self.invalid: dict[str, str] = {}
        self.generation = 0
        self._masks: dict[NodeSelector, BoolArray] = {}
        self._masks_key: tuple[int, int] = (-1, -1)
        self._limited: tuple[CSINode, ...] | None = None
        objects.subscribe(self._changed)

    def _changed(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        if kind not in STORAGE_KINDS:
            return
        self.generation += 1
        if kind is kinds.PERSISTENT_VOLUME:
            self._by_class = None
        elif kind is kinds.CSI_NODE:
            self._limited = None
        if obj is None:
            self._parsed.pop((kind, namespace if kind.namespaced else "", name), None)

    def _get(self, kind: Kind, namespace: str, name: str, parse: Callable[[Obj], T]) -> T | None:
        raw = self._objects.get(kind, namespace, name)
        if raw is None:
            return None
        key = (kind, namespace if kind.namespaced else "", name)
        hit = self._parsed.get(key)
        if hit is not None and hit[0] is raw:
            parsed: T = hit[1]
            return parsed
        parsed = parse(raw)
        self._parsed[key] = (raw, parsed)
        return parsed

    # -- the Storage protocol -------------------------------------------------------------------------
    def claim(self, namespace: str, name: str) -> Claim | None:
        return self._get(kinds.PERSISTENT_VOLUME_CLAIM, namespace, name, parse_claim)

    def volume(self, name: str) -> PersistentVolume | None:
        return self._get(kinds.PERSISTENT_VOLUME, "", name, parse_volume)

    def storage_class(self, name: str) -> StorageClass | None:
        return self._get(kinds.STORAGE_CLASS, "", name, parse_storage_class)

    def csi_node(self, name: str) -> CSINode | None:
        return self._get(kinds.CSI_NODE, "", name, parse_csi_node)

    def volumes_of_class(self, storage_class: str) -> tuple[PersistentVolume, ...]:
        if self._by_class is None:
            index: dict[str, list[PersistentVolume]] = {}
            self.invalid = {}
            for _, name, _ in self._objects.list(kinds.PERSISTENT_VOLUME):
                try:
                    volume = self.volume(name)
                except InvalidValue as err:
                    self.invalid[kinds.PERSISTENT_VOLUME.ref("", name)] = str(err)
                    continue
                if volume is not None:
                    index.setdefault(volume.storage_class, []).append(volume)
            self._by_class = {cls: tuple(volumes) for cls, volumes in index.items()}
        return self._by_class.get(storage_class, ())

    def limited_nodes(self) -> tuple[CSINode, ...]:
        """The CSINodes that limit some driver's volumes (malformed ones left out)."""
        if self._limited is None:
            limited: list[CSINode] = []
            for _, name, _ in self._objects.list(kinds.CSI_NODE):
                try:
                    csi_node = self.csi_node(name)
                except InvalidValue:
                    continue
                if csi_node is not None and csi_node.limits:
                    limited.append(csi_node)
            self._limited = tuple(limited)
        return self._limited

    # -- node masks -------------------------------------------------------------------------------------
    def node_mask(self, cluster: ClusterState, selector: NodeSelector) -> BoolArray:
        """The rows whose node ``selector`` matches (terms ORed; an empty term matches nothing), as
        ``NodeSelector.matches`` decides for one node. Read-only: shared until node labels change."""
        key = (cluster.static_generation, cluster.n)
        if self._masks_key != key or len(self._masks) >= _MAX_MASKS:
            self._masks.clear()
            self._masks_key = key
        mask = self._masks.get(selector)
        if mask is None:
            n = cluster.n
            mask = np.zeros(n, dtype=np.bool_)
            for term in selector.terms:
                if term:
                    mask |= term_mask(
                        cluster, [Requirement(r.key, r.operator, r.values, r.field) for r in term], n
                    )
            mask.flags.writeable = False
            self._masks[selector] = mask
        return mask


def storage_view(objects: ObjectStore) -> StorageView:
    """The store's one :class:`StorageView`."""
    return objects.shared(StorageView)


def claim_event_concerns(event: object, pod: PodInfo, old: object, new: object) -> bool:
    """The volume plugins' queueing hint: a PersistentVolumeClaim added, changed or deleted matters
    only to a pod of its namespace that uses it (kube-scheduler's volume plugins' hints); any other
    storage event (a volume, a class, a CSINode) to every pod a volume rule rejected."""
    if event is not ClusterEvent.PVC_CHANGED:
        return True
    claim = new if isinstance(new, Mapping) else old
    if not isinstance(claim, Mapping):
        return True
    meta = claim.get("metadata")
    if not isinstance(meta, Mapping):
        return True
    name, namespace = meta.get("name"), meta.get("namespace")
    return pod.namespace == namespace and any(volume.claim == name for volume in pod.volumes)
