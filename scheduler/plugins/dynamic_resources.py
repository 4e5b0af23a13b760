"""DynamicResources (kube-scheduler's plugin of that name, 1.36): a pod's ResourceClaims are allocated
from the devices ResourceSlices publish, by the pure allocator of :mod:`common.model.devices`
(docs/design.md "DRA devices"), and written before the pod is bound.

* PreFilter: the pod's claims (:func:`~common.model.devices.reservation.pod_claims`: a template's claim
  not generated yet by kube-controller-manager, a claim missing, being deleted or owned by another pod
  keep it pending, UnschedulableAndUnresolvable, with kube-scheduler's message), prepared once
  (``Allocator.plan``: a request naming a DeviceClass that does not exist, a claim in use by 256
  consumers, or one another pod has in flight, keep it pending); a pod without claims is skipped,
  unless it asks an extended resource a DeviceClass serves: then the node rows are grouped by the
  resources no device plugin serves there, each group planned with the pod's implicit claim for
  those (:mod:`scheduler.plugins.dra_extended`), which PreBind creates before its allocation.
* Filter, per node row: first the per-row counts of free whole devices per request shape
  (:meth:`~scheduler.plugins.dra_view.DraView.free_counts`), which reject the rows the search would
  reject and, for one request of whole devices, accept the rows it would accept
  (:mod:`common.model.devices.bounds`); every other row gets the allocation of every claim still to
  allocate on that node (first fit with backtracking), kept for Reserve, and an allocated claim fits
  only where its node selector allows. A node that cannot take them is reported as ``cannot allocate
  all claims`` (or ``resourceclaim not available on the node``), kube-scheduler's reasons; the
  per-device reasons are kept for explanations (:meth:`DynamicResources.unfit`).
* Reserve: the chosen node's allocations are charged to the ledger *in flight*, atomically (a device,
  a share over capacity or a counter given twice is refused), so the next pod of the burst never gets
  the same device; Unreserve drops them.
* PreBind (:mod:`common.model.devices.reservation`): the claim's delete-protection finalizer, then its
  ``status.allocation`` and the pod in ``status.reservedFor``, before the pod's binding, through the
  leader-gated client; the backend waits until the caches show them. A failed binding takes the
  reservation back (the rollback writes).

The ledger follows the claims as the informers show them (:mod:`scheduler.plugins.dra_view`): when the
watch shows an allocation, it replaces the in-flight entry; after a restart or a leader's re-list the
replayed claims rebuild it. Pods rejected here are retried on DeviceClass, ResourceSlice and
ResourceClaim events (a claim event only for the pods using the claim, or when it freed devices: its
allocation gone), on new or relabelled nodes, and on their own update (kube-controller-manager's
``status.resourceClaimStatuses``, scheduler/kube/feed.py).

A member of ``predicates`` switched by ``predicate.DynamicResourceAllocationEnable`` (false: pods with
claims are placed as if they had none, and no device is allocated for them). A configuration without a
``predicates`` entry gets it all the same (``with_safety_rules`` in scheduler/plugins/members.py): a
pod bound without its devices would never start.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.devices.bounds import count_bound
from gpuq_k8s.common.model.devices.claims import ResourceClaim
from gpuq_k8s.common.model.devices.explain import Unfit
from gpuq_k8s.common.model.devices.extended import (
    extended_claim_name,
)
from gpuq_k8s.common.model.devices.ledger import DeviceConflict
from gpuq_k8s.common.model.devices.plan import PodPlan, UnknownDeviceClass
from gpuq_k8s.common.model.devices.reservation import (
    RESERVING,
    is_reserved_for,
    owned_by,
    pod_claims,
    reservation_writes,
    reserved,
    rollback_writes,
)
from gpuq_k8s.common.model.devices.results import ClaimAllocation
from gpuq_k8s.common.model.devices.search import Allocation
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.prebind import ApiWrite, Lookup, PreBindPlan, Progress
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    FilterPlugin,
    FilterResult,
    Handle,
    PreBindPlugin,
    PreFilterPlugin,
    ReservePlugin,
)
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.plugins.dra_extended import (
    ExtendedClaim,
    ExtendedGroup,
    create_writes,
    device_claim_keys,
    existing_mappings,
    extended_resources,
    group_rows,
    pod_status_write,
    uses_devices,
)
from gpuq_k8s.scheduler.plugins.dra_view import DraView, dra_view

_STATE: Final = f"{plugin_names.DYNAMIC_RESOURCES}/state"
CANNOT_ALLOCATE: Final = "cannot allocate all claims"
NOT_AVAILABLE: Final = "resourceclaim not available on the node"
PRE_BIND_TIMEOUT_SECONDS: Final = 60.0  # the writes are answered at once; this bounds the watch's lag


@dataclass(slots=True)
class _State:
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

    def plan_for(self, row: int) -> PodPlan | None:
        """The plan the row's devices are allocated by: its group's, as the quota plugins narrowed it."""
        narrowed = self.narrowed.get(row)
        return narrowed if narrowed is not None else self.group_plan(row)


def _claim_of(obj: object) -> tuple[str, str] | None:
    if not isinstance(obj, Mapping):
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _allocated(obj: object) -> bool:
    if not isinstance(obj, Mapping):
        return False
    status = obj.get("status")
    return isinstance(status, Mapping) and status.get("allocation") is not None


class DynamicResources(PreFilterPlugin, FilterPlugin, ReservePlugin, PreBindPlugin):
    name = plugin_names.DYNAMIC_RESOURCES
    events = frozenset(
        {
            ClusterEvent.DEVICE_CLASS_CHANGED,
            ClusterEvent.RESOURCE_SLICE_CHANGED,
            ClusterEvent.RESOURCE_CLAIM_CHANGED,
            ClusterEvent.NODE_ADDED,
            ClusterEvent.NODE_LABELS_CHANGED,
            ClusterEvent.NODE_ALLOCATABLE_CHANGED,  # which extended resources DRA serves there
        }
    )

    def __init__(self, handle: Handle) -> None:
        super().__init__(handle)
        self.view: DraView = dra_view(handle.objects)

    def queueing_hint(self, event: ClusterEvent, pod: PodInfo, old: object, new: object) -> bool:
        """A claim event matters to a pod that uses the claim, and to every pod when it freed devices
        (its allocation removed, or an allocated claim deleted); kube-scheduler's
        ``isSchedulableAfterClaimChange``."""
        if event is not ClusterEvent.RESOURCE_CLAIM_CHANGED:
            return True
        ref = _claim_of(new) or _claim_of(old)
        if ref is None:
            return True
        if ref[0] == pod.namespace and any(s.claim == ref[1] for s in pod.claim_sources):
            return True
        return _allocated(old) and not _allocated(new)

    # -- PreFilter / Filter ------------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        extended = extended_resources(self.view, pod)
        if not pod.claim_sources and not extended:
            return Status.skip()
        objects = self.handle.objects
        found = pod_claims(pod, lambda namespace, name: objects.get(kinds.RESOURCE_CLAIM, namespace, name))
        if found.problem:
            return Status.unresolvable(found.problem)
        objs = found.claims
        ext: ExtendedClaim | None = None
        if extended:
            name = extended_claim_name(pod.name, pod.uid)
            made = objects.get(kinds.RESOURCE_CLAIM, pod.namespace, name)
            if made is not None and owned_by(made, pod):
                # An earlier attempt's claim (its binding failed after the create, or a leader died
                # mid-PreBind): allocated like any claim of the pod; upstream deletes it and retries.
                ext = ExtendedClaim(name, True, existing_mappings(self.view, pod, made, extended))
                objs = (*objs, made)
                extended = {}
            elif made is not None:
                return Status.unresolvable(
                    f"{kinds.RESOURCE_CLAIM.ref(pod.namespace, name)} is not the pod's"
                )
            else:
                ext = ExtendedClaim(name, False)
        if not objs and not extended:
            return Status.skip()  # every entry's claim was found not needed
        try:
            claims = [self.view.claim(obj) for obj in objs]
            allocator = self.view.ready_allocator()
            plan = allocator.plan(claims, pod.uid)
            data = _State(objs, plan, extended=ext)
            if extended and ext is not None:
                data.groups, data.group_of, widest = group_rows(
                    self.view, self.handle.cluster, pod, claims, plan, extended, ext.name
                )
                data.plan = widest or plan
        except UnknownDeviceClass as err:
            return Status.unresolvable(str(err))
        except GpuqError as err:
            return Status.unresolvable(str(err))
        for group in data.groups or (ExtendedGroup(plan),):
            if group.plan is not None and group.plan.waiting is not None:
                return Status.unresolvable(group.plan.waiting)
        state.write(_STATE, data)
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        data = state.read(_STATE, _State)
        cluster = self.handle.cluster
        n = cluster.n
        if data is None:
            return FilterResult.all_pass(n)
        allocator = self.view.ready_allocator()
        # Only the rows no plugin before this one rejected are decided (the search is the costly part).
        open_rows = state.feasible[:n].copy() if state.feasible is not None else cluster.alive[:n].copy()
        data.found.clear()
        data.unfit.clear()
        data.narrowed.clear()
        passed = np.zeros(n, dtype=np.bool_)
        if data.group_of is None:
            self._filter_plan(state, data, data.plan, open_rows, passed)
        else:
            group_of = data.group_of[:n]
            for index, group in enumerate(data.groups):
                rows = open_rows & (group_of == index)
                if group.plan is None:
                    passed |= rows  # the device plugins serve every extended resource there
                else:
                    self._filter_plan(state, data, group.plan, rows, passed)
        unfit = dict(data.unfit)
        rejected = open_rows & ~passed

        def reasons() -> tuple[tuple[BoolArray, str], ...]:
            if not rejected.any():
                return ()
            elsewhere = np.zeros(n, dtype=np.bool_)
            for row, answer in unfit.items():
                if _not_available(answer):
                    elsewhere[row] = True
            out = []
            if (rejected & ~elsewhere).any():
                out.append((rejected & ~elsewhere, CANNOT_ALLOCATE))
            if elsewhere.any():
                out.append((elsewhere, NOT_AVAILABLE))
            return tuple(out)

        def detail(row: int) -> str | None:
            """Device by device; a row the counts rejected is searched when asked (as the devices
            stand then)."""
            answer = unfit.get(row)
            node = cluster.nodes[row] if row < cluster.n else None
            plan = data.plan_for(row)
            if answer is None and row < n and rejected[row] and node is not None and plan is not None:
                found = allocator.allocate(plan, node)
                answer = found if isinstance(found, Unfit) else None
            return answer.message if answer is not None else None

        # Unresolvable (upstream's statusUnschedulable): the rows this plugin rejected, not those an
        # earlier filter did (it never looked at them: a node short of cpu whose devices are free is
        # one preemption may help).
        return FilterResult(passed, reasons, rejected, detail)

    def _filter_plan(
        self, state: CycleState, data: _State, plan: PodPlan, open_rows: BoolArray, passed: BoolArray
    ) -> None:
        """Decide ``open_rows`` for ``plan``: set their ``passed``, keep what the search found."""
        cluster = self.handle.cluster
        n = cluster.n
        allocator = self.view.ready_allocator()
        bound = count_bound(plan)
        if bound is None:
            searched = np.flatnonzero(open_rows).tolist()
        else:
            # The per-row counts of free whole devices (kept current) reject the rows the search
            # would reject, and, for one request of whole devices, accept the rows it would accept
            # (common/model/devices/bounds.py); the rows left are searched. Reserve allocates on the
            # chosen row by the search itself.
            candidate = open_rows
            enough = np.zeros(n, dtype=np.bool_)
            for alternatives in bound.requests:
                enough = np.zeros(n, dtype=np.bool_)  # an alternative has its count free
                maybe = np.zeros(n, dtype=np.bool_)  # or devices the count leaves out
                for alternative, count in alternatives:
                    counts, mixed = self.view.free_counts(alternative, cluster)
                    enough |= counts[:n] >= count
                    maybe |= mixed[:n]
                candidate = candidate & (enough | maybe)
            if bound.exact and not state.read(_EVERY_ROW, bool):  # one request: `enough` is its
                passed |= candidate & enough
                searched = np.flatnonzero(candidate & ~enough).tolist()
            else:
                searched = np.flatnonzero(candidate).tolist()
        for row in searched:
            node = cluster.nodes[row]
            if node is None:
                continue
            answer = allocator.allocate(plan, node)
            if isinstance(answer, Allocation):
                data.found[row] = answer
                passed[row] = True
            else:
                data.unfit[row] = answer

    def unfit(self, state: CycleState, row: int) -> Unfit | None:
        """Why node row ``row`` could not take the pod's claims in this attempt, device by device, for
        a row Filter searched (one the counts rejected: None here; ``FilterResult.detail`` searches
        it when asked)."""
        data = state.read(_STATE, _State)
        return None if data is None else data.unfit.get(row)

    # -- Reserve / Unreserve ---------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, row: int) -> Status:
        data = state.read(_STATE, _State)
        if data is None:
            return Status.success()
        allocator = self.view.ready_allocator()
        plan = data.plan_for(row)
        if plan is None:
            return Status.success()  # nothing allocated there: the device plugins serve it all
        allocation = data.found.get(row)
        if allocation is None:
            node = self.handle.cluster.nodes[row]
            if node is None:
                return Status.error(f"node row {row} has no node")
            answer = allocator.allocate(plan, node)
            if isinstance(answer, Unfit):
                return Status.unresolvable(CANNOT_ALLOCATE)
            allocation = answer
        self._unreserve(data)
        done: list[str] = []
        try:
            for key, claim_allocation in allocation.claims.items():
                self.view.ledger.reserve(key, claim_allocation, allocator.inventory)
                done.append(key)
        except DeviceConflict as err:
            for key in done:
                self.view.ledger.unreserve(key)
            return Status.error(str(err))
        data.reserved = tuple(done)
        data.allocation = allocation
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, row: int) -> None:
        data = state.read(_STATE, _State)
        if data is not None:
            self._unreserve(data)

    def _unreserve(self, data: _State) -> None:
        for key in data.reserved:
            self.view.ledger.unreserve(key)
        data.reserved = ()
        data.allocation = None

    # -- PreBind ------------------------------------------------------------------------------------------
    def pre_bind(self, state: CycleState, pod: PodInfo, row: int) -> PreBindPlan | Status:
        data = state.read(_STATE, _State)
        if data is None:
            return Status.skip()
        allocated: Mapping[str, ClaimAllocation] = data.allocation.claims if data.allocation else {}
        writes: list[ApiWrite] = []
        rollback: list[ApiWrite] = []
        targets: list[tuple[str, str, str]] = []
        for obj in data.claims:
            claim = self.view.claim(obj)
            current = self.handle.objects.get(kinds.RESOURCE_CLAIM, claim.namespace, claim.name) or obj
            allocation = allocated.get(claim.key)
            targets.append((claim.namespace, claim.name, claim.uid))
            if allocation is None and is_reserved_for(current, pod.uid):
                continue
            writes.extend(reservation_writes(current, pod, allocation))
            rollback.extend(rollback_writes(current, pod))
        ext = data.extended
        group = (
            data.groups[int(data.group_of[row])]
            if data.group_of is not None and row < len(data.group_of)
            else None
        )
        if ext is not None and not ext.existing and group is not None and group.claim is not None:
            made = allocated.get(group.claim.key)
            if made is not None:
                created, undo = create_writes(pod, group, ext.name, made)
                writes.extend(created)
                rollback.extend(undo)
                targets.append((pod.namespace, ext.name, ""))
                writes.append(pod_status_write(pod, ext.name, group.mappings))
        elif ext is not None and ext.existing and ext.mappings:
            writes.append(pod_status_write(pod, ext.name, ext.mappings))
        if not writes:
            return Status.skip()
        return PreBindPlan(
            self.name,
            tuple(writes),
            functools.partial(_ready, claims=tuple(targets), pod_uid=pod.uid),
            rollback=tuple(rollback),
            timeout=PRE_BIND_TIMEOUT_SECONDS,
            waiting_for=RESERVING,
        )

    # -- gpuq simulate's report ----------------------------------------------------------------------
    def report(self) -> Mapping[str, list[dict[str, Any]]]:
        """``resourceClaims``: each claim, the devices allocated to it and the pods it is reserved for."""
        rows: list[dict[str, Any]] = []
        for namespace, name, obj in self.handle.objects.list(kinds.RESOURCE_CLAIM):
            status = obj.get("status")
            status = status if isinstance(status, Mapping) else {}
            allocation = status.get("allocation")
            results = (
                (allocation or {}).get("devices", {}).get("results") or []
                if isinstance(allocation, Mapping)
                else []
            )
            rows.append(
                {
                    "namespace": namespace,
                    "name": name,
                    "allocated": allocation is not None,
                    "devices": [_device_row(r) for r in results if isinstance(r, Mapping)],
                    "reservedFor": [
                        str(c.get("name")) for c in status.get("reservedFor") or () if isinstance(c, Mapping)
                    ],
                }
            )
        return {"resourceClaims": rows} if rows else {}

    def pod_fields(self, pod: PodInfo) -> Mapping[str, Any]:
        """A pod with claims (its implicit claim for extended resources among them): ``devices``, what
        its claims were allocated (``driver/pool/device``, with the consumed capacity of a share)."""
        if not uses_devices(self.handle, pod):
            return {}
        devices: list[dict[str, Any]] = []
        for key in device_claim_keys(pod):
            name = key.partition("/")[2]
            obj = self.handle.objects.get(kinds.RESOURCE_CLAIM, pod.namespace, name)
            status = obj.get("status") if obj is not None else None
            allocation = status.get("allocation") if isinstance(status, Mapping) else None
            if not isinstance(allocation, Mapping) or not is_reserved_for(obj or {}, pod.uid):
                continue
            for result in allocation.get("devices", {}).get("results") or []:
                devices.append({"claim": name, **_device_row(result)})
        return {"devices": devices}


# -- for the quota plugins (docs/design.md "Quota over devices") --------------------------------------
_EVERY_ROW: Final = "DynamicResources/allocateEveryRow"


def allocate_every_row(state: CycleState) -> None:
    """A quota plugin over devices checks the allocation on every row Filter passes (its card type
    and amounts; a ``firstAvailable`` fallback when the first choice's quota is spent): for this pod
    the per-row counts only reject rows, the rest are searched, so each passed row has its
    allocation in :func:`found_allocations`."""
    state.write(_EVERY_ROW, True)


def found_allocations(state: CycleState) -> Mapping[int, Allocation]:
    """The allocations this attempt's Filter found per node row (the searched rows; rows the per-row
    counts decided have none until :func:`allocation_on` computes theirs). Empty for a pod without
    claims to allocate, or before DynamicResources' Filter ran."""
    data = state.read(_STATE, _State)
    return data.found if data is not None else {}


