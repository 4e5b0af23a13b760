"""VolumeBinding's decisions (kube-scheduler's ``volumebinding/binder.go``), one node at a time.

* :func:`sort_claims` (``GetPodVolumeClaims``): a pod's claims are *bound* (fully bound by the PV
  controller), *delayed* (unbound, of a ``WaitForFirstConsumer`` class, not pre-bound: the scheduler
  binds them) or *immediate* (anything else unbound: the PV controller binds them without the
  scheduler, so the pod waits: ``pod has unbound immediate PersistentVolumeClaims``).
* :func:`find_pod_volumes` (``FindPodVolumes``): on one node, a bound claim's volume must exist and take
  the node (its node affinity); a delayed claim already marked for provisioning on a node
  (``volume.kubernetes.io/selected-node``) only takes that node; the others, smallest request first,
  each get a static volume (:mod:`.matching`) or are provisioned, which needs a class whose
  provisioner provisions and whose allowed topologies take the node. The reasons a node fails are
  kube-scheduler's, in its order.
* :func:`writes` and :func:`bindings_ready` (``BindPodVolumes``): PreBind writes the chosen volume's
  ``spec.claimRef`` (the PV controller then binds the claim) and the provisioned claims'
  ``selected-node`` annotation (the provisioner then creates a volume, the PV controller binds it),
  then waits until every claim is fully bound (and its phase Bound) on a volume that takes the node,
  failing when the PV controller dropped a claimRef or a provisioner dropped the annotation (it gave
  up).

Storage capacity (``CSIStorageCapacity``, for CSI drivers that publish it) is not checked: gpuq does
not read CSIDriver or CSIStorageCapacity objects (design.md "Placement rules").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.placement.volumes.claim_lookup import not_found
from gpuq_k8s.common.model.placement.volumes.claims import (
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    CLAIM_BOUND,
    Claim,
    parse_claim,
)
from gpuq_k8s.common.model.placement.volumes.matching import find_matching_volume
from gpuq_k8s.common.model.placement.volumes.persistent_volumes import PersistentVolume, parse_volume
from gpuq_k8s.common.model.placement.volumes.storage import Storage
from gpuq_k8s.common.model.prebind import DONE, WAIT, ApiWrite, Lookup, Progress

ERR_NODE_CONFLICT: Final = "node(s) didn't match PersistentVolume's node affinity"
ERR_BIND_CONFLICT: Final = "node(s) didn't find available persistent volumes to bind"
ERR_PV_NOT_EXIST: Final = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
UNBOUND_IMMEDIATE: Final = "pod has unbound immediate PersistentVolumeClaims"
BINDING_VOLUMES: Final = "binding volumes"


@dataclass(frozen=True, slots=True)
class SortedClaims:
    bound: tuple[Claim, ...] = ()
    delayed: tuple[Claim, ...] = ()
    immediate: tuple[Claim, ...] = ()


def sort_claims(claims: tuple[Claim, ...], storage: Storage) -> SortedClaims:
    """``GetPodVolumeClaims``: see the module docstring. A claim of no class, or of a class that does
    not exist, is immediate (``IsDelayBindingMode``)."""
    bound: list[Claim] = []
    delayed: list[Claim] = []
    immediate: list[Claim] = []
    for claim in claims:
        if claim.fully_bound:
            bound.append(claim)
            continue
        storage_class = storage.storage_class(claim.storage_class) if claim.storage_class else None
        if storage_class is not None and storage_class.delays_binding and not claim.volume_name:
            delayed.append(claim)
        else:
            immediate.append(claim)
    return SortedClaims(tuple(bound), tuple(delayed), tuple(immediate))


@dataclass(frozen=True, slots=True)
class Binding:
    """A delayed claim and the static volume chosen for it."""

    claim: Claim
    volume: PersistentVolume


@dataclass(frozen=True, slots=True)
class NodeVolumes:
    """One node's answer: the static bindings and the claims to provision there, or the ``reasons``
    the node cannot take the pod's volumes."""

    bindings: tuple[Binding, ...] = ()
    provisions: tuple[Claim, ...] = ()
    reasons: tuple[str, ...] = ()


