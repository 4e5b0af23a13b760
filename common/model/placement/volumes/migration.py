"""In-tree volumes as the CSI volumes they migrated to (``k8s.io/csi-translation-lib``), for counting
them against a node's CSI volume limits.

NodeVolumeLimits counts an in-tree volume (an inline one in the pod spec, or a PersistentVolume's
in-tree source) under the CSI driver its plugin migrated to, with the volume handle the translation
gives, so the same disk written in-tree and as CSI counts once. 1.36 treats the migration of these
five plugins as on for every node with a CSINode object (``isCSIMigrationOn``): AWS EBS, GCE PD,
Azure Disk, Cinder and Portworx. A class provisioner of another migratable plugin (Azure File,
vSphere) is not counted, as upstream.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.placement.volumes.persistent_volumes import PersistentVolume
from gpuq_k8s.common.model.pod_volumes import AWS_EBS, AZURE_DISK, CINDER, GCE_PD, PORTWORX, InlineDisk

# in-tree plugin -> the CSI driver it migrated to (csi-translation-lib/plugins *DriverName)
CSI_DRIVERS: Final = {
    AWS_EBS: "ebs.csi.aws.com",
    GCE_PD: "pd.csi.storage.gke.io",
    AZURE_DISK: "disk.csi.azure.com",
    CINDER: "cinder.csi.openstack.org",
    PORTWORX: "pxd.portworx.com",
}
# the other in-tree plugins translation knows (IsMigratableIntreePluginByName), not counted
OTHER_MIGRATABLE: Final = frozenset({"kubernetes.io/azure-file", "kubernetes.io/vsphere-volume"})
UNSPECIFIED: Final = "UNSPECIFIED"
_EBS_VOLUME: Final = re.compile(r"^vol-[^/]*$")
_ZONE_LABELS: Final = ("failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone")


def ebs_volume_id(kubernetes_id: str) -> str:
    """``KubernetesVolumeIDToEBSVolumeID``: ``aws://<zone>/vol-x`` or ``vol-x`` -> ``vol-x``."""
    if not kubernetes_id.startswith("aws://"):
        return kubernetes_id
    volume = kubernetes_id.removeprefix("aws://").partition("/")[2].strip("/")
    if not _EBS_VOLUME.match(volume):
        raise InvalidValue(
            "awsElasticBlockStore.volumeID", kubernetes_id, "aws://<zone>/vol-<id> or vol-<id>"
        )
    return volume


def gce_handle(pd_name: str, labels: Mapping[str, str] | None = None) -> str:
    """The GCE PD CSI handle: zonal (``projects/UNSPECIFIED/zones/<zone>/disks/<pd>``) from a volume's
    one zone label, regional from several, unspecified without one (an inline volume)."""
    value = ""
    for key in _ZONE_LABELS:
        value = (labels or {}).get(key, "")
        if value:
            break
    zones = value.split("__") if value else []
    if len(zones) > 1:
        regions = {zone.rsplit("-", 1)[0] for zone in zones}
        if len(regions) != 1 or any(zone.count("-") != 2 for zone in zones):
            raise InvalidValue("metadata.labels", value, "zones of one region ({locale}-{region}-{zone})")
        return f"projects/{UNSPECIFIED}/regions/{regions.pop()}/disks/{pd_name}"
    zone = zones[0] if zones else UNSPECIFIED
    return f"projects/{UNSPECIFIED}/zones/{zone}/disks/{pd_name}"


def _handle(plugin: str, disk: str, labels: Mapping[str, str] | None) -> str:
    if plugin == AWS_EBS:
        return ebs_volume_id(disk)
    if plugin == GCE_PD:
        return gce_handle(disk, labels)
    return disk


def translate_inline(disk: InlineDisk) -> tuple[str, str] | None:
    """An inline in-tree disk as (CSI driver, volume handle); None when its plugin is not counted.
    A malformed EBS volume ID is an :class:`InvalidValue` (upstream: an error of the pod's Filter)."""
    driver = CSI_DRIVERS.get(disk.plugin)
    return None if driver is None else (driver, _handle(disk.plugin, disk.disk, None))


def translate_volume(volume: PersistentVolume) -> tuple[str, str] | None:
    """A PersistentVolume as (CSI driver, volume handle): its CSI source, or its in-tree source
    translated; None when neither counts (or the translation fails: upstream does not count it)."""
    source = volume.source
    if source is None:
        return None
    if source.driver:
        return source.driver, source.handle
    driver = CSI_DRIVERS.get(source.plugin)
    if driver is None:
        return None
    try:
        return driver, _handle(source.plugin, source.handle, volume.labels)
    except InvalidValue:
        return None


def provisioner_driver(provisioner: str) -> str | None:
    """The CSI driver a class provisioner's volumes count under: itself, or for an in-tree plugin the
    driver it migrated to; None for the migratable plugins that are not counted."""
    if provisioner in OTHER_MIGRATABLE:
        return None
    return CSI_DRIVERS.get(provisioner, provisioner)
