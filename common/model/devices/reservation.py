"""A pod's ResourceClaims in the cycle: which claims it uses (PreFilter), and what PreBind writes so
the kubelet finds them allocated and reserved for it (kube-scheduler's DynamicResources, 1.36).

* :func:`pod_claims`: each ``spec.resourceClaims`` entry's claim, or why the pod waits, with
  kube-scheduler's messages: a template's claim not generated yet by kube-controller-manager's
  resource-claim-controller (``pod "ns/p": ResourceClaim not created yet``), a claim missing or being
  deleted, a generated claim another pod owns. An entry whose status names no claim is skipped (the
  controller decided none is needed).
* :func:`reservation_writes`: for a claim the pod's Reserve allocated, the
  ``resource.kubernetes.io/delete-protection`` finalizer first (a resourceVersion-conditional merge
  patch of the claim: it keeps the claim, and so the allocation, from going away under a running pod;
  the resource-claim-controller removes it when it deallocates), then one status write of
  ``status.allocation`` and the pod in ``status.reservedFor``; for a claim allocated already, only the
  reservation. The status write is a strategic merge patch keyed by UID (``reservedFor`` merges by
  ``uid``, as its API type says), so a concurrent reservation by a pod sharing the claim is kept
  rather than overwritten; ``metadata.uid`` makes it fail on a claim deleted and re-created meanwhile,
  and the apiserver refuses an allocation different from one already written (it is immutable).
* :func:`rollback_writes`: the pod's reservation taken back when its binding fails (the allocation
  stays, as upstream's Unreserve leaves it: the pod's next attempt reuses it, and the
  resource-claim-controller deallocates a claim its last consumer left).
* :func:`reserved`: PreBind's condition: the caches show every claim allocated and reserved for the
  pod.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.devices.results import ClaimAllocation
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.prebind import DONE, WAIT, ApiWrite, Lookup, Progress, resource_version
from gpuq_k8s.common.model.wire import Obj

FINALIZER: Final = "resource.kubernetes.io/delete-protection"  # resourceapi.Finalizer
RESERVED_FOR: Final = {"reservedFor": "uid"}  # ResourceClaimStatus.ReservedFor's patchMergeKey
RESERVING: Final = "reserving resource claims"


@dataclass(frozen=True, slots=True)
class PodClaims:
    """The claims a pod uses, in ``spec.resourceClaims`` order (as the API holds them), or the reason
    it waits (``problem``: UnschedulableAndUnresolvable, as kube-scheduler answers it)."""

    claims: tuple[Obj, ...] = ()
    problem: str = ""


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def owned_by(claim: Obj, pod: PodInfo) -> bool:
    """``resourceclaim.IsForPod``: the pod is the claim's controller owner."""
    for owner in _meta(claim).get("ownerReferences") or ():
        if isinstance(owner, Mapping) and owner.get("uid") == pod.uid and owner.get("controller") is True:
            return True
    return False


def pod_claims(pod: PodInfo, get: Callable[[str, str], Obj | None]) -> PodClaims:
    """The pod's claims from ``get(namespace, name)`` (the informer cache), see the module doc."""
    found: list[Obj] = []
    for source in pod.claim_sources:
        if source.claim is None:
            if source.needed:
                return PodClaims(problem=f'pod "{pod.key}": ResourceClaim not created yet')
            continue
        claim = get(pod.namespace, source.claim)
        if claim is None:
            return PodClaims(problem=f'resourceclaim.resource.k8s.io "{source.claim}" not found')
        if _meta(claim).get("deletionTimestamp"):
            return PodClaims(problem=f'resourceclaim "{source.claim}" is being deleted')
        if source.template is not None and not owned_by(claim, pod):
            return PodClaims(
                problem=f"ResourceClaim {pod.namespace}/{source.claim} was not created for Pod "
                f"{pod.key} (Pod is not owner)"
            )
        found.append(claim)
    return PodClaims(tuple(found))


def consumer(pod: PodInfo) -> dict[str, str]:
    """The pod as a ``reservedFor`` entry."""
    return {"resource": "pods", "name": pod.name, "uid": pod.uid}


def reservation_writes(claim: Obj, pod: PodInfo, allocation: ClaimAllocation | None) -> tuple[ApiWrite, ...]:
    """What PreBind writes for ``claim`` (as the caches hold it): see the module doc. ``allocation``:
    what Reserve allocated, None for a claim allocated already."""
    meta = _meta(claim)
    namespace, name, uid = (
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        str(meta.get("uid") or ""),
    )
    writes: list[ApiWrite] = []
    status: dict[str, Any] = {"reservedFor": [consumer(pod)]}
    if allocation is not None:
        finalizers = [str(f) for f in meta.get("finalizers") or ()]
        if FINALIZER not in finalizers:
            patch = {
                "metadata": {
                    "resourceVersion": resource_version(claim),
                    "finalizers": [*finalizers, FINALIZER],
                }
            }
            writes.append(ApiWrite(kinds.RESOURCE_CLAIM, namespace, name, patch))
        status["allocation"] = allocation.to_dict()
    writes.append(
        ApiWrite(
            kinds.RESOURCE_CLAIM,
            namespace,
            name,
            {"metadata": {"uid": uid}, "status": status},
            subresource="status",
            merge_keys=RESERVED_FOR,
        )
    )
    return tuple(writes)


def rollback_writes(claim: Obj, pod: PodInfo) -> tuple[ApiWrite, ...]:
    """The pod's reservation of ``claim`` taken back (upstream's Unreserve patch)."""
    meta = _meta(claim)
    patch = {
        "metadata": {"uid": str(meta.get("uid") or "")},
        "status": {"reservedFor": [{"$patch": "delete", "uid": pod.uid}]},
    }
    return (
        ApiWrite(
            kinds.RESOURCE_CLAIM,
            str(meta.get("namespace") or ""),
            str(meta.get("name") or ""),
            patch,
            subresource="status",
            merge_keys=RESERVED_FOR,
        ),
    )


def is_reserved_for(claim: Obj, pod_uid: str) -> bool:
    status = claim.get("status")
    if not isinstance(status, Mapping) or status.get("allocation") is None:
        return False
    return any(
        isinstance(entry, Mapping) and entry.get("uid") == pod_uid
        for entry in status.get("reservedFor") or ()
    )


def reserved(lookup: Lookup, claims: Sequence[tuple[str, str, str]], pod_uid: str) -> Progress:
    """PreBind's condition over ``claims`` (namespace, name, uid; no uid for a claim this PreBind
    creates): done once every one is allocated and reserved for the pod; failed when one is gone or
    replaced."""
    for namespace, name, uid in claims:
        claim = lookup(kinds.RESOURCE_CLAIM, namespace, name)
        if claim is None or (uid and str(_meta(claim).get("uid") or "") != uid):
            return Progress.failed(f"{kinds.RESOURCE_CLAIM.ref(namespace, name)} is gone")
        if not is_reserved_for(claim, pod_uid):
            return WAIT
    return DONE