def claims_to_allocate(state: CycleState, row: int | None = None) -> Mapping[str, ResourceClaim]:
    """The claims this attempt allocates (not allocated yet), by claim key: on node row ``row``
    (a pod's implicit claim for the extended resources DRA serves there), else the main plan's (the
    implicit claim as asked where no device plugin serves any of them)."""
    data = state.read(_STATE, _State)
    if data is None:
        return {}
    plan = data.plan if row is None else data.plan_for(row)
    return {prepared.claim.key: prepared.claim for prepared in plan.to_allocate} if plan is not None else {}


def allocation_on(state: CycleState, handle: Handle, row: int) -> Allocation | None:
    """The allocation the pod's claims get on node row ``row`` in this attempt: the one Reserve charged,
    else the one Filter found, else computed now and kept, so that DynamicResources' Reserve takes the
    very same devices whichever of the plugins reserves first. None for a pod without claims to
    allocate, or a row that cannot take them."""
    data = state.read(_STATE, _State)
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
    data = state.read(_STATE, _State)
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
    data = state.read(_STATE, _State)
    return data.plan_for(row) if data is not None else None


def _device_row(result: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "request": result.get("request"),
        "device": f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}",
    }
    if result.get("consumedCapacity"):
        row["consumedCapacity"] = dict(result["consumedCapacity"])
    return row


def _not_available(answer: Unfit) -> bool:
    return any(r.message.startswith("allocated to devices not reachable") for r in answer.reasons)


def _ready(lookup: Lookup, *, claims: tuple[tuple[str, str, str], ...], pod_uid: str) -> Progress:
    return reserved(lookup, claims, pod_uid)
