"""The static PersistentVolume a claim binds to on a node (``component-helpers/storage/volume``'s
``FindMatchingVolume``, as kube-scheduler's volume binder calls it for a ``WaitForFirstConsumer``
claim on one node).

Walking the class's volumes in order (gpuq: by name; upstream: the informer's, unspecified), a volume
is passed over when another claim's pod chose it on this node already, when it is smaller than the
request, of the other volume mode or VolumeAttributesClass, or being deleted. The first volume bound
to the claim itself (``claimRef``: a pre-bound volume, or one the scheduler assumed for it) decides:
it is the match if its node affinity takes the node, else there is none. Otherwise the match is the
smallest volume that is ``Available``, selected by the claim's selector, of its class, whose node
affinity takes the node and whose access modes include all of the claim's; among equal sizes the
first in order.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from gpuq_k8s.common.model.placement.volumes.claims import Claim
from gpuq_k8s.common.model.placement.volumes.persistent_volumes import AVAILABLE, PersistentVolume


def passes_basics(claim: Claim, volume: PersistentVolume) -> bool:
    """The checks before the claimRef one: size, volume mode, attributes class, not being deleted."""
    return (
        volume.capacity >= claim.request
        and volume.volume_mode == claim.volume_mode
        and volume.attributes_class == claim.attributes_class
        and not volume.deleting
    )


def could_take(claim: Claim, volume: PersistentVolume) -> bool:
    """The node-independent checks of a volume not bound to the claim: available, selected, same
    class, access modes."""
    return (
        volume.claim_ref is None
        and volume.phase == AVAILABLE
        and (claim.selector is None or claim.selector.matches(volume.labels))
        and volume.storage_class == claim.storage_class
        and claim.access_modes <= volume.access_modes
    )


def find_matching_volume(
    claim: Claim,
    volumes: Sequence[PersistentVolume],
    node: str | None,
    labels: Mapping[str, str],
    excluded: Collection[str] = (),
) -> PersistentVolume | None:
    """The volume ``claim`` binds to on node ``node`` (with ``labels``); None when none fits. ``node``
    None: on no particular node (the PV controller binding an ``Immediate`` claim), node affinity
    taking any."""
    smallest: PersistentVolume | None = None
    for volume in volumes:
        if volume.name in excluded or not passes_basics(claim, volume):
            continue
        if volume.claim_ref is not None and not volume.bound_to(claim):
            continue
        fits = node is None or volume.fits_node(node, labels)
        if volume.bound_to(claim):
            return volume if fits else None
        if not could_take(claim, volume) or not fits:
            continue
        if smallest is None or volume.capacity < smallest.capacity:
            smallest = volume
    return smallest
