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
  the same device; Unreserve drops them (:mod:`scheduler.plugins.dra_in_flight`).
* PreBind (:mod:`scheduler.plugins.dra_prebind`): the claim's delete-protection finalizer, then its
  ``status.allocation`` and the pod in ``status.reservedFor``, before the pod's binding, through the
  leader-gated client; the backend waits until the caches show them. A failed binding takes the
  reservation back (the rollback writes).

The attempt's state (claims, plan, allocations per row) and what the quota plugins read of it:
:mod:`scheduler.plugins.dra_attempt`; ``gpuq simulate``'s report: :mod:`scheduler.plugins.dra_report`.

The ledger follows the claims as the informers show them (:mod:`scheduler.plugins.dra_view`): when the
watch shows an allocation, it replaces the in-flight entry; after a restart or a leader's re-list the
replayed claims rebuild it. Pods rejected here are retried on DeviceClass, ResourceSlice and
ResourceClaim events (a claim event only for the pods using the claim, or when it freed devices: its
allocation gone), on new or relabelled nodes, and on their own update (kube-controller-manager's
``status.resourceClaimStatuses``, scheduler/kube/feed.py): :mod:`scheduler.plugins.dra_events`.

A member of ``predicates`` switched by ``predicate.DynamicResourceAllocationEnable`` (false: pods with
claims are placed as if they had none, and no device is allocated for them). A configuration without a
``predicates`` entry gets it all the same (``with_safety_rules`` in scheduler/plugins/members.py): a
pod bound without its devices would never start.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.devices.bounds import count_bound
from gpuq_k8s.common.model.devices.explain import Unfit
from gpuq_k8s.common.model.devices.extended import extended_claim_name
from gpuq_k8s.common.model.devices.plan import PodPlan, UnknownDeviceClass
from gpuq_k8s.common.model.devices.reservation import owned_by, pod_claims
from gpuq_k8s.common.model.devices.search import Allocation
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.prebind import PreBindPlan
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
from gpuq_k8s.scheduler.plugins.dra_attempt import ATTEMPT, EVERY_ROW, DraAttempt, attempt_of
from gpuq_k8s.scheduler.plugins.dra_events import EVENTS, claim_hint
from gpuq_k8s.scheduler.plugins.dra_extended import (
    ExtendedClaim,
    ExtendedGroup,
    existing_mappings,
    extended_resources,
    group_rows,
)
from gpuq_k8s.scheduler.plugins.dra_in_flight import reserve_in_flight, unreserve_in_flight
from gpuq_k8s.scheduler.plugins.dra_prebind import claim_writes
from gpuq_k8s.scheduler.plugins.dra_report import claims_report, pod_devices
from gpuq_k8s.scheduler.plugins.dra_view import DraView, dra_view

CANNOT_ALLOCATE: Final = "cannot allocate all claims"
NOT_AVAILABLE: Final = "resourceclaim not available on the node"


class DynamicResources(PreFilterPlugin, FilterPlugin, ReservePlugin, PreBindPlugin):
    name = plugin_names.DYNAMIC_RESOURCES
    events = EVENTS

    def __init__(self, handle: Handle) -> None:
        super().__init__(handle)
        self.view: DraView = dra_view(handle.objects)

    def queueing_hint(self, event: ClusterEvent, pod: PodInfo, old: object, new: object) -> bool:
        """:func:`~scheduler.plugins.dra_events.claim_hint` (kube-scheduler's
        ``isSchedulableAfterClaimChange``)."""
        return claim_hint(event, pod, old, new)

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
            data = DraAttempt(objs, plan, extended=ext)
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
        state.write(ATTEMPT, data)
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        data = attempt_of(state)
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
        self, state: CycleState, data: DraAttempt, plan: PodPlan, open_rows: BoolArray, passed: BoolArray
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
            if bound.exact and not state.read(EVERY_ROW, bool):  # one request: `enough` is its
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
        data = attempt_of(state)
        return None if data is None else data.unfit.get(row)

    # -- Reserve / Unreserve ---------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, row: int) -> Status:
        data = attempt_of(state)
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
        conflict = reserve_in_flight(self.view, data, allocation)
        return Status.success() if conflict is None else Status.error(conflict)

    def unreserve(self, state: CycleState, pod: PodInfo, row: int) -> None:
        data = attempt_of(state)
        if data is not None:
            unreserve_in_flight(self.view, data)

    # -- PreBind ------------------------------------------------------------------------------------------
    def pre_bind(self, state: CycleState, pod: PodInfo, row: int) -> PreBindPlan | Status:
        data = attempt_of(state)
        if data is None:
            return Status.skip()
        plan = claim_writes(self.view, self.handle.objects, data, pod, row, plugin=self.name)
        return plan if plan is not None else Status.skip()

    # -- gpuq simulate's report ----------------------------------------------------------------------
    def report(self) -> Mapping[str, list[dict[str, Any]]]:
        """``resourceClaims``: each claim, the devices allocated to it and the pods it is reserved for."""
        return claims_report(self.handle)

    def pod_fields(self, pod: PodInfo) -> Mapping[str, Any]:
        """A pod with claims (its implicit claim for extended resources among them): ``devices``, what
        its claims were allocated (``driver/pool/device``, with the consumed capacity of a share)."""
        return pod_devices(self.handle, pod)


def _not_available(answer: Unfit) -> bool:
    return any(r.message.startswith("allocated to devices not reachable") for r in answer.reasons)
