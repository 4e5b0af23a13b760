"""NodeVolumeLimits (kube-scheduler's ``nodevolumelimits``, the CSI limits): per node and CSI driver, the
volumes new to the node plus those its pods use must stay within its CSINode's limit
(:mod:`common.model.placement.volumes.limits`).

PreFilter counts the pod's volumes (its own claims must exist: unresolvable otherwise) and skips a
pod that counts none; Filter looks only at the rows whose CSINode limits one of the pod's drivers.
What each row's pods use (unique volume names by driver) is kept per row and recomputed only when a
pod comes to or leaves the row, when a claim or volume one of its pods counts changes, or when a
StorageClass changes (a claim not bound yet counts under its class's provisioner).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.placement.volumes.claims import Claim
from gpuq_k8s.common.model.placement.volumes.limits import (
    ERR_REASON_MAX_VOLUME_COUNT,
    PodCount,
    VolumeName,
    counts_volumes,
    pod_volumes,
)
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.wire import Obj
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

_KEY: Final = plugin_names.NODE_VOLUME_LIMITS


@dataclass(slots=True)
class _Used:
    """What one row's pods use: every unique volume name, and how many per driver."""

    names: set[VolumeName] = field(default_factory=set)
    per_driver: Counter[str] = field(default_factory=Counter)
    claims: set[str] = field(default_factory=set)  # namespace/claim its pods name
    volumes: set[str] = field(default_factory=set)  # PersistentVolumes those claims are bound to


class NodeVolumeLimits(PreFilterPlugin, FilterPlugin):
    name = plugin_names.NODE_VOLUME_LIMITS
    # kube-scheduler's EventsToRegister: CSINode added or updated, a pod deleted, a claim added
    # (VolumeAttachment deletions: gpuq does not read VolumeAttachments).
    events = frozenset({ClusterEvent.CSI_NODE_CHANGED, ClusterEvent.POD_DELETED, ClusterEvent.PVC_CHANGED})

    def queueing_hint(self, event: ClusterEvent, pod: PodInfo, old: object, new: object) -> bool:
        return claim_event_concerns(event, pod, old, new)

    def __init__(self, handle: Handle) -> None:
        super().__init__(handle)
        self.storage = storage_view(handle.objects)
        self._pods: dict[int, dict[str, PodInfo]] = {}  # row -> its pods that count volumes
        self._used: dict[int, _Used] = {}  # row -> what they use (computed on demand)
        handle.cluster.subscribe(self)
        handle.objects.subscribe(self._object)

    # -- what each row uses ----------------------------------------------------------------------------
    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        pass

    def pod_added(self, pod: PodInfo, row: int) -> None:
        if counts_volumes(pod):
            self._pods.setdefault(row, {})[pod.key] = pod
            self._used.pop(row, None)

    def pods_added(self, pods: Sequence[PodInfo], rows: Sequence[int]) -> None:
        for pod, row in zip(pods, rows, strict=True):
            if pod.volumes:
                self.pod_added(pod, row)

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        pods = self._pods.get(row)
        if pods is not None and pods.pop(pod.key, None) is not None:
            self._used.pop(row, None)
            if not pods:
                del self._pods[row]

    def _object(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        if kind is kinds.STORAGE_CLASS:
            self._used.clear()
        elif kind is kinds.PERSISTENT_VOLUME_CLAIM:
            key = f"{namespace}/{name}"
            for row in [r for r, used in self._used.items() if key in used.claims]:
                del self._used[row]
        elif kind is kinds.PERSISTENT_VOLUME:
            for row in [r for r, used in self._used.items() if name in used.volumes]:
                del self._used[row]

    def used(self, row: int) -> _Used:
        """What the pods on ``row`` use (cached until something it was computed from changes)."""
        used = self._used.get(row)
        if used is None:
            used = self._used[row] = _Used()
            for pod in self._pods.get(row, {}).values():
                for volume in pod.volumes:
                    if volume.claim:
                        used.claims.add(f"{pod.namespace}/{volume.claim}")
                        claim = self._claim(pod.namespace, volume.claim)
                        if claim is not None and claim.volume_name:
                            used.volumes.add(claim.volume_name)
                try:
                    counted = pod_volumes(pod, self.storage, new=False)
                except InvalidValue:
                    continue  # a malformed object is reported where a pod's attempt reads it
                for name in counted.volumes:
                    if name not in used.names:
                        used.names.add(name)
                        used.per_driver[name[0]] += 1
        return used

    def _claim(self, namespace: str, name: str) -> Claim | None:
        try:
            return self.storage.claim(namespace, name)
        except InvalidValue:
            return None

    # -- PreFilter / Filter -----------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        if not counts_volumes(pod):
            return Status.skip()
        count = pod_volumes(pod, self.storage, new=True)
        if count.problem:
            return Status.unresolvable(count.problem)
        if not count.volumes:
            return Status.skip()
        state.write(_KEY, count)
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        count = state.read(_KEY, PodCount)
        cluster = self.handle.cluster
        n = cluster.n
        if count is None:
            return FilterResult.all_pass(n)
        new: dict[str, list[VolumeName]] = {}
        for name, driver in count.volumes.items():
            new.setdefault(driver, []).append(name)
        failed = np.zeros(n, dtype=np.bool_)
        for csi_node in self.storage.limited_nodes():
            row = cluster.row_of.get(csi_node.name)
            if row is None or row >= n or not any(driver in csi_node.limits for driver in new):
                continue
            used = self.used(row)
            for driver, names in new.items():
                limit = csi_node.limits.get(driver)
                if limit is None:
                    continue
                adding = sum(1 for name in names if name not in used.names)
                if adding and used.per_driver[driver] + adding > limit:
                    failed[row] = True
                    break
        if not failed.any():
            return FilterResult.all_pass(n)
        rejected: BoolArray = failed
        return FilterResult(~rejected, lambda: ((rejected, ERR_REASON_MAX_VOLUME_COUNT),))
