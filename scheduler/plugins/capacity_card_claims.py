"""The capacity-card plugin's DRA part: a pod's devices count against its Queue's card quota under
their card type (docs/design.md "Quota over devices"; the charges from
:mod:`scheduler.plugins.device_charges`).

* Filter: on the rows where DynamicResources' Filter found an allocation, the new claims' card types
  must fit the queue's card quota (``allocated + asked <= quota`` per card type), else the row is
  rejected with the quota refusal (the quota, the card type and the amounts).
* Reserve: the allocation DynamicResources takes on the chosen row (the same devices, whichever
  plugin reserves first) is checked again and charged, claim by claim, atomically with it; a refusal
  fails Reserve, which unreserves the devices. Unreserve refunds the claims whose allocation the API
  does not show (a failed binding's allocation stays, as upstream leaves it, and so does its charge).
* The committed claims (``status.allocation``, after a restart the informers' replay) are charged to
  the queue of the first pod of ``status.reservedFor`` this plugin knows, when it becomes known.
* A pending pod's claims still to allocate are its card demand (the job-mode enqueue check): computed
  when the pod becomes known or changes, and again after the DeviceClasses, ResourceSlices, its
  claims or its Queue changed (:mod:`scheduler.plugins.device_demand`), before the next decision.

A claim is charged once, whatever number of pods share it; ``adminAccess`` devices are never charged;
a ``firstAvailable`` claim is charged the card type actually allocated.
"""

from __future__ import annotations

from typing import Final

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.capacity_card.engine import CapacityCard
from gpuq_k8s.common.model.devices.charges import (
    Candidates,
    ClaimCharge,
    candidates,
    pending_cards,
    result_card_types,
)
from gpuq_k8s.common.model.devices.charges import total as total_charge
from gpuq_k8s.common.model.devices.extended import extended_claim_name
from gpuq_k8s.common.model.devices.plan import Alternative, PodPlan
from gpuq_k8s.common.model.devices.reservation import pod_claims
from gpuq_k8s.common.model.devices.search import Allocation
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quota_exceeded import QuotaExceeded
from gpuq_k8s.common.model.refusal import Refusal
from gpuq_k8s.common.model.resources import EMPTY, Resources
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import BoolArray, Handle, ReasonMasks
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.plugins.device_charges import (
    Committed,
    device_charges,
    refused_rows,
    with_fallback,
)
from gpuq_k8s.scheduler.plugins.device_demand import StaleDemand
from gpuq_k8s.scheduler.plugins.dra_extended import extended_resources, implicit_claim, uses_devices

_MAX_SHAPES: Final = 256


def cards_of(charges: dict[str, ClaimCharge]) -> Resources:
    """Milli-cards per card type of several claims' charges."""
    return Resources(dict(total_charge(charges.values()).cards))


