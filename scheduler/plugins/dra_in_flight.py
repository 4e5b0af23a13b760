"""Allocations in flight (docs/design.md "DRA devices", "The cycle": Reserve): DynamicResources' Reserve
charges the chosen node's allocation to the view's :class:`~common.model.devices.ledger.DeviceLedger`
claim by claim, atomically (a device, a share over capacity or a counter given twice is refused and
nothing stays charged), so the next pod of a burst never gets the same devices before anything is
written; Unreserve drops them. The committed allocation replaces the in-flight entry once the watch
shows the claim's ``status.allocation`` (:mod:`scheduler.plugins.dra_view`).
"""

from __future__ import annotations

from gpuq_k8s.common.model.devices.ledger import DeviceConflict
from gpuq_k8s.common.model.devices.search import Allocation
from gpuq_k8s.scheduler.plugins.dra_attempt import DraAttempt
from gpuq_k8s.scheduler.plugins.dra_view import DraView


def reserve_in_flight(view: DraView, data: DraAttempt, allocation: Allocation) -> str | None:
    """Charge ``allocation`` in flight for the attempt (replacing what it charged before); the
    conflict's message when a device, share or counter is taken already (then nothing is charged)."""
    unreserve_in_flight(view, data)
    inventory = view.ready_allocator().inventory
    done: list[str] = []
    try:
        for key, claim_allocation in allocation.claims.items():
            view.ledger.reserve(key, claim_allocation, inventory)
            done.append(key)
    except DeviceConflict as err:
        for key in done:
            view.ledger.unreserve(key)
        return str(err)
    data.reserved = tuple(done)
    data.allocation = allocation
    return None


def unreserve_in_flight(view: DraView, data: DraAttempt) -> None:
    """Drop what the attempt charged in flight (idempotent)."""
    for key in data.reserved:
        view.ledger.unreserve(key)
    data.reserved = ()
    data.allocation = None
