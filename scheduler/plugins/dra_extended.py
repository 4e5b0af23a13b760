"""Extended resources backed by DRA in the DynamicResources cycle (DRAExtendedResource, beta and on in
kube-scheduler 1.36; the model is :mod:`common.model.devices.extended`, docs/design.md "DRA devices",
"The cycle").

A pod asking ``example.com/gpu: 2`` where a DeviceClass names ``example.com/gpu`` is served, node by
node, by the device plugin where the node's allocatable has some of it, else by DRA through the pod's
implicit claim. :func:`group_rows` groups the node rows by the set of resources DRA serves there, each
group with its plan (the pod's claims plus that group's implicit claim); PreBind creates the claim
(:func:`create_writes`), then writes the pod's ``status.extendedResourceClaimStatus``
(:func:`pod_status_write`). :func:`uses_devices` and :func:`device_claim_keys` tell the quota plugins
over devices which pods and claims are theirs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.devices.claims import ResourceClaim
from gpuq_k8s.common.model.devices.extended import (
    IN_MEMORY_NAME,
    ContainerMapping,
    extended_claim,
    extended_claim_name,
    extended_claim_object,
    extended_requests,
    is_extended_resource_name,
)
from gpuq_k8s.common.model.devices.plan import PodPlan
from gpuq_k8s.common.model.devices.reservation import FINALIZER, RESERVED_FOR, consumer
from gpuq_k8s.common.model.devices.results import ClaimAllocation
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.prebind import ApiWrite
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.cluster.state import ClusterState
from gpuq_k8s.scheduler.framework.interfaces import Handle
from gpuq_k8s.scheduler.plugins.dra_view import DraView, dra_view


@dataclass(frozen=True, slots=True)
class ExtendedGroup:
    """The node rows with one set of resources DRA serves: their plan (None: nothing to allocate
    there), the implicit claim in it and the pod's container -> request mappings."""

    plan: PodPlan | None
    mappings: tuple[ContainerMapping, ...] = ()
    claim: ResourceClaim | None = None


@dataclass(frozen=True, slots=True)
class ExtendedClaim:
    """The pod's implicit claim: its name (:func:`~common.model.devices.extended.extended_claim_name`),
    whether an earlier attempt made it (then it is one of the pod's claims, allocated as any), and for
    such a claim the mappings of its requests."""

    name: str
    existing: bool
    mappings: tuple[ContainerMapping, ...] = ()


def extended_resources(view: DraView, pod: PodInfo) -> dict[str, int]:
    """The pod's extended resources a DeviceClass serves (``extendedResourceName`` or its implicit
    name)."""
    if not pod.extended_spec:
        return {}
    classes = view.extended_classes()
    return {
        name: amount
        for name, amount in pod.requests.items()
        if amount and is_extended_resource_name(name) and classes.get(name) is not None
    }


def existing_mappings(
    view: DraView, pod: PodInfo, claim: Obj, extended: Mapping[str, int]
) -> tuple[ContainerMapping, ...]:
    """The pod's mappings to the requests an earlier attempt's claim has."""
    try:
        _, mappings = extended_requests(pod.extended_spec, extended, view.extended_classes(), pod.ref)
        names = {r.name for r in view.claim(claim).spec.requests}
    except GpuqError:
        return ()
    return tuple(m for m in mappings if m.request in names)


def implicit_claim(
    view: DraView, pod: PodInfo, resources: Iterable[str], name: str = IN_MEMORY_NAME
) -> tuple[ResourceClaim, tuple[ContainerMapping, ...]]:
    """The pod's implicit claim asking ``resources`` through DRA (named ``name``), with the
    container -> request mappings."""
    requests, mappings = extended_requests(pod.extended_spec, resources, view.extended_classes(), pod.ref)
    return extended_claim(pod.namespace, pod.name, requests, name=name), mappings


