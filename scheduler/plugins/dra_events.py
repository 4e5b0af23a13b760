"""DynamicResources' EventsToRegister and queueing hint (docs/design.md "DRA devices", "The cycle":
Events): a pod it rejected is retried on a DeviceClass or ResourceSlice change, on a new or relabelled
node, on a node's allocatable change (which extended resources DRA serves there), and on a
ResourceClaim change that concerns it: a claim it uses, or one that freed devices (its allocation
removed, or an allocated claim deleted), kube-scheduler's ``isSchedulableAfterClaimChange``. Its own
update (kube-controller-manager's ``status.resourceClaimStatuses``) retries it anyway.

The quota plugins over devices (capacity-card, gpu-quota) register claim events too, with
:func:`freed_devices`: a claim's charge is refunded when its allocation goes (the resource-claim-
controller clears a deleted pod's claim after the pod's deletion), which is what a pod they refused
waits for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.interfaces import ClusterEvent

EVENTS: Final = frozenset(
    {
        ClusterEvent.DEVICE_CLASS_CHANGED,
        ClusterEvent.RESOURCE_SLICE_CHANGED,
        ClusterEvent.RESOURCE_CLAIM_CHANGED,
        ClusterEvent.NODE_ADDED,
        ClusterEvent.NODE_LABELS_CHANGED,
        ClusterEvent.NODE_ALLOCATABLE_CHANGED,  # which extended resources DRA serves there
    }
)


def claim_hint(event: ClusterEvent, pod: PodInfo, old: object, new: object) -> bool:
    """A claim event matters to a pod that uses the claim, and to every pod when it freed devices
    (its allocation removed, or an allocated claim deleted); every other event of :data:`EVENTS`
    to every pod it rejected."""
    if event is not ClusterEvent.RESOURCE_CLAIM_CHANGED:
        return True
    ref = _claim_of(new) or _claim_of(old)
    if ref is None:
        return True
    if ref[0] == pod.namespace and any(s.claim == ref[1] for s in pod.claim_sources):
        return True
    return freed_devices(old, new)


def freed_devices(old: object, new: object) -> bool:
    """A claim event that gave devices back: its allocation removed, or an allocated claim deleted.
    What retries a pod a quota over devices refused (its charge refunded), and, for DynamicResources,
    a pod whose devices were taken."""
    return _allocated(old) and not _allocated(new)


def _claim_of(obj: object) -> tuple[str, str] | None:
    if not isinstance(obj, Mapping):
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _allocated(obj: object) -> bool:
    if not isinstance(obj, Mapping):
        return False
    status = obj.get("status")
    return isinstance(status, Mapping) and status.get("allocation") is not None