def find_pod_volumes(
    claims: SortedClaims, node: str, labels: Mapping[str, str], storage: Storage
) -> NodeVolumes:
    """``FindPodVolumes`` on node ``node`` (its ``labels``): see the module docstring."""
    bound_ok, volumes_exist = _check_bound(claims.bound, node, labels, storage)
    unbound_ok = True
    bindings: tuple[Binding, ...] = ()
    provisions: tuple[Claim, ...] = ()
    if claims.delayed:
        unbound_ok, bindings, provisions = _find_unbound(claims.delayed, node, labels, storage)
    reasons = (
        *((ERR_NODE_CONFLICT,) if not bound_ok else ()),
        *((ERR_BIND_CONFLICT,) if not unbound_ok else ()),
        *((ERR_PV_NOT_EXIST,) if not volumes_exist else ()),
    )
    if reasons:
        return NodeVolumes(reasons=reasons)
    return NodeVolumes(bindings, provisions)


def _check_bound(
    claims: tuple[Claim, ...], node: str, labels: Mapping[str, str], storage: Storage
) -> tuple[bool, bool]:
    """``checkBoundClaims``: (node affinity satisfied, volumes exist), stopping at the first failure."""
    for claim in claims:
        volume = storage.volume(claim.volume_name)
        if volume is None:
            return True, False
        if not volume.fits_node(node, labels):
            return False, True
    return True, True


def _find_unbound(
    claims: tuple[Claim, ...], node: str, labels: Mapping[str, str], storage: Storage
) -> tuple[bool, tuple[Binding, ...], tuple[Claim, ...]]:
    to_match: list[Claim] = []
    to_provision: list[Claim] = []
    for claim in claims:
        selected = claim.selected_node
        if selected is not None:
            if selected != node:
                return False, (), ()
            to_provision.append(claim)
        else:
            to_match.append(claim)
    bindings: list[Binding] = []
    chosen: set[str] = set()
    satisfied = True
    for claim in sorted(to_match, key=lambda c: c.request):
        volume = find_matching_volume(
            claim, storage.volumes_of_class(claim.storage_class), node, labels, chosen
        )
        if volume is None:
            to_provision.append(claim)
            satisfied = False
            continue
        chosen.add(volume.name)
        bindings.append(Binding(claim, volume))
    if to_provision:
        satisfied = all(_provisionable(claim, node, labels, storage) for claim in to_provision)
        if not satisfied:
            return False, (), ()
    return satisfied, tuple(bindings), tuple(to_provision)


def _provisionable(claim: Claim, node: str, labels: Mapping[str, str], storage: Storage) -> bool:
    """``checkVolumeProvisions`` for one claim: its class provisions, and may on this node."""
    storage_class = storage.storage_class(claim.storage_class) if claim.storage_class else None
    return storage_class is not None and storage_class.provisions and storage_class.allows(node, labels)


# -- PreBind ------------------------------------------------------------------------------------------


def claim_reference(claim: Claim) -> dict[str, Any]:
    """The ``spec.claimRef`` a volume bound to ``claim`` carries (``reference.GetReference``)."""
    ref: dict[str, Any] = {
        "kind": kinds.PERSISTENT_VOLUME_CLAIM.kind,
        "apiVersion": kinds.PERSISTENT_VOLUME_CLAIM.api_version,
        "namespace": claim.namespace,
        "name": claim.name,
    }
    if claim.uid:
        ref["uid"] = claim.uid
    if claim.resource_version:
        ref["resourceVersion"] = claim.resource_version
    return ref


