"""VolumeZone (kube-scheduler's ``volumezone``): a pod whose bound PersistentVolumes carry zone or region
labels only fits nodes in those zones and regions.

A volume's topology is each of ``failure-domain.beta.kubernetes.io/zone``, ``.../region``,
``topology.kubernetes.io/zone`` and ``.../region`` it carries; a value may list several zones joined by
``__`` (``LabelZonesToSet``; a malformed list is ignored, as upstream logs and ignores it). A node
carrying none of the four labels fits any volume. Otherwise, for every such volume label, the node's
value of that key (or, for a beta key the node lacks, of its GA twin) must be one of the volume's
values: else ``node(s) had no available volume zone``, UnschedulableAndUnresolvable.

Only ``persistentVolumeClaim`` volumes count (not generic ephemeral ones), as upstream. Their claims
must exist and be bound to an existing volume, or be unbound claims of a ``WaitForFirstConsumer``
class (skipped: VolumeBinding places them); anything else makes the pod unresolvable with the message
below, as upstream's PreFilter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from gpuq_k8s.common.model.placement.volumes.claim_lookup import not_found
from gpuq_k8s.common.model.placement.volumes.persistent_volumes import PersistentVolume
from gpuq_k8s.common.model.placement.volumes.storage import Storage
from gpuq_k8s.common.model.pods import PodInfo

ERR_REASON_CONFLICT: Final = "node(s) had no available volume zone"
BETA_ZONE: Final = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION: Final = "failure-domain.beta.kubernetes.io/region"
ZONE: Final = "topology.kubernetes.io/zone"
REGION: Final = "topology.kubernetes.io/region"
TOPOLOGY_LABELS: Final = (BETA_ZONE, BETA_REGION, ZONE, REGION)
_GA: Final = {BETA_ZONE: ZONE, BETA_REGION: REGION}
MULTI_ZONE_DELIMITER: Final = "__"


@dataclass(frozen=True, slots=True)
class VolumeTopology:
    volume: str
    key: str
    values: frozenset[str]

    @property
    def ga_key(self) -> str:
        """The key a node may carry instead (``translateToGALabel``)."""
        return _GA.get(self.key, self.key)


def volume_topologies(volume: PersistentVolume) -> tuple[VolumeTopology, ...]:
    """``getPVTopologies``: one entry per topology label of the volume."""
    out: list[VolumeTopology] = []
    for key in TOPOLOGY_LABELS:
        value = volume.labels.get(key)
        if value is None:
            continue
        zones = [zone.strip() for zone in value.split(MULTI_ZONE_DELIMITER)]
        if any(not zone for zone in zones):
            continue  # upstream: "failed to parse PV's topology label, ignoring the label"
        out.append(VolumeTopology(volume.name, key, frozenset(zones)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class PodTopologies:
    topologies: tuple[VolumeTopology, ...] = ()
    problem: str = ""


def pod_topologies(pod: PodInfo, storage: Storage) -> PodTopologies:
    """``getPVbyPod``: the topologies of the pod's bound volumes, or why the pod cannot be placed."""
    out: list[VolumeTopology] = []
    for volume in pod.volumes:
        if not volume.claim or volume.ephemeral:
            continue
        claim = storage.claim(pod.namespace, volume.claim)
        if claim is None:
            return PodTopologies(problem=not_found("persistentvolumeclaim", volume.claim))
        if not claim.volume_name:
            if not claim.storage_class:
                return PodTopologies(problem="PersistentVolumeClaim had no pv name and storageClass name")
            storage_class = storage.storage_class(claim.storage_class)
            if storage_class is None:
                return PodTopologies(problem=not_found("storageclass.storage.k8s.io", claim.storage_class))
            if storage_class.delays_binding:
                continue
            return PodTopologies(problem="PersistentVolume had no name")
        bound = storage.volume(claim.volume_name)
        if bound is None:
            return PodTopologies(problem=not_found("persistentvolume", claim.volume_name))
        out.extend(volume_topologies(bound))
    return PodTopologies(tuple(out))


def node_fits(topologies: tuple[VolumeTopology, ...], labels: Mapping[str, str]) -> bool:
    """The node (its ``labels``) is in every volume's zones and regions (see the module docstring)."""
    if not any(key in labels for key in TOPOLOGY_LABELS):
        return True
    for topology in topologies:
        value = labels.get(topology.key)
        if value is None:
            value = labels.get(topology.ga_key)
        if value is None or value not in topology.values:
            return False
    return True
