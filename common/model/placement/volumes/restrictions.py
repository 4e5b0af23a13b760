"""VolumeRestrictions (kube-scheduler's ``volumerestrictions``): volumes two pods may not share.

* *ReadWriteOncePod*: a claim with that access mode used by any other pod of the cluster (bound or
  assumed: the scheduler's snapshot) blocks the pod, Unschedulable (preemption can free the claim):
  ``node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use
  by another pod``. Only ``persistentVolumeClaim`` volumes count, as upstream; a missing claim makes
  the pod unresolvable (``persistentvolumeclaim "data" not found``).
* *The in-tree disks kube-scheduler 1.36 still compares* between the pod and the pods already on a
  node: the same GCE PD unless both mount it read-only, the same AWS EBS volume, the same iSCSI IQN
  unless both read-only, the same RBD image and pool over an overlapping monitor unless both
  read-only: ``node(s) had no available disk``, Unschedulable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpuq_k8s.common.model.placement.volumes.claim_lookup import not_found
from gpuq_k8s.common.model.placement.volumes.claims import READ_WRITE_ONCE_POD
from gpuq_k8s.common.model.placement.volumes.storage import Storage
from gpuq_k8s.common.model.pod_volumes import AWS_EBS, GCE_PD, ISCSI, RBD, InlineDisk
from gpuq_k8s.common.model.pods import PodInfo

ERR_REASON_DISK_CONFLICT: Final = "node(s) had no available disk"
ERR_REASON_RWOP_CONFLICT: Final = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use "
    "by another pod"
)
CHECKED_DISKS: Final = frozenset({GCE_PD, AWS_EBS, ISCSI, RBD})


def claim_keys(pod: PodInfo) -> tuple[str, ...]:
    """``namespace/claim`` of each ``persistentVolumeClaim`` volume of the pod (what a node's
    ``PVCRefCounts`` counts): a claim mounted twice counts twice."""
    return tuple(f"{pod.namespace}/{v.claim}" for v in pod.volumes if v.claim and not v.ephemeral)


def checked_disks(pod: PodInfo) -> tuple[InlineDisk, ...]:
    """The pod's in-tree disks the rule compares (``needsRestrictionsCheck``)."""
    return tuple(v.disk for v in pod.volumes if v.disk is not None and v.disk.plugin in CHECKED_DISKS)


def disks_conflict(disk: InlineDisk, other: InlineDisk) -> bool:
    """``isVolumeConflict`` for one pair of volumes."""
    if disk.plugin != other.plugin or disk.disk != other.disk:
        return False
    both_read_only = disk.read_only and other.read_only
    if disk.plugin == AWS_EBS:
        return True
    if disk.plugin in (GCE_PD, ISCSI):
        return not both_read_only
    if disk.plugin == RBD:
        return (
            bool(set(disk.monitors) & set(other.monitors)) and disk.pool == other.pool and not both_read_only
        )
    return False


@dataclass(frozen=True, slots=True)
class OncePodClaims:
    """The keys of the pod's claims with the ReadWriteOncePod access mode, or the problem."""

    keys: frozenset[str] = frozenset()
    problem: str = ""


def once_pod_claims(pod: PodInfo, storage: Storage) -> OncePodClaims:
    """``readWriteOncePodPVCsForPod``."""
    keys: set[str] = set()
    for volume in pod.volumes:
        if not volume.claim or volume.ephemeral:
            continue
        claim = storage.claim(pod.namespace, volume.claim)
        if claim is None:
            return OncePodClaims(problem=not_found("persistentvolumeclaim", volume.claim))
        if READ_WRITE_ONCE_POD in claim.access_modes:
            keys.add(claim.key)
    return OncePodClaims(frozenset(keys))