def writes(volumes: NodeVolumes, node: str) -> tuple[ApiWrite, ...]:
    """PreBind's writes (``bindAPIUpdate``): each chosen volume pre-bound to its claim (with
    ``pv.kubernetes.io/bound-by-controller`` when the scheduler made the choice), each provisioned
    claim marked with the node. Each is conditional on the version the decision was made on."""
    out: list[ApiWrite] = []
    for binding in volumes.bindings:
        volume, claim = binding.volume, binding.claim
        meta: dict[str, Any] = {"resourceVersion": volume.resource_version}
        if not volume.bound_to(claim) and ANN_BOUND_BY_CONTROLLER not in volume.annotations:
            meta["annotations"] = {ANN_BOUND_BY_CONTROLLER: "yes"}
        patch = {"metadata": meta, "spec": {"claimRef": claim_reference(claim)}}
        out.append(ApiWrite(kinds.PERSISTENT_VOLUME, "", volume.name, patch))
    for claim in volumes.provisions:
        meta = {"resourceVersion": claim.resource_version, "annotations": {ANN_SELECTED_NODE: node}}
        out.append(ApiWrite(kinds.PERSISTENT_VOLUME_CLAIM, claim.namespace, claim.name, {"metadata": meta}))
    return tuple(out)


def bindings_ready(lookup: Lookup, volumes: NodeVolumes, node: str, labels: Mapping[str, str]) -> Progress:
    """``checkBindings``: DONE once every claim is fully bound to a volume that takes the node; WAIT
    until then; failed when a claimRef or a selected-node annotation was dropped, or a volume does not
    take the node."""
    for binding in volumes.bindings:
        raw_volume = lookup(kinds.PERSISTENT_VOLUME, "", binding.volume.name)
        if raw_volume is None:
            return _failed(f"failed to check binding: {not_found('persistentvolume', binding.volume.name)}")
        claim = _claim(lookup, binding.claim)
        if claim is None:
            return _failed(
                f"failed to check binding: {not_found('persistentvolumeclaim', binding.claim.name)}"
            )
        volume = parse_volume(raw_volume)
        if not volume.fits_node(node, labels):
            return _failed(f'pv "{volume.name}" node affinity doesn\'t match node "{node}"')
        if volume.claim_ref is None or not volume.claim_ref.uid:
            return _failed(f'ClaimRef got reset for pv "{volume.name}"')
        if not _bound(claim):
            return WAIT
    for provision in volumes.provisions:
        claim = _claim(lookup, provision)
        if claim is None:
            return _failed(
                f"failed to check provisioning pvc: {not_found('persistentvolumeclaim', provision.name)}"
            )
        selected = claim.selected_node
        if selected is None:
            return _failed(f'selectedNode annotation reset for PVC "{claim.name}"')
        if selected != node:
            return _failed(f'provisioning failed for PVC "{claim.name}"')
        if claim.volume_name:
            raw_volume = lookup(kinds.PERSISTENT_VOLUME, "", claim.volume_name)
            if raw_volume is None:
                return WAIT  # not in the caches yet, or deleted: then the claim comes unbound
            volume = parse_volume(raw_volume)
            if not volume.fits_node(node, labels):
                return _failed(f'pv "{volume.name}" node affinity doesn\'t match node "{node}"')
        if not _bound(claim):
            return WAIT
    return DONE


def _bound(claim: Claim) -> bool:
    """Fully bound (``isPVCFullyBound``), and its phase ``Bound``: the PV controller writes the phase
    right after the binding, and gpuq binds the pod only once a reader of the claim sees it Bound
    (upstream binds on the binding alone, possibly a moment before the phase)."""
    return claim.fully_bound and claim.phase == CLAIM_BOUND


def _claim(lookup: Lookup, claim: Claim) -> Claim | None:
    raw = lookup(kinds.PERSISTENT_VOLUME_CLAIM, claim.namespace, claim.name)
    return None if raw is None else parse_claim(raw)


def _failed(message: str) -> Progress:
    return Progress.failed(f"{BINDING_VOLUMES}: {message}")
