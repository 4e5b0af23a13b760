"""The PersistentVolume controller's part, and a provisioner's, for a cluster that has none: ``gpuq
simulate``'s in-memory cluster (kube-controller-manager's ``persistentvolume-binder`` in a real one).

:func:`reconcile` returns the objects that change, as the controller would write them:

* a new volume (no phase yet) that no claim is bound to becomes ``Available``;
* a claim that a volume is pre-bound to (``spec.claimRef``: the scheduler's PreBind, or a user) is
  bound to it;
* an unbound claim of an ``Immediate`` class (or of none) is bound to the smallest matching
  ``Available`` volume of its class on no particular node (:mod:`.matching`), else provisioned when
  its class provisions;
* an unbound claim the scheduler marked for a node (``volume.kubernetes.io/selected-node``) is
  provisioned for that node;
* *binding* sets the volume's claimRef (with the claim's UID) and phase ``Bound``, and the claim's
  ``spec.volumeName``, ``pv.kubernetes.io/bind-completed``, phase ``Bound`` and capacity.

A provisioned volume is named ``pvc-<claim UID>`` (``pvc-<namespace>-<name>`` for a claim without a
UID), as big as the request, with the claim's access modes and volume mode, a CSI source of the class's
provisioner, and, when the node's CSINode gives that driver topology keys, a node affinity pinning it
to the node's values of those keys (what a CSI provisioner derives from the driver's accessible
topology); without them, no node affinity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.placement.volumes.binder import claim_reference
from gpuq_k8s.common.model.placement.volumes.claims import (
    ANN_BIND_COMPLETED,
    ANN_BOUND_BY_CONTROLLER,
    Claim,
    parse_claim,
)
from gpuq_k8s.common.model.placement.volumes.matching import find_matching_volume
from gpuq_k8s.common.model.placement.volumes.persistent_volumes import (
    AVAILABLE,
    BOUND,
    PersistentVolume,
    parse_volume,
)
from gpuq_k8s.common.model.placement.volumes.storage import Storage
from gpuq_k8s.common.model.prebind import apply_merge_patch
from gpuq_k8s.common.model.quantity import format_bytes
from gpuq_k8s.common.model.wire import Obj

ANN_PROVISIONED_BY: Final = "pv.kubernetes.io/provisioned-by"


def reconcile(
    claims: Iterable[Obj],
    volumes: Iterable[Obj],
    storage: Storage,
    node_labels: Mapping[str, Mapping[str, str]],
) -> list[Obj]:
    """The claims and volumes the controller writes (changed or created) given the current ones;
    ``storage`` answers class and CSINode lookups, ``node_labels`` the nodes' labels."""
    raw_volumes = {str(v["metadata"]["name"]): v for v in volumes}
    parsed_volumes = {name: parse_volume(v) for name, v in raw_volumes.items()}
    out: list[Obj] = []
    for name, current in list(parsed_volumes.items()):
        if not current.phase and current.claim_ref is None:  # syncVolume: an unbound new volume
            raw_volumes[name] = apply_merge_patch(raw_volumes[name], {"status": {"phase": AVAILABLE}})
            parsed_volumes[name] = parse_volume(raw_volumes[name])
            out.append(raw_volumes[name])
    by_claim = {v.claim_ref.key: v for v in parsed_volumes.values() if v.claim_ref is not None}
    taken = {v.name for v in by_claim.values()}
    for raw_claim in claims:
        claim = parse_claim(raw_claim)
        if claim.fully_bound:
            continue
        volume = by_claim.get(claim.key)
        if volume is not None and not volume.bound_to(claim):
            continue  # pre-bound to a claim of that name with another UID: not this one
        if volume is None and claim.volume_name:
            volume = parsed_volumes.get(claim.volume_name)
            if volume is None or (volume.claim_ref is not None and not volume.bound_to(claim)):
                continue
        created: Obj | None = None
        if volume is None:
            volume, created = _find_or_provision(claim, parsed_volumes, taken, storage, node_labels)
            if volume is None:
                continue
        taken.add(volume.name)
        raw_volume = created if created is not None else raw_volumes[volume.name]
        chose = volume.claim_ref is None
        out.extend(_bind(raw_claim, claim, raw_volume, volume, chose))
    return out


