"""NodeVolumeLimits (kube-scheduler's ``nodevolumelimits``, the CSI limits): a node's CSINode says how
many volumes each CSI driver may attach there (``spec.drivers[].allocatable.count``); the pod's
volumes that are new to the node, added to those the node's pods already use, must stay within it,
per driver: else ``node(s) exceed max volume count``, Unschedulable.

Volumes are counted once each, by unique name (driver and volume handle): a claim bound to a volume
counts that volume's CSI source or translated in-tree source (:mod:`.migration`); a claim not bound
yet (or whose volume is missing) counts under its class's provisioner, as a volume of its own; a claim
with no class, or whose class is missing, is not counted; an inline in-tree disk counts as its
translated CSI volume. A node without a CSINode, or whose CSINode reports no limit for a driver, puts
no limit on it. The pod's own claims must exist (``looking up PVC ns/data: persistentvolumeclaim
"data" not found``, unresolvable); claims of pods already on the node that are missing are skipped.

VolumeAttachments are not counted (upstream 1.36 also counts those on the node whose volume no pod
uses any more): gpuq does not read them (design.md "Placement rules").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.placement.volumes.claim_lookup import not_found, not_owned, owned_by
from gpuq_k8s.common.model.placement.volumes.claims import Claim
from gpuq_k8s.common.model.placement.volumes.migration import (
    CSI_DRIVERS,
    provisioner_driver,
    translate_inline,
    translate_volume,
)
from gpuq_k8s.common.model.placement.volumes.storage import Storage
from gpuq_k8s.common.model.pods import PodInfo

ERR_REASON_MAX_VOLUME_COUNT: Final = "node(s) exceed max volume count"

# A volume's unique name: (driver, volume handle, "") for a real volume, (driver, "", claim key)
# for a claim not bound yet (upstream: a random prefix and namespace/name as the handle).
VolumeName = tuple[str, str, str]


def counts_volumes(pod: PodInfo) -> bool:
    """Whether the rule has anything to count for the pod (its PreFilter's Skip otherwise)."""
    return any(v.claim or (v.disk is not None and v.disk.plugin in CSI_DRIVERS) for v in pod.volumes)


def claim_volume(claim: Claim, storage: Storage) -> VolumeName | None:
    """``getCSIDriverInfo``: the unique name ``claim`` counts as, or None when it is not counted."""
    if claim.volume_name:
        volume = storage.volume(claim.volume_name)
        if volume is not None:
            found = translate_volume(volume)
            return None if found is None or not found[0] or not found[1] else (found[0], found[1], "")
    if not claim.storage_class:
        return None
    storage_class = storage.storage_class(claim.storage_class)
    if storage_class is None or not storage_class.provisioner:
        return None
    driver = provisioner_driver(storage_class.provisioner)
    return None if driver is None else (driver, "", claim.key)


@dataclass(frozen=True, slots=True)
class PodCount:
    """The volumes a pod counts (unique name -> driver), or the ``problem`` with its own claims."""

    volumes: Mapping[VolumeName, str] = field(default_factory=dict)
    problem: str = ""


def pod_volumes(pod: PodInfo, storage: Storage, *, new: bool) -> PodCount:
    """``filterAttachableVolumes``: what ``pod`` counts; ``new``: the pod being placed, whose missing
    claims are a problem (a pod already on the node just does not count them)."""
    out: dict[VolumeName, str] = {}
    for volume in pod.volumes:
        if volume.disk is not None:
            try:
                translated = translate_inline(volume.disk)
            except InvalidValue as err:
                if new:
                    return PodCount(problem=f"converting volume({volume.name}) from inline to csi: {err}")
                continue
            if translated is not None:
                out[(translated[0], translated[1], "")] = translated[0]
            continue
        if not volume.claim:
            continue
        claim = storage.claim(pod.namespace, volume.claim)
        if claim is None:
            if new:
                problem = not_found("persistentvolumeclaim", volume.claim)
                return PodCount(problem=f"looking up PVC {pod.namespace}/{volume.claim}: {problem}")
            continue
        if volume.ephemeral and not owned_by(claim, pod):
            if new:
                return PodCount(problem=not_owned(claim, pod))
            continue
        name = claim_volume(claim, storage)
        if name is not None:
            out[name] = name[0]
    return PodCount(out)


def exceeds(
    new: Mapping[VolumeName, str], attached: Mapping[VolumeName, str], limits: Mapping[str, int]
) -> bool:
    """Whether the volumes ``new`` to the node (those not in ``attached``) break a driver's limit."""
    if not limits:
        return False
    used = Counter(attached.values())
    adding = Counter(driver for name, driver in new.items() if name not in attached)
    return any(used[driver] + count > limits[driver] for driver, count in adding.items() if driver in limits)
