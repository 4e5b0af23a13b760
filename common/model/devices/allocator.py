"""The DRA allocator: one view of the cluster (slices, DeviceClasses, the allocated state), which
prepares a pod's claims (:class:`~.plan.PodPlan`) and allocates them on a node
(:func:`~.search.allocate_on_node`, with the reasons of :mod:`.explain` when they do not fit).

It sits above :mod:`.plan` (the prepared claims, which read the allocator through
:class:`~.plan.PlanSource`) and :mod:`.search`, so the plan, the search and the explanation never
import each other in a circle.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from gpuq_k8s.common.model.devices.capacity import CapacityShortfall, consumption
from gpuq_k8s.common.model.devices.claims import ALL, ResourceClaim
from gpuq_k8s.common.model.devices.classes import DeviceClass
from gpuq_k8s.common.model.devices.device import DeviceTaint
from gpuq_k8s.common.model.devices.explain import Unfit
from gpuq_k8s.common.model.devices.ledger import DeviceLedger
from gpuq_k8s.common.model.devices.matching import SelectorCache
from gpuq_k8s.common.model.devices.plan import (
    Alternative,
    PodPlan,
    PreparedClaim,
    SliceView,
    UnknownDeviceClass,
)
from gpuq_k8s.common.model.devices.pools import Inventory
from gpuq_k8s.common.model.devices.search import Allocation, allocate_on_node
from gpuq_k8s.common.model.devices.slices import ResourceSlice
from gpuq_k8s.common.model.devices.taints import untolerated
from gpuq_k8s.common.model.nodes import NodeInfo

# Static views kept at most (request shapes x slices); a cleared cache only costs recomputation.
_MAX_VIEWS: Final = 500_000


class Allocator:
    """The pure DRA allocator over one view of the cluster: the slices (:class:`~.pools.Inventory`),
    the DeviceClasses, and the allocated state (:class:`~.ledger.DeviceLedger`)."""

    def __init__(
        self,
        inventory: Inventory,
        classes: Mapping[str, DeviceClass],
        ledger: DeviceLedger,
        cache: SelectorCache | None = None,
        share_id: Callable[[], str] | None = None,
    ) -> None:
        self.inventory = inventory
        self.classes = classes
        self.ledger = ledger
        self.cache = cache if cache is not None else SelectorCache()
        self.share_id = share_id or (lambda: str(uuid.uuid4()))
        self._views: dict[tuple[object, int], SliceView] = {}

    def prune(self, live: Iterable[ResourceSlice]) -> None:
        """Forget what was computed for slices not in ``live`` (call after slice updates)."""
        slices = list(live)
        keep = {s.serial for s in slices}
        self.cache.prune(slices)
        for key in [k for k in self._views if k[1] not in keep]:
            del self._views[key]

    def static_view(self, alternative: Alternative, s: ResourceSlice) -> SliceView:
        """The alternative's :class:`SliceView` of ``s``, computed once per request shape and slice."""
        key = (alternative.static_key, s.serial)
        found = self._views.get(key)
        if found is not None:
            return found
        request = alternative.request
        all_mode = request.mode == ALL
        mask = (1 << len(s.devices)) - 1
        rejected: dict[int, str] = {}
        errors: set[int] = set()
        for origin, selector in alternative.selectors:
            # Selectors apply in order (class first): a device an earlier selector refused is not
            # evaluated further upstream, so a later selector's error on it does not count.
            one, failed = self.cache.one(selector, s)
            for index in range(len(s.devices)):
                if mask >> index & 1 and not one >> index & 1:
                    if index in failed:
                        rejected[index] = f"{origin}: {failed[index]}"
                        errors.add(index)
                    else:
                        rejected[index] = f"{origin} false"
            mask &= one
        usable: dict[int, tuple[Mapping[str, int], DeviceTaint | None]] = {}
        for index, device in enumerate(s.devices):
            if index in rejected:
                continue
            taken = consumption(request.capacity, device.capacity)
            if isinstance(taken, CapacityShortfall):
                rejected[index] = taken.message
                continue
            taint = untolerated(device.taints, request.tolerations)
            if taint is not None and not all_mode:
                rejected[index] = f"taint {taint.key}={taint.value}:{taint.effect} not tolerated"
                continue
            usable[index] = (taken, taint)
        if len(self._views) >= _MAX_VIEWS:
            self._views.clear()
        view = self._views[key] = SliceView(usable, rejected, frozenset(errors))
        return view

    def plan(self, claims: Sequence[ResourceClaim], pod_uid: str = "") -> PodPlan:
        """Prepare ``claims`` (a pod's, in its order) for allocation; :class:`UnknownDeviceClass`
        when a class is missing."""
        to_allocate: list[PreparedClaim] = []
        allocated: list[ResourceClaim] = []
        waiting = None
        for claim in claims:
            if claim.allocation is not None:
                if not claim.can_be_reserved() and not claim.reserved_for_pod(pod_uid):
                    waiting = waiting or f"{claim.ref} is in use by {len(claim.reserved_for)} consumers"
                allocated.append(claim)
                continue
            if self.ledger.in_flight(claim.key):
                waiting = waiting or f"{claim.ref} is in the process of being allocated"
                continue
            requests = []
            for device_request in claim.spec.requests:
                alternatives = []
                for request in device_request.alternatives:
                    device_class = self.classes.get(request.class_name)
                    if device_class is None:
                        raise UnknownDeviceClass(claim.ref, request.name, request.class_name)
                    selectors = tuple(
                        (f"{device_class.ref} selector #{i}", sel)
                        for i, sel in enumerate(device_class.selectors)
                    ) + tuple(
                        (f"request {request.name} selector #{i}", sel)
                        for i, sel in enumerate(request.selectors)
                    )
                    alternatives.append(Alternative(request, device_class, selectors))
                requests.append(tuple(alternatives))
            to_allocate.append(PreparedClaim(claim, tuple(requests)))
        return PodPlan(self, pod_uid, tuple(to_allocate), tuple(allocated), waiting)

    def allocate(self, plan: PodPlan, node: NodeInfo) -> Allocation | Unfit:
        """An :class:`~.search.Allocation` for every claim of ``plan`` to allocate on ``node``, or an
        :class:`~.explain.Unfit` with the reasons."""
        return allocate_on_node(plan, node)
