"""The device charges of the allocated DRA claims an object store holds, for every quota plugin
(docs/design.md "Quota over devices"; the model is :mod:`common.model.devices.charges`).

One :class:`DeviceCharges` per store (``objects.shared``) follows the ResourceClaims: each claim whose
``status.allocation`` is set has a :class:`~common.model.devices.charges.ClaimCharge` and the pods of
its ``status.reservedFor``; the quota plugins subscribe and charge it to their own ledgers (the
capacity-card Queue, the GPUResourceQuota namespace, the ElasticQuota), and refund it when the
allocation goes. A charge reads the devices' ResourceSlices, so when slices change (a driver
republishes, or the slices arrive after the claims when the informers start) the charges are
recomputed at the next :meth:`DeviceCharges.refresh`, which the plugins call before deciding.
Charges made at Reserve for a pod's new allocations (:func:`in_flight_charges`) are the plugins'
own until the API shows the allocation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.devices.allocator import Allocator
from gpuq_k8s.common.model.devices.charges import ClaimCharge, claim_charge, narrowed
from gpuq_k8s.common.model.devices.claims import Request, ResourceClaim
from gpuq_k8s.common.model.devices.class_mapping import mapped_requests
from gpuq_k8s.common.model.devices.classes import DeviceClass
from gpuq_k8s.common.model.devices.plan import Alternative, PodPlan
from gpuq_k8s.common.model.devices.quota import DEFAULT_NAMING, DeviceNaming
from gpuq_k8s.common.model.devices.reservation import pod_claims
from gpuq_k8s.common.model.devices.search import Allocation
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.resources import EMPTY, Resources
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import BoolArray, Handle, ReasonMasks
from gpuq_k8s.scheduler.plugins.dra_attempt import (
    allocation_on,
    claims_to_allocate,
    found_allocations,
    planned,
    reallocate,
)
from gpuq_k8s.scheduler.plugins.dra_view import DraView, dra_view


@dataclass(frozen=True, slots=True)
class Committed:
    """An allocated claim as the API shows it: its charge and the pods it is reserved for
    (``namespace/name``, in ``reservedFor`` order)."""

    charge: ClaimCharge
    consumers: tuple[str, ...]


# (claim key, the committed claim or None when its allocation is gone)
ChargeListener = Callable[[str, Committed | None], None]


class DeviceCharges:
    def __init__(self, objects: ObjectStore) -> None:
        self._objects = objects
        self.view: DraView = dra_view(objects)
        self.naming: Mapping[str, DeviceNaming] = DEFAULT_NAMING
        self.committed: dict[str, Committed] = {}
        self._listeners: list[ChargeListener] = []
        self._stale = False
        for namespace, name, obj in list(objects.list(kinds.RESOURCE_CLAIM)):
            self._apply(kinds.RESOURCE_CLAIM, namespace, name, obj)
        objects.subscribe(self._apply)

    def subscribe(self, listener: ChargeListener) -> None:
        """``listener`` hears every change from now on, after being told every committed claim."""
        self._listeners.append(listener)
        for key, committed in list(self.committed.items()):
            listener(key, committed)

    def _apply(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        if kind is kinds.RESOURCE_SLICE:
            self._stale = bool(self.committed) or self._stale
            return
        if kind is not kinds.RESOURCE_CLAIM:
            return
        key = f"{namespace}/{name}"
        claim = None
        if obj is not None:
            try:
                claim = self.view.claim(obj)
            except GpuqError:
                claim = None  # unreadable: DraView reports it; its devices are not charged
        self._set(key, claim)

    def _set(self, key: str, claim: ResourceClaim | None) -> None:
        if claim is None or claim.allocation is None:
            if self.committed.pop(key, None) is not None:
                self._tell(key, None)
            return
        committed = Committed(
            claim_charge(claim, claim.allocation, self.view.inventory, self.naming),
            tuple(f"{claim.namespace}/{c.name}" for c in claim.reserved_for if c.resource == "pods"),
        )
        if self.committed.get(key) != committed:
            self.committed[key] = committed
            self._tell(key, committed)

    def _tell(self, key: str, committed: Committed | None) -> None:
        for listener in self._listeners:
            listener(key, committed)

    def refresh(self) -> None:
        """Recompute the charges after slice changes (a device's card type, capacity or presence)."""
        if not self._stale:
            return
        self._stale = False
        for key in list(self.committed):
            namespace, _, name = key.partition("/")
            obj = self._objects.get(kinds.RESOURCE_CLAIM, namespace, name)
            try:
                claim = self.view.claim(obj) if obj is not None else None
            except GpuqError:
                claim = None
            self._set(key, claim)

    def set_naming(self, naming: Mapping[str, DeviceNaming]) -> None:
        """The configured device naming (capacity-card's ``deviceNaming``); the charges follow."""
        if dict(naming) == dict(self.naming):
            return
        self.naming = dict(naming)
        self._stale = bool(self.committed)
        self.refresh()

    def is_committed(self, key: str) -> bool:
        """Whether the API shows claim ``key`` allocated."""
        return key in self.committed


def device_charges(objects: ObjectStore) -> DeviceCharges:
    """The store's one :class:`DeviceCharges`."""
    return objects.shared(DeviceCharges)


def in_flight_charges(
    state: CycleState, handle: Handle, row: int, charges: DeviceCharges
) -> dict[str, ClaimCharge] | None:
    """The charges of the claims this attempt allocates on node row ``row``, by claim key, as the
    DynamicResources plugin allocates them there (the same devices its Reserve takes); None for a pod
    without claims to allocate or a row that cannot take them. Claims allocated already are charged
    as committed, never again."""
    allocation = allocation_on(state, handle, row)
    if allocation is None:
        return None
    claims = claims_to_allocate(state, row)
    inventory = charges.view.inventory
    out: dict[str, ClaimCharge] = {}
    for key, claim_allocation in allocation.claims.items():
        claim = claims.get(key)
        if claim is not None:
            out[key] = claim_charge(claim, claim_allocation, inventory, charges.naming)
    return out


# What a quota plugin refuses an allocation for (its refusal), or None when it fits.
Verdict = TypeVar("Verdict")


def with_fallback(
    state: CycleState,
    handle: Handle,
    row: int,
    charges: DeviceCharges,
    *,
    check: Callable[[dict[str, ClaimCharge]], Verdict | None],
    passed_over: Callable[[Verdict, PodPlan, Allocation], Mapping[str, Collection[str]]],
) -> tuple[Verdict | None, dict[str, ClaimCharge]]:
    """``check`` of the charges the pod's claims make on node row ``row`` (:func:`in_flight_charges`),
    and those charges. A refused allocation that took ``firstAvailable`` subrequests is allocated
    again on that row without the subrequests ``passed_over`` names (claim key -> subrequest names,
    such as ``gpu/h100``: :func:`~common.model.devices.charges.narrowed`), the next ones tried as the
    allocator tries them, until one fits or none is left: the DRA form of capacity-card's ``A|B``,
    for every quota over devices. The row keeps the narrowed plan and its allocation
    (:func:`~scheduler.plugins.dra_attempt.reallocate`), so the next quota plugin checks the
    same devices and Reserve takes them."""
    current = in_flight_charges(state, handle, row, charges) or {}
    verdict = check(current)
    while verdict is not None:
        plan = planned(state, row)
        allocation = allocation_on(state, handle, row)
        if plan is None or allocation is None:
            break
        plan = narrowed(plan, passed_over(verdict, plan, allocation))
        if plan is None or reallocate(state, handle, row, plan) is None:
            break
        current = in_flight_charges(state, handle, row, charges) or {}
        verdict = check(current)
    return verdict, current


def refused_rows(
    state: CycleState, n: int, charges: DeviceCharges, refusal_on: Callable[[int], str | None]
) -> tuple[BoolArray, ReasonMasks] | None:
    """A quota plugin's Filter over devices: of the rows where DynamicResources' Filter found an
    allocation, those ``refusal_on(row)`` refuses (its message; None: the row fits), with one reason
    mask per message; None when no row is refused. The charges are refreshed first."""
    found = found_allocations(state)
    if not found:
        return None
    charges.refresh()
    rejected = np.zeros(n, dtype=np.bool_)
    by_message: dict[str, BoolArray] = {}
    for row in list(found):
        if row >= n:
            continue
        message = refusal_on(row)
        if message is not None:
            rejected[row] = True
            by_message.setdefault(message, np.zeros(n, dtype=np.bool_))[row] = True
    if not rejected.any():
        return None
    return rejected, [(mask, message) for message, mask in by_message.items()]


_MAX_MEMO = 65536


class ClassRequests:
    """A plugin's view of pods with their DRA claims counted as mapped resources
    (:mod:`common.model.devices.class_mapping`): :meth:`pod` is the pod with those added to its
    requests, the pod itself when nothing maps (no mapping, no claim, a claim not made yet)."""

    def __init__(self, handle: Handle, mapping: Mapping[str, str]) -> None:
        self.handle = handle
        self.mapping = dict(mapping)
        self.resources = frozenset(self.mapping.values())
        self._memo: dict[tuple[str, str, tuple[object, ...]], Resources] = {}
        self._totals: tuple[object, Resources] | None = None
        self._extended_totals: tuple[object, list[tuple[str, DeviceClass]], Resources] | None = None

    def extra(self, pod: PodInfo) -> Resources:
        if not self.mapping or not pod.claim_sources:
            return EMPTY
        key = (pod.key, pod.uid, pod.claim_sources)
        found = self._memo.get(key)
        if found is not None:
            return found
        objects = self.handle.objects
        claims = pod_claims(pod, lambda namespace, name: objects.get(kinds.RESOURCE_CLAIM, namespace, name))
        if claims.problem:
            return EMPTY  # not made yet: counted once it is (the pod's update brings it)
        view = dra_view(objects)
        parsed = []
        for obj in claims.claims:
            try:
                parsed.append(view.claim(obj))
            except GpuqError:
                continue
        found = Resources(mapped_requests(parsed, self.mapping))
        if len(self._memo) >= _MAX_MEMO:
            self._memo.clear()
        self._memo[key] = found
        return found

    def forget(self, pod: PodInfo) -> None:
        """Compute ``pod``'s mapped claims again at the next :meth:`extra` (a claim changed)."""
        self._memo.pop((pod.key, pod.uid, pod.claim_sources), None)

    def pod(self, pod: PodInfo) -> PodInfo:
        extra = self.extra(pod)
        return dataclasses.replace(pod, requests=pod.requests + extra) if extra else pod

    def totals(self) -> Resources:
        """The devices the published slices hold of each mapped DeviceClass, as mapped resources
        (milli-units): what a Queue's share of them is computed from (proportion's cluster total)."""
        if not self.mapping:
            return EMPTY
        view = dra_view(self.handle.objects)
        allocator = view.ready_allocator()
        if self._totals is not None and self._totals[0] is allocator.inventory:
            return self._totals[1]
        counts: dict[str, int] = {}
        for class_name, resource in sorted(self.mapping.items()):
            device_class = view.classes.get(class_name)
            if device_class is not None:
                counts[resource] = counts.get(resource, 0) + 1000 * _class_devices(allocator, device_class)
        found = Resources(counts)
        self._totals = (allocator.inventory, found)
        return found

    def extended_totals(self) -> Resources:
        """The devices of the DeviceClass serving each extended resource (``extendedResourceName`` or
        its implicit name) as that resource (milli-units), on the nodes with none of it allocatable,
        where DRA serves it (a node's device plugin counts through its allocatable): the cluster's
        total of a resource pods ask and DRA serves (proportion's). Recomputed when the slices or the
        classes change."""
        view = dra_view(self.handle.objects)
        allocator = view.ready_allocator()
        served = view.extended_classes().served()
        kept = self._extended_totals
        if (
            kept is not None
            and kept[0] is allocator.inventory
            and len(kept[1]) == len(served)
            and all(a[0] == b[0] and a[1] is b[1] for a, b in zip(kept[1], served, strict=True))
        ):
            return kept[2]  # the same slices, the same classes (a claim's change moves neither)
        cluster = self.handle.cluster
        counts: dict[str, int] = {}
        for resource, device_class in served:
            column = cluster.columns.get(resource)

            def plugin_serves(node: str, column: int | None = column) -> bool:
                row = cluster.row_of.get(node)
                return column is not None and row is not None and cluster.allocatable[row, column] > 0

            found = _class_devices(allocator, device_class, plugin_serves)
            if found:
                counts[resource] = 1000 * found
        totals = Resources(counts)
        self._extended_totals = (allocator.inventory, served, totals)
        return totals


def _class_devices(
    allocator: Allocator, device_class: DeviceClass, skip_node: Callable[[str], bool] | None = None
) -> int:
    """How many devices the published slices hold of ``device_class`` (its selectors, complete and
    valid pools), leaving out the slices of the nodes ``skip_node`` names."""
    selectors = tuple((f"{device_class.ref} selector #{i}", s) for i, s in enumerate(device_class.selectors))
    alternative = Alternative(Request("count", device_class.name), device_class, selectors)
    count = 0
    for pool in allocator.inventory.pools.values():
        if not pool.complete or pool.invalid:
            continue
        for s in pool.device_slices:
            if skip_node is not None and s.node_name and skip_node(s.node_name):
                continue
            count += len(allocator.static_view(alternative, s).usable)
    return count
