"""One scheduling attempt's DRA state (:class:`DraAttempt`, in the CycleState), and what the quota
plugins over devices read and change of it (docs/design.md "Quota over devices", "When"): the
allocation the pod's claims get on a node row, the same devices whichever plugin reserves first.

DynamicResources (:mod:`scheduler.plugins.dynamic_resources`) writes it in PreFilter (the claims and
their plan), fills it in Filter (the allocation or the device-by-device reasons per searched row) and
Reserve (what it charged to the ledger in flight, :mod:`scheduler.plugins.dra_in_flight`), and reads it
in PreBind (:mod:`scheduler.plugins.dra_prebind`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.devices.claims import ResourceClaim
from gpuq_k8s.common.model.devices.explain import Unfit
from gpuq_k8s.common.model.devices.plan import PodPlan
from gpuq_k8s.common.model.devices.search import Allocation
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import Handle
from gpuq_k8s.scheduler.plugins.dra_extended import ExtendedClaim, ExtendedGroup
from gpuq_k8s.scheduler.plugins.dra_view import dra_view

ATTEMPT: Final = f"{plugin_names.DYNAMIC_RESOURCES}/state"
EVERY_ROW: Final = f"{plugin_names.DYNAMIC_RESOURCES}/allocateEveryRow"


@dataclass(slots=True)
class DraAttempt:
    """One attempt: the claims as read in PreFilter, the plan, what Filter found per row, and what
    Reserve charged."""

    claims: tuple[Obj, ...]
    plan: PodPlan
    found: dict[int, Allocation] = field(default_factory=dict)
    unfit: dict[int, Unfit] = field(default_factory=dict)
    reserved: tuple[str, ...] = ()
    allocation: Allocation | None = None
    # A pod asking extended resources a DeviceClass serves (extended.py): the rows grouped by the
    # plan they get (the resources no device plugin serves there make its implicit claim; a group
    # without a plan has nothing to allocate), and the implicit claim to create at PreBind.
    groups: tuple[ExtendedGroup, ...] = ()
    group_of: npt.NDArray[np.int64] | None = None
    extended: ExtendedClaim | None = None
    # Per row, the row's plan narrowed by the quota plugins (``firstAvailable`` subrequests passed
    # over: :func:`reallocate`); its allocation is the row's in ``found``.
    narrowed: dict[int, PodPlan] = field(default_factory=dict)

    def group_plan(self, row: int) -> PodPlan | None:
        if self.group_of is None:
            return self.plan
        if row >= len(self.group_of) or self.group_of[row] < 0:
            return None
        return self.groups[int(self.group_of[row])].plan

    def group_at(self, row: int) -> ExtendedGroup | None:
        """The extended-resource group of node row ``row`` (None without groups)."""
        if self.group_of is None or row >= len(self.group_of):
            return None
        return self.groups[int(self.group_of[row])]

    def plan_for(self, row: int) -> PodPlan | None:
        """The plan the row's devices are allocated by: its group's, as the quota plugins narrowed it."""
        narrowed = self.narrowed.get(row)
        return narrowed if narrowed is not None else self.group_plan(row)


def attempt_of(state: CycleState) -> DraAttempt | None:
    """This attempt's DRA state; None for a pod without claims to allocate (or before PreFilter)."""
    return state.read(ATTEMPT, DraAttempt)


# -- for the quota plugins (docs/design.md "Quota over devices") --------------------------------------
def allocate_every_row(state: CycleState) -> None:
    """A quota plugin over devices checks the allocation on every row Filter passes (its card type
    and amounts; a ``firstAvailable`` fallback when the first choice's quota is spent): for this pod
    the per-row counts only reject rows, the rest are searched, so each passed row has its
    allocation in :func:`found_allocations`."""
    state.write(EVERY_ROW, True)


def found_allocations(state: CycleState) -> Mapping[int, Allocation]:
    """The allocations this attempt's Filter found per node row (the searched rows; rows the per-row
    counts decided have none until :func:`allocation_on` computes theirs). Empty for a pod without
    claims to allocate, or before DynamicResources' Filter ran."""
    data = attempt_of(state)
    return data.found if data is not None else {}


def claims_to_allocate(state: CycleState, row: int | None = None) -> Mapping[str, ResourceClaim]:
    """The claims this attempt allocates (not allocated yet), by claim key: on node row ``row``
    (a pod's implicit claim for the extended resources DRA serves there), else the main plan's (the
    implicit claim as asked where no device plugin serves any of them)."""
    data = attempt_of(state)
    if data is None:
        return {}
    plan = data.plan if row is None else data.plan_for(row)
    return {prepared.claim.key: prepared.claim for prepared in plan.to_allocate} if plan is not None else {}


def allocation_on(state: CycleState, handle: Handle, row: int) -> Allocation | None:
    """The allocation the pod's claims get on node row ``row`` in this attempt: the one Reserve charged,
    else the one Filter found, else computed now and kept, so that DynamicResources' Reserve takes the
    very same devices whichever of the plugins reserves first. None for a pod without claims to
    allocate, or a row that cannot take them."""
    data = attempt_of(state)
    if data is None:
        return None
    node = handle.cluster.nodes[row] if row < handle.cluster.n else None
    if node is None:
        return None
    if data.allocation is not None and data.allocation.node == node.name:
        return data.allocation
    plan = data.plan_for(row)
    if plan is None:
        return None
    found = data.found.get(row)
    if found is None:
        answer = dra_view(handle.objects).ready_allocator().allocate(plan, node)
        if isinstance(answer, Unfit):
            return None
        found = data.found[row] = answer
    return found


def reallocate(state: CycleState, handle: Handle, row: int, plan: PodPlan) -> Allocation | None:
    """Allocate ``plan`` (node row ``row``'s plan, :func:`planned`, narrowed by a quota plugin:
    ``firstAvailable`` subrequests passed over) there and keep both as the row's, for the other
    quota plugins (which narrow it further, never back) and for Reserve. None when it does not fit
    there, or when Reserve already charged another allocation (the ledger holds it: it is not
    replaced)."""
    data = attempt_of(state)
    node = handle.cluster.nodes[row] if row < handle.cluster.n else None
    if data is None or node is None or data.allocation is not None:
        return None
    answer = dra_view(handle.objects).ready_allocator().allocate(plan, node)
    if isinstance(answer, Unfit):
        return None
    data.found[row] = answer
    data.narrowed[row] = plan
    return answer


def planned(state: CycleState, row: int) -> PodPlan | None:
    """The plan of this attempt's claims on node row ``row`` (its extended-resource group's, as the
    quota plugins narrowed it), None for a pod without claims to allocate there."""
    data = attempt_of(state)
    return data.plan_for(row) if data is not None else None
