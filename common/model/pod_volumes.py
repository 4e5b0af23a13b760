"""A pod's volumes as kube-scheduler's volume plugins read them (``spec.volumes``), parsed once with the pod.

Only the sources a placement rule looks at are kept (design.md "Placement rules", volumes):

* a PersistentVolumeClaim (``persistentVolumeClaim.claimName``), and a generic ephemeral volume,
  whose claim is named ``<pod>-<volume>`` (``component-helpers/storage/ephemeral.VolumeClaimName``)
  and must be controlled by the pod;
* the in-tree disks VolumeRestrictions compares between pods of one node (GCE PD, AWS EBS, RBD,
  iSCSI) and those NodeVolumeLimits counts once migrated to CSI (GCE PD, AWS EBS, Azure Disk,
  Cinder, Portworx).

Everything else (the projected service-account token every pod has, configMaps, secrets, emptyDir,
inline CSI volumes) is dropped here, so a pod without such volumes costs the volume rules nothing.

This module sits beside :mod:`common.model.pods` (which imports it) rather than under
``common/model/placement/volumes``: the placement rules import ``pods``, and the import direction
between siblings is one way only (design.md "Layout").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuq_k8s.common.model import wire
from gpuq_k8s.common.model.errors import InvalidValue

# In-tree volume plugin names (csi-translation-lib/plugins, pkg/volume/*), as CSINode's
# storage.alpha.kubernetes.io/migrated-plugins annotation lists them.
GCE_PD: Final = "kubernetes.io/gce-pd"
AWS_EBS: Final = "kubernetes.io/aws-ebs"
AZURE_DISK: Final = "kubernetes.io/azure-disk"
CINDER: Final = "kubernetes.io/cinder"
PORTWORX: Final = "kubernetes.io/portworx-volume"
RBD: Final = "kubernetes.io/rbd"
ISCSI: Final = "kubernetes.io/iscsi"

# volume source key -> (plugin, the field naming the disk)
_DISKS: Final = {
    "gcePersistentDisk": (GCE_PD, "pdName"),
    "awsElasticBlockStore": (AWS_EBS, "volumeID"),
    "azureDisk": (AZURE_DISK, "diskURI"),
    "cinder": (CINDER, "volumeID"),
    "portworxVolume": (PORTWORX, "volumeID"),
    "rbd": (RBD, "image"),
    "iscsi": (ISCSI, "iqn"),
}
DEFAULT_RBD_POOL: Final = "rbd"  # the apiserver's default of rbd.pool


@dataclass(frozen=True, slots=True)
class InlineDisk:
    """An in-tree disk named in the pod spec itself: ``plugin`` (one of the constants above) and ``disk``
    (the PD name, EBS or Cinder or Portworx volume ID, Azure disk URI, RBD image or iSCSI IQN);
    ``monitors`` and ``pool`` only for RBD."""

    plugin: str
    disk: str
    read_only: bool = False
    monitors: tuple[str, ...] = ()
    pool: str = ""


@dataclass(frozen=True, slots=True)
class PodVolume:
    """One volume of a pod that a placement rule reads: a claim (``claim`` its name; ``ephemeral`` for a
    generic ephemeral volume's claim) or an inline in-tree ``disk``."""

    name: str
    claim: str = ""
    ephemeral: bool = False
    disk: InlineDisk | None = None


def ephemeral_claim_name(pod: str, volume: str) -> str:
    """The claim of a generic ephemeral volume (``ephemeral.VolumeClaimName``): ``<pod>-<volume>``."""
    return f"{pod}-{volume}"


def parse_volumes(raw: Any, pod: str, where: str = "") -> tuple[PodVolume, ...]:
    """The volumes of ``spec.volumes`` the placement rules read (see the module docstring); a malformed
    one is an :class:`InvalidValue` naming ``spec.volumes[i]`` and the field."""
    if raw is None:
        return ()
    volumes: list[PodVolume] = []
    for i, volume in enumerate(wire.items(raw, "spec.volumes", where)):
        at = f"spec.volumes[{i}]"
        parsed = _volume(volume, at, pod, where)
        if parsed is not None:
            volumes.append(parsed)
    return tuple(volumes)


def _volume(volume: Mapping[str, Any], at: str, pod: str, where: str) -> PodVolume | None:
    name = volume.get("name") or ""
    if not isinstance(name, str):
        raise InvalidValue(f"{at}.name", name, "a volume name", where)
    source = volume.get("persistentVolumeClaim")
    if source is not None:
        claim = wire.mapping(source, f"{at}.persistentVolumeClaim", where).get("claimName")
        if not isinstance(claim, str) or not claim:
            raise InvalidValue(f"{at}.persistentVolumeClaim.claimName", claim, "a claim name", where)
        return PodVolume(name, claim=claim)
    if volume.get("ephemeral") is not None:
        wire.mapping(volume.get("ephemeral"), f"{at}.ephemeral", where)
        if not name:
            raise InvalidValue(f"{at}.name", name, "a volume name (it names the ephemeral claim)", where)
        return PodVolume(name, claim=ephemeral_claim_name(pod, name), ephemeral=True)
    for key, (plugin, field) in _DISKS.items():
        if volume.get(key) is not None:
            return PodVolume(name, disk=_disk(volume[key], f"{at}.{key}", plugin, field, where))
    return None


def _disk(raw: Any, at: str, plugin: str, field: str, where: str) -> InlineDisk:
    source = wire.mapping(raw, at, where)
    disk = source.get(field)
    if not isinstance(disk, str) or not disk:
        raise InvalidValue(f"{at}.{field}", disk, "a non-empty string", where)
    read_only = source.get("readOnly", False)
    if not isinstance(read_only, bool):
        raise InvalidValue(f"{at}.readOnly", read_only, "true or false", where)
    if plugin != RBD:
        return InlineDisk(plugin, disk, read_only)
    monitors = source.get("monitors") or []
    if not isinstance(monitors, list) or not all(isinstance(m, str) for m in monitors):
        raise InvalidValue(f"{at}.monitors", monitors, "a list of monitor addresses", where)
    pool = source.get("pool") or DEFAULT_RBD_POOL
    if not isinstance(pool, str):
        raise InvalidValue(f"{at}.pool", pool, "a pool name", where)
    return InlineDisk(plugin, disk, read_only, tuple(monitors), pool)
