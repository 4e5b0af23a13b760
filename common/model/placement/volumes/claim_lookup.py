"""A pod's PersistentVolumeClaims found, or why they cannot be, in kube-scheduler's words.

VolumeBinding's PreFilter (``podHasPVCs``) refuses a pod, UnschedulableAndUnresolvable, whose claim
does not exist (``persistentvolumeclaim "data" not found``; for a generic ephemeral volume, whose
claim its controller creates after the pod: ``waiting for ephemeral volume controller to create the
persistentvolumeclaim "p-scratch"``), is Lost (``persistentvolumeclaim "data" bound to non-existent
persistentvolume "pv-1"``), is being deleted (``persistentvolumeclaim "data" is being deleted``), or,
for an ephemeral volume, was not created for this pod (``PVC ns/p-scratch was not created for pod
ns/p (pod is not owner)``). Those messages are the apiserver listers' and ``component-helpers``' own,
so a FitError reads as kube-scheduler's.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuq_k8s.common.model.placement.volumes.claims import CLAIM_LOST, Claim
from gpuq_k8s.common.model.placement.volumes.storage import Storage
from gpuq_k8s.common.model.pod_volumes import PodVolume
from gpuq_k8s.common.model.pods import PodInfo


def not_found(resource: str, name: str) -> str:
    """A lister's NotFound message: ``persistentvolumeclaim "data" not found``."""
    return f'{resource} "{name}" not found'


def not_owned(claim: Claim, pod: PodInfo) -> str:
    """``ephemeral.VolumeIsForPod``'s refusal."""
    return (
        f"PVC {claim.namespace}/{claim.name} was not created for pod {pod.namespace}/{pod.name} "
        "(pod is not owner)"
    )


def owned_by(claim: Claim, pod: PodInfo) -> bool:
    """The claim of an ephemeral volume is controlled by the pod (``metav1.IsControlledBy``: its
    controlling owner reference names the pod's UID)."""
    return claim.namespace == pod.namespace and claim.controller_uid == pod.uid


@dataclass(frozen=True, slots=True)
class PodClaims:
    """The claims of a pod's claim volumes, in volume order (a claim used twice appears twice), or the
    ``problem`` that makes the pod unschedulable until a claim changes."""

    claims: tuple[Claim, ...] = ()
    problem: str = ""


def claim_volumes(pod: PodInfo) -> tuple[PodVolume, ...]:
    """The pod's volumes backed by a claim (PersistentVolumeClaim and generic ephemeral volumes)."""
    return tuple(v for v in pod.volumes if v.claim)


def binding_claims(pod: PodInfo, storage: Storage) -> PodClaims:
    """VolumeBinding's ``podHasPVCs``: every claim of the pod, or the first problem met."""
    found: list[Claim] = []
    for volume in claim_volumes(pod):
        claim = storage.claim(pod.namespace, volume.claim)
        if claim is None:
            if volume.ephemeral:
                waiting = "waiting for ephemeral volume controller to create the persistentvolumeclaim"
                return PodClaims(problem=f'{waiting} "{volume.claim}"')
            return PodClaims(problem=not_found("persistentvolumeclaim", volume.claim))
        if claim.phase == CLAIM_LOST:
            lost = f'bound to non-existent persistentvolume "{claim.volume_name}"'
            return PodClaims(problem=f'persistentvolumeclaim "{claim.name}" {lost}')
        if claim.deleting:
            return PodClaims(problem=f'persistentvolumeclaim "{claim.name}" is being deleted')
        if volume.ephemeral and not owned_by(claim, pod):
            return PodClaims(problem=not_owned(claim, pod))
        found.append(claim)
    return PodClaims(tuple(found))
