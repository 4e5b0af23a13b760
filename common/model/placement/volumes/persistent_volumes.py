"""PersistentVolumes as the volume rules read them (``core/v1``).

A volume's storage class is its ``volume.beta.kubernetes.io/storage-class`` annotation, else
``spec.storageClassName`` (``GetPersistentVolumeClass``); its node affinity is
``spec.nodeAffinity.required`` (a NodeSelector, matched as ``volume.CheckNodeAffinity`` does: no
affinity matches every node); it is bound to a claim when ``spec.claimRef`` names the claim (and, when
the reference carries a UID, that claim's UID: ``IsVolumeBoundToClaim``). ``source`` is where its
data lives as NodeVolumeLimits counts it: a CSI driver and volume handle, or an in-tree plugin and
disk (translated by :mod:`.migration`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpuq_k8s.common.model import kinds, wire
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.node_selector import NodeSelector, parse_node_selector
from gpuq_k8s.common.model.placement.volumes.claims import (
    ANN_BETA_STORAGE_CLASS,
    FILESYSTEM,
    Claim,
    access_modes,
    volume_mode,
)
from gpuq_k8s.common.model.pod_volumes import AWS_EBS, AZURE_DISK, CINDER, GCE_PD, PORTWORX
from gpuq_k8s.common.model.quantity import to_units

AVAILABLE: Final = "Available"
BOUND: Final = "Bound"
CSI: Final = "csi"
# in-tree PersistentVolume sources NodeVolumeLimits translates: spec key -> (plugin, disk field)
_IN_TREE: Final = {
    "gcePersistentDisk": (GCE_PD, "pdName"),
    "awsElasticBlockStore": (AWS_EBS, "volumeID"),
    "azureDisk": (AZURE_DISK, "diskURI"),
    "cinder": (CINDER, "volumeID"),
    "portworxVolume": (PORTWORX, "volumeID"),
}


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Source:
    """Where a volume's data lives: ``plugin`` is ``csi`` (then ``driver`` and ``handle``) or an in-tree
    plugin name (then ``handle`` is its disk: PD name, volume ID, disk URI)."""

    plugin: str
    driver: str = ""
    handle: str = ""


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    name: str
    uid: str = ""
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    storage_class: str = ""
    capacity: int = 0
    access_modes: frozenset[str] = frozenset()
    volume_mode: str = FILESYSTEM
    attributes_class: str = ""
    claim_ref: ClaimRef | None = None
    node_affinity: NodeSelector | None = None
    phase: str = ""
    deleting: bool = False
    source: Source | None = None

    @property
    def ref(self) -> str:
        return kinds.PERSISTENT_VOLUME.ref("", self.name)

    def bound_to(self, claim: Claim) -> bool:
        """``IsVolumeBoundToClaim``: claimRef names the claim (and its UID, when the reference has one)."""
        ref = self.claim_ref
        if ref is None or ref.name != claim.name or ref.namespace != claim.namespace:
            return False
        return not ref.uid or ref.uid == claim.uid

    def fits_node(self, name: str, labels: Mapping[str, str]) -> bool:
        """``volume.CheckNodeAffinity``: no required affinity, or the node matches one of its terms."""
        return self.node_affinity is None or self.node_affinity.matches(name, labels)


def parse_volume(obj: Any) -> PersistentVolume:
    """A PersistentVolume API object (as JSON); an :class:`InvalidValue` naming the volume and the field
    when it is malformed."""
    kind = kinds.PERSISTENT_VOLUME
    meta, spec, status, _, name, where = wire.object_parts(obj, kind.kind, namespaced=False)
    try:
        labels, annotations = wire.labels_and_annotations(meta)
        storage_class = annotations.get(ANN_BETA_STORAGE_CLASS)
        if storage_class is None:
            storage_class = _string(spec.get("storageClassName"), "spec.storageClassName")
        capacity = wire.mapping(spec.get("capacity"), "spec.capacity").get("storage")
        affinity = wire.mapping(spec.get("nodeAffinity"), "spec.nodeAffinity").get("required")
        volume = PersistentVolume(
            name=name,
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            labels=labels,
            annotations=annotations,
            storage_class=storage_class,
            capacity=0 if capacity is None else to_units("storage", capacity, "spec.capacity.storage"),
            access_modes=access_modes(spec.get("accessModes"), "spec.accessModes"),
            volume_mode=volume_mode(spec.get("volumeMode"), "spec.volumeMode"),
            attributes_class=_string(spec.get("volumeAttributesClassName"), "spec.volumeAttributesClassName"),
            claim_ref=_claim_ref(spec.get("claimRef")),
            node_affinity=(
                None if affinity is None else parse_node_selector(affinity, "spec.nodeAffinity.required", "")
            ),
            phase=_string(status.get("phase"), "status.phase"),
            deleting=bool(meta.get("deletionTimestamp")),
            source=_source(spec),
        )
    except InvalidValue as err:
        raise err.located(where) from None
    return volume


def _string(value: Any, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidValue(field, value, "a string")
    return value


def _claim_ref(value: Any) -> ClaimRef | None:
    if value is None:
        return None
    ref = wire.mapping(value, "spec.claimRef")
    return ClaimRef(
        _string(ref.get("namespace"), "spec.claimRef.namespace"),
        _string(ref.get("name"), "spec.claimRef.name"),
        _string(ref.get("uid"), "spec.claimRef.uid"),
    )


def _source(spec: Mapping[str, Any]) -> Source | None:
    csi = spec.get(CSI)
    if csi is not None:
        source = wire.mapping(csi, "spec.csi")
        return Source(
            CSI,
            _string(source.get("driver"), "spec.csi.driver"),
            _string(source.get("volumeHandle"), "spec.csi.volumeHandle"),
        )
    for key, (plugin, disk_field) in _IN_TREE.items():
        if spec.get(key) is not None:
            source = wire.mapping(spec[key], f"spec.{key}")
            return Source(plugin, handle=_string(source.get(disk_field), f"spec.{key}.{disk_field}"))
    return None