def group_rows(  # noqa: PLR0917 - the cycle's inputs, named as PreFilter holds them
    view: DraView,
    cluster: ClusterState,
    pod: PodInfo,
    claims: list[ResourceClaim],
    plan: PodPlan,
    extended: Mapping[str, int],
    name: str,
) -> tuple[tuple[ExtendedGroup, ...], npt.NDArray[np.int64], PodPlan | None]:
    """The rows by the resources no device plugin serves there (allocatable 0 or absent: upstream's
    per-node ``filterExtendedResources``): the groups, each row's group, and the plan of the group
    whose implicit claim asks the most (the attempt's main plan). ``plan``: the pod's claims'."""
    n = cluster.n
    names = sorted(extended)
    code = np.zeros(n, dtype=np.int64)
    for bit, resource in enumerate(names):
        column = cluster.columns.get(resource)
        if column is None:
            code |= 1 << bit
        else:
            code |= (cluster.allocatable[:n, column] <= 0).astype(np.int64) << bit
    allocator = view.ready_allocator()
    groups: list[ExtendedGroup] = []
    group_of = np.full(n, -1, dtype=np.int64)
    for value in np.unique(code).tolist():
        subset = [r for bit, r in enumerate(names) if value & (1 << bit)]
        if subset:
            claim, mappings = implicit_claim(view, pod, subset, name)
            group = ExtendedGroup(allocator.plan([*claims, claim], pod.uid), mappings, claim)
        else:
            group = ExtendedGroup(plan if claims else None)
        group_of[code == value] = len(groups)
        groups.append(group)
    widest = max((g for g in groups if g.claim is not None), key=lambda g: len(g.mappings), default=None)
    return tuple(groups), group_of, widest.plan if widest is not None else None


def create_writes(
    pod: PodInfo, group: ExtendedGroup, name: str, allocation: ClaimAllocation
) -> tuple[list[ApiWrite], list[ApiWrite]]:
    """The implicit claim created (owned by the pod, with the delete-protection finalizer, as
    upstream's ``bindClaim`` adds it), then its allocation and the pod in ``reservedFor``; the
    rollback deletes it (the finalizer dropped first, as upstream's ``deleteClaim``)."""
    assert group.claim is not None
    requests = [r for device_request in group.claim.spec.requests for r in device_request.alternatives]
    body = extended_claim_object(pod.namespace, pod.name, pod.uid, requests, name=name)
    body["metadata"]["finalizers"] = [FINALIZER]
    status = {"status": {"allocation": allocation.to_dict(), "reservedFor": [consumer(pod)]}}
    writes = [
        ApiWrite(kinds.RESOURCE_CLAIM, pod.namespace, name, body, verb="POST"),
        ApiWrite(
            kinds.RESOURCE_CLAIM, pod.namespace, name, status, subresource="status", merge_keys=RESERVED_FOR
        ),
    ]
    rollback = [
        ApiWrite(kinds.RESOURCE_CLAIM, pod.namespace, name, {"metadata": {"finalizers": None}}),
        ApiWrite(kinds.RESOURCE_CLAIM, pod.namespace, name, {}, verb="DELETE"),
    ]
    return writes, rollback


def pod_status_write(pod: PodInfo, name: str, mappings: tuple[ContainerMapping, ...]) -> ApiWrite:
    """``status.extendedResourceClaimStatus`` of the pod (upstream's
    ``patchPodExtendedResourceClaimStatus``), UID-checked."""
    status = {
        "resourceClaimName": name,
        "requestMappings": [
            {"containerName": m.container, "resourceName": m.resource, "requestName": m.request}
            for m in mappings
        ],
    }
    patch = {"metadata": {"uid": pod.uid}, "status": {"extendedResourceClaimStatus": status}}
    return ApiWrite(kinds.POD, pod.namespace, pod.name, patch, subresource="status", merge_keys={})


def uses_devices(handle: Handle, pod: PodInfo) -> bool:
    """Whether DRA devices may be allocated to ``pod``: it has claims, or asks an extended resource
    a DeviceClass serves (its implicit claim, where no device plugin serves it); what the quota
    plugins over devices check the pod by."""
    if pod.claim_sources:
        return True
    if not pod.extended_spec:
        return False
    classes = dra_view(handle.objects).extended_classes()
    return any(is_extended_resource_name(r) and classes.get(r) is not None for r in pod.requests)


def device_claim_keys(pod: PodInfo) -> list[str]:
    """The keys of the claims that may hold ``pod``'s devices: its claims, and its implicit claim for
    extended resources when it asks any."""
    keys = [f"{pod.namespace}/{s.claim}" for s in pod.claim_sources if s.claim]
    if pod.extended_spec:
        keys.append(f"{pod.namespace}/{extended_claim_name(pod.name, pod.uid)}")
    return keys
