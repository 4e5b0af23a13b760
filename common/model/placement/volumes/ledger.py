"""The volumes assumed between Reserve and the end of PreBind (kube-scheduler's volume binder's assume
caches, ``AssumePodVolumes`` / ``RevertAssumedPodVolumes``), in the ledger vocabulary of design.md.

:meth:`VolumeLedger.reserve` records, for the pod, each chosen static volume as pre-bound to its claim
and each claim to provision as marked for the node; :meth:`VolumeLedger.view` then answers lookups as
if those API writes were done, so the next pod's Filter never takes a volume this one took, and a pod
sharing the claim follows it to its node. :meth:`VolumeLedger.unreserve` (idempotent) forgets a pod's
assumptions (its PreBind or bind failed); :meth:`VolumeLedger.observe_claim` and
:meth:`VolumeLedger.observe_volume` forget them once the caches show the claim bound or the write
done, so nothing is kept past what the API says.

A volume assumed for one claim is never assumed for another (``reserve`` refuses, naming both, and
assumes nothing: atomic).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpuq_k8s.common.model.placement.volumes.binder import NodeVolumes
from gpuq_k8s.common.model.placement.volumes.claims import ANN_SELECTED_NODE, Claim
from gpuq_k8s.common.model.placement.volumes.csi_nodes import CSINode
from gpuq_k8s.common.model.placement.volumes.persistent_volumes import ClaimRef, PersistentVolume
from gpuq_k8s.common.model.placement.volumes.storage import Storage
from gpuq_k8s.common.model.placement.volumes.storage_classes import StorageClass


@dataclass(slots=True)
class _Assumed:
    volumes: dict[str, ClaimRef] = field(default_factory=dict)  # volume name -> the claim
    claims: dict[str, str] = field(default_factory=dict)  # claim key -> selected node


class VolumeLedger:
    def __init__(self) -> None:
        self._volumes: dict[str, tuple[ClaimRef, str]] = {}  # volume -> (claim, pod key)
        self._claims: dict[str, tuple[str, str]] = {}  # claim key -> (node, pod key)
        self._pods: dict[str, _Assumed] = {}

    def __len__(self) -> int:
        return len(self._volumes) + len(self._claims)

    def reserve(self, pod_key: str, node: str, volumes: NodeVolumes) -> str | None:
        """Assume ``volumes`` (one node's choice) for pod ``pod_key``; the conflict, when a volume is
        assumed for another claim already (nothing is assumed then), else None."""
        for binding in volumes.bindings:
            held = self._volumes.get(binding.volume.name)
            if held is not None and held[0].key != binding.claim.key:
                return (
                    f"{binding.volume.ref} is assumed for PersistentVolumeClaim {held[0].key} "
                    f"(pod {held[1]}), not {binding.claim.key}"
                )
        assumed = self._pods.setdefault(pod_key, _Assumed())
        for binding in volumes.bindings:
            claim = binding.claim
            ref = ClaimRef(claim.namespace, claim.name, claim.uid)
            self._volumes[binding.volume.name] = (ref, pod_key)
            assumed.volumes[binding.volume.name] = ref
        for claim in volumes.provisions:
            self._claims[claim.key] = (node, pod_key)
            assumed.claims[claim.key] = node
        return None

    def unreserve(self, pod_key: str) -> None:
        """Forget what ``pod_key`` assumed (idempotent; what another pod assumed since stays)."""
        assumed = self._pods.pop(pod_key, None)
        if assumed is None:
            return
        for name in assumed.volumes:
            if self._volumes.get(name, (None, ""))[1] == pod_key:
                del self._volumes[name]
        for key in assumed.claims:
            if self._claims.get(key, ("", ""))[1] == pod_key:
                del self._claims[key]

    def observe_claim(self, claim: Claim) -> None:
        """The caches show ``claim``: once it names its volume, or carries the annotation assumed
        for it, the API holds what was assumed."""
        held = self._claims.get(claim.key)
        if held is not None and (claim.volume_name or claim.selected_node == held[0]):
            self._forget_claim(claim.key, held[1])
        if claim.volume_name:
            held_volume = self._volumes.get(claim.volume_name)
            if held_volume is not None and held_volume[0].key == claim.key:
                self._forget_volume(claim.volume_name, held_volume[1])

    def observe_volume(self, volume: PersistentVolume) -> None:
        """The caches show ``volume``: once its claimRef is the claim assumed for it, the API holds it."""
        held = self._volumes.get(volume.name)
        if held is not None and volume.claim_ref is not None and volume.claim_ref.key == held[0].key:
            self._forget_volume(volume.name, held[1])

    def forget(self, claim_key: str = "", volume: str = "") -> None:
        """The object is gone: no assumption about it stands."""
        if claim_key in self._claims:
            self._forget_claim(claim_key, self._claims[claim_key][1])
        if volume in self._volumes:
            self._forget_volume(volume, self._volumes[volume][1])

    def _forget_claim(self, key: str, pod_key: str) -> None:
        del self._claims[key]
        assumed = self._pods.get(pod_key)
        if assumed is not None:
            assumed.claims.pop(key, None)
            self._drop_if_empty(pod_key, assumed)

    def _forget_volume(self, name: str, pod_key: str) -> None:
        del self._volumes[name]
        assumed = self._pods.get(pod_key)
        if assumed is not None:
            assumed.volumes.pop(name, None)
            self._drop_if_empty(pod_key, assumed)

    def _drop_if_empty(self, pod_key: str, assumed: _Assumed) -> None:
        if not assumed.volumes and not assumed.claims:
            del self._pods[pod_key]

    def view(self, storage: Storage) -> Storage:
        """``storage`` as the assumptions make it (claimRefs and selected-node annotations applied)."""
        return _AssumedStorage(storage, self) if self._volumes or self._claims else storage

    def assumed_volume(self, volume: PersistentVolume) -> PersistentVolume:
        held = self._volumes.get(volume.name)
        if held is None or (volume.claim_ref is not None and volume.claim_ref.key == held[0].key):
            return volume
        return replace(volume, claim_ref=held[0])

    def assumed_claim(self, claim: Claim) -> Claim:
        held = self._claims.get(claim.key)
        if held is None or claim.selected_node == held[0]:
            return claim
        return replace(claim, annotations={**claim.annotations, ANN_SELECTED_NODE: held[0]})


@dataclass(frozen=True, slots=True)
class _AssumedStorage:
    storage: Storage
    ledger: VolumeLedger

    def claim(self, namespace: str, name: str) -> Claim | None:
        claim = self.storage.claim(namespace, name)
        return None if claim is None else self.ledger.assumed_claim(claim)

    def volume(self, name: str) -> PersistentVolume | None:
        volume = self.storage.volume(name)
        return None if volume is None else self.ledger.assumed_volume(volume)

    def storage_class(self, name: str) -> StorageClass | None:
        return self.storage.storage_class(name)

    def csi_node(self, name: str) -> CSINode | None:
        return self.storage.csi_node(name)

    def volumes_of_class(self, storage_class: str) -> tuple[PersistentVolume, ...]:
        return tuple(self.ledger.assumed_volume(v) for v in self.storage.volumes_of_class(storage_class))