def _find_or_provision(
    claim: Claim,
    volumes: Mapping[str, PersistentVolume],
    taken: set[str],
    storage: Storage,
    node_labels: Mapping[str, Mapping[str, str]],
) -> tuple[PersistentVolume | None, Obj | None]:
    storage_class = storage.storage_class(claim.storage_class) if claim.storage_class else None
    node = claim.selected_node
    if node is None:
        if storage_class is not None and storage_class.delays_binding:
            return None, None  # waits for the scheduler
        candidates = [v for _, v in sorted(volumes.items()) if v.storage_class == claim.storage_class]
        match = find_matching_volume(claim, candidates, None, {}, taken)
        if match is not None:
            return match, None
    if storage_class is None or not storage_class.provisions:
        return None, None
    raw = provisioned_volume(claim, storage_class.provisioner, node, storage, node_labels)
    return parse_volume(raw), raw


def provisioned_volume(
    claim: Claim,
    provisioner: str,
    node: str | None,
    storage: Storage,
    node_labels: Mapping[str, Mapping[str, str]],
) -> dict[str, Any]:
    """The volume a CSI provisioner creates for ``claim`` (see the module docstring)."""
    name = f"pvc-{claim.uid}" if claim.uid else f"pvc-{claim.namespace}-{claim.name}"
    spec: dict[str, Any] = {
        "capacity": {"storage": format_bytes(claim.request) if claim.request else "0"},
        "accessModes": sorted(claim.access_modes),
        "volumeMode": claim.volume_mode,
        "storageClassName": claim.storage_class,
        "persistentVolumeReclaimPolicy": "Delete",
        "csi": {"driver": provisioner, "volumeHandle": name},
        "claimRef": claim_reference(claim),
    }
    csi_node = storage.csi_node(node) if node is not None else None
    labels = node_labels.get(node or "", {})
    keys = csi_node.topology_keys.get(provisioner, ()) if csi_node is not None else ()
    expressions = [{"key": k, "operator": "In", "values": [labels[k]]} for k in keys if k in labels]
    if expressions:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}}
    return {
        "apiVersion": kinds.PERSISTENT_VOLUME.api_version,
        "kind": kinds.PERSISTENT_VOLUME.kind,
        "metadata": {"name": name, "annotations": {ANN_PROVISIONED_BY: provisioner}},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def _bind(raw_claim: Obj, claim: Claim, raw_volume: Obj, volume: PersistentVolume, chose: bool) -> list[Obj]:
    """``bindVolumeToClaim`` and ``bindClaimToVolume``: the volume, then the claim."""
    volume_annotations = {ANN_BOUND_BY_CONTROLLER: "yes"} if chose else {}
    bound_volume = apply_merge_patch(
        raw_volume,
        {
            "metadata": {"annotations": volume_annotations} if volume_annotations else {},
            "spec": {"claimRef": claim_reference(claim)},
            "status": {"phase": BOUND},
        },
    )
    claim_annotations = {ANN_BIND_COMPLETED: "yes", **({ANN_BOUND_BY_CONTROLLER: "yes"} if chose else {})}
    capacity = (raw_volume.get("spec") or {}).get("capacity") or {}
    bound_claim = apply_merge_patch(
        raw_claim,
        {
            "metadata": {"annotations": claim_annotations},
            "spec": {"volumeName": volume.name},
            "status": {
                "phase": BOUND,
                "capacity": dict(capacity),
                "accessModes": sorted(volume.access_modes),
            },
        },
    )
    return [bound_volume, bound_claim]
