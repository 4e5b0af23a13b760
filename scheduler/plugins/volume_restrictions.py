"""VolumeRestrictions (kube-scheduler's ``volumerestrictions``): volumes two pods may not share
(:mod:`common.model.placement.volumes.restrictions`).

The plugin keeps, from the cluster's pods (bound and assumed, so the pods of this very burst count),
how many pods use each claim (a node's ``PVCRefCounts``, summed over nodes) and on which rows each
in-tree disk the rule compares is mounted. PreFilter looks the pod's ReadWriteOncePod claims up (a
missing claim keeps it pending, unresolvable) and skips a pod with neither such a claim in use nor
a compared disk; Filter rejects every row when one of its ReadWriteOncePod claims is in use
elsewhere, and the rows where a pod already mounts a conflicting disk.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.placement.volumes.restrictions import (
    ERR_REASON_DISK_CONFLICT,
    ERR_REASON_RWOP_CONFLICT,
    checked_disks,
    claim_keys,
    disks_conflict,
    once_pod_claims,
)
from gpuq_k8s.common.model.pod_volumes import InlineDisk
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

_KEY: Final = plugin_names.VOLUME_RESTRICTIONS


@dataclass(frozen=True, slots=True)
class _Restrictions:
    once_pod_in_use: bool
    disks: tuple[InlineDisk, ...]


class VolumeRestrictions(PreFilterPlugin, FilterPlugin):
    name = plugin_names.VOLUME_RESTRICTIONS
    # kube-scheduler's EventsToRegister: a pod deleted, a node added, a claim added.
    events = frozenset(
        {
            ClusterEvent.POD_DELETED,
            ClusterEvent.NODE_ADDED,
            ClusterEvent.NODE_CHANGED,
            ClusterEvent.PVC_CHANGED,
        }
    )

    def queueing_hint(self, event: ClusterEvent, pod: PodInfo, old: object, new: object) -> bool:
        return claim_event_concerns(event, pod, old, new)

    def __init__(self, handle: Handle) -> None:
        super().__init__(handle)
        self.storage = storage_view(handle.objects)
        self.claim_users: Counter[str] = Counter()  # namespace/claim -> pods using it
        # (plugin, disk) -> [(row, disk, pod key)] of the pods mounting it
        self.disks: dict[tuple[str, str], list[tuple[int, InlineDisk, str]]] = {}
        handle.cluster.subscribe(self)

    # -- ClusterListener --------------------------------------------------------------------------------
    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        pass

    def pod_added(self, pod: PodInfo, row: int) -> None:
        if not pod.volumes:
            return
        self.claim_users.update(claim_keys(pod))
        for disk in checked_disks(pod):
            self.disks.setdefault((disk.plugin, disk.disk), []).append((row, disk, pod.key))

    def pods_added(self, pods: Sequence[PodInfo], rows: Sequence[int]) -> None:
        for pod, row in zip(pods, rows, strict=True):
            if pod.volumes:
                self.pod_added(pod, row)

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        if not pod.volumes:
            return
        self.claim_users.subtract(claim_keys(pod))
        for key in claim_keys(pod):
            if self.claim_users[key] <= 0:
                del self.claim_users[key]
        for disk in checked_disks(pod):
            users = self.disks.get((disk.plugin, disk.disk), [])
            users[:] = [u for u in users if u[2] != pod.key]
            if not users:
                self.disks.pop((disk.plugin, disk.disk), None)

    # -- PreFilter / Filter -----------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        if not pod.volumes:
            return Status.skip()
        found = once_pod_claims(pod, self.storage)
        if found.problem:
            return Status.unresolvable(found.problem)
        in_use = any(self.claim_users[key] > 0 for key in found.keys)
        disks = checked_disks(pod)
        if not in_use and not disks:
            return Status.skip()
        state.write(_KEY, _Restrictions(in_use, disks))
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        restrictions = state.read(_KEY, _Restrictions)
        n = self.handle.cluster.n
        if restrictions is None:
            return FilterResult.all_pass(n)
        conflict = np.zeros(n, dtype=np.bool_)
        for disk in restrictions.disks:
            for row, other, _ in self.disks.get((disk.plugin, disk.disk), ()):
                if row < n and disks_conflict(disk, other):
                    conflict[row] = True
        in_use = np.full(n, restrictions.once_pod_in_use, dtype=np.bool_)
        failed: BoolArray = conflict | in_use
        if not failed.any():
            return FilterResult.all_pass(n)

        def reasons() -> tuple[tuple[BoolArray, str], ...]:
            # kube-scheduler checks the disks first: a node with both reports the disk.
            out = [(conflict, ERR_REASON_DISK_CONFLICT)] if conflict.any() else []
            if restrictions.once_pod_in_use:
                out.append((in_use & ~conflict, ERR_REASON_RWOP_CONFLICT))
            return tuple(out)

        return FilterResult(~failed, reasons)