class QueueClaims:
    def __init__(self, handle: Handle, engine: CapacityCard) -> None:
        self.handle = handle
        self.engine = engine
        self.charges = device_charges(handle.objects)
        self._in_flight: dict[str, tuple[str, ...]] = {}  # pod key -> claims its Reserve charged
        self._unpaid: dict[str, set[str]] = {}  # pod key -> committed claims waiting for it
        self._types: dict[tuple[object, ...], Candidates] = {}  # request shape -> its candidates
        self._types_inventory: object = None
        self.charges.subscribe(self._committed)
        # The pending pods whose card demand is out of date (a Queue made later governs its pods).
        self.stale = StaleDemand(handle, also=frozenset({kinds.QUEUE}))

    # -- committed claims ---------------------------------------------------------------------------
    def _committed(self, key: str, committed: Committed | None) -> None:
        if committed is None:
            for waiting in self._unpaid.values():
                waiting.discard(key)
            if not any(key in keys for keys in self._in_flight.values()):
                self.engine.refund_claim(key)
            return
        for pod_key, keys in list(self._in_flight.items()):
            if key in keys:  # the API shows it: no longer the Reserve's to refund
                rest = tuple(k for k in keys if k != key)
                if rest:
                    self._in_flight[pod_key] = rest
                else:
                    del self._in_flight[pod_key]
        queue = self.engine.claim_queue(key)
        if queue is None:
            for pod_key in committed.consumers:
                pod = self.engine.tracked_pod(pod_key)
                if pod is not None:
                    queue = self.engine.queue_of(pod)
                    break
        if queue is None:
            for pod_key in committed.consumers:
                self._unpaid.setdefault(pod_key, set()).add(key)
            return
        self.engine.charge_claim(key, queue, Resources(dict(committed.charge.cards)))

    def pod_known(self, pod: PodInfo) -> None:
        """A pod the engine now tracks: a pending one's claims still to allocate (its implicit claim
        for extended resources a DeviceClass serves among them, asked as where no device plugin
        serves them) become its card demand (the job-mode enqueue check), and the committed claims
        waiting for their payer are charged."""
        if pod.node_name:
            self.stale.forget(pod.key)
        else:
            self.stale.track(pod)
            self._set_demand(pod)
        if not self._unpaid:
            return
        waiting = self._unpaid.pop(pod.key, None)
        if not waiting:
            return
        queue = self.engine.queue_of(pod)
        for key in sorted(waiting):
            committed = self.charges.committed.get(key)
            if committed is not None and self.engine.claim_queue(key) is None:
                self.engine.charge_claim(key, queue, Resources(dict(committed.charge.cards)))

    def pod_gone(self, pod_key: str) -> None:
        self.stale.forget(pod_key)

    def refresh_demand(self) -> None:
        """The card demand of the pending pods whose DeviceClasses, slices, claims or Queue changed
        since it was computed (:class:`~scheduler.plugins.device_demand.StaleDemand`)."""
        for pod in self.stale.take():
            self._set_demand(pod)

    def _set_demand(self, pod: PodInfo) -> None:
        governed = uses_devices(self.handle, pod) and self._governed(pod)
        self.engine.set_device_demand(pod.key, self._pending_demand(pod) if governed else EMPTY)

    def _pending_demand(self, pod: PodInfo) -> Resources:
        objects = self.handle.objects
        found = pod_claims(pod, lambda namespace, name: objects.get(kinds.RESOURCE_CLAIM, namespace, name))
        if found.problem:
            return EMPTY  # a template's claim not made yet: charged when allocated
        view = self.charges.view
        try:
            claims = [view.claim(obj) for obj in found.claims]
            extended = extended_resources(view, pod)
            if extended:
                # Its implicit claim: an earlier attempt's (allocated: charged already), else the
                # claim the pod gets where no device plugin serves them, as DynamicResources asks it.
                name = extended_claim_name(pod.name, pod.uid)
                made = objects.get(kinds.RESOURCE_CLAIM, pod.namespace, name)
                claims.append(
                    view.claim(made) if made is not None else implicit_claim(view, pod, extended)[0]
                )
            if not claims:
                return EMPTY
            plan = view.ready_allocator().plan(claims, pod.uid)
        except GpuqError:
            return EMPTY  # a missing class or a malformed claim: DynamicResources reports it
        return Resources(pending_cards(plan, self._candidates_of))

    def _candidates_of(self, alternative: Alternative) -> Candidates:
        """:func:`candidates`, kept per request shape while the inventory stands."""
        allocator = self.charges.view.ready_allocator()
        if allocator.inventory is not self._types_inventory:
            self._types.clear()
            self._types_inventory = allocator.inventory
        key = alternative.static_key
        found = self._types.get(key)
        if found is None:
            if len(self._types) >= _MAX_SHAPES:
                self._types.clear()
            found = self._types[key] = candidates(alternative, allocator, self.charges.naming)
        return found

    # -- the cycle ----------------------------------------------------------------------------------
    def refusal(
        self, state: CycleState, pod: PodInfo, row: int
    ) -> tuple[Refusal | None, dict[str, ClaimCharge]]:
        """Whether the devices the pod's claims get on ``row`` fit its queue's card quota, and their
        charges. A refused card type allocated for a ``firstAvailable`` subrequest is passed over for
        the next subrequest (capacity-card's ``A|B``), and the row's allocation replaced."""
        inventory = self.charges.view.inventory

        def check(charges: dict[str, ClaimCharge]) -> Refusal | None:
            cards = cards_of(charges)
            return self.engine.device_refusal(pod, cards) if cards else None

        def passed_over(refusal: Refusal, _plan: PodPlan, allocation: Allocation) -> dict[str, set[str]]:
            if not isinstance(refusal.error, QuotaExceeded):
                return {}
            drop: dict[str, set[str]] = {}
            for key, claim_allocation in allocation.claims.items():
                for request, card in result_card_types(claim_allocation, inventory, self.charges.naming):
                    if card == refusal.error.resource:
                        drop.setdefault(key, set()).add(request)
            return drop

        return with_fallback(state, self.handle, row, self.charges, check=check, passed_over=passed_over)

    def filter_rows(self, state: CycleState, pod: PodInfo, n: int) -> tuple[BoolArray, ReasonMasks] | None:
        """The rows (of those DynamicResources' Filter found an allocation for) whose new devices do
        not fit the pod's queue's card quota, with the refusals; None when none is refused."""

        def refusal_on(row: int) -> str | None:
            refusal, _ = self.refusal(state, pod, row)
            return refusal.message if refusal is not None else None

        return refused_rows(state, n, self.charges, refusal_on)

    def _governed(self, pod: PodInfo) -> bool:
        """The pod's Queue exists (Semantics 7: a pod of no Queue has no queue quota; its claims are
        charged once the API shows them allocated, for a Queue made later)."""
        return self.engine.queue_of(pod) in self.engine.quotas

    def reserve(self, state: CycleState, pod: PodInfo, row: int) -> Status:
        if not uses_devices(self.handle, pod) or not self._governed(pod):
            return Status.success()
        self.charges.refresh()
        self.unreserve(pod)
        refusal, charges = self.refusal(state, pod, row)
        if refusal is not None:
            return Status.unschedulable(refusal.message)
        queue = self.engine.queue_of(pod)
        for key, charge in charges.items():
            self.engine.charge_claim(key, queue, Resources(dict(charge.cards)))
        if charges:
            self._in_flight[pod.key] = tuple(charges)
        return Status.success()

    def unreserve(self, pod: PodInfo) -> None:
        for key in self._in_flight.pop(pod.key, ()):
            if not self.charges.is_committed(key):
                self.engine.refund_claim(key)
