"""What counting a node's free whole devices decides for a pod's claims, before any search.

The scheduler keeps, per request shape and node, how many devices the request could take there now
(usable by its class, selectors, tolerations and capacity, not in use) and whether the node also has
usable devices that count says nothing about: shared devices (``allowMultipleAllocations``) and
devices consuming counters (scheduler/plugins/dra_view.py ``free_counts``). Those counts bound the
exact search (:func:`~.search.allocate_on_node`):

* **rejection** (every plan): a request none of whose alternatives has ``count`` free devices on the
  node, nor a device the count leaves out, cannot be allocated there, since the search takes only
  free, usable devices, a whole device once; so the node is one the search would reject too;
* **acceptance** (:attr:`CountBound.exact`: one claim to allocate, one request, no constraints, every
  alternative for ``count`` whole devices of no capacity or admin access): an alternative with
  ``count`` free whole devices fits, since the search tries every combination in order and nothing
  else (constraints, counters, capacity) can refuse those devices; ``firstAvailable`` fits when one
  of its subrequests does.

A node neither decides is searched. A plan with a claim allocated already is searched everywhere: a
node its allocation does not reach is reported as such, which the search says first. Requests the
counts cannot bound (``allocationMode: All``; admin access, which may use devices in use) are left
out of the rejection and make the bound inexact. A subrequest asking more than 32 devices never fits
(``AllocationResultsMaxSize``) and is left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuq_k8s.common.model.devices.claims import EXACT_COUNT
from gpuq_k8s.common.model.devices.plan import Alternative, PodPlan
from gpuq_k8s.common.model.devices.search import MAX_RESULTS


@dataclass(frozen=True, slots=True)
class CountBound:
    """Per request the counts bound: its alternatives that can fit, with the devices each asks."""

    requests: tuple[tuple[tuple[Alternative, int], ...], ...]
    exact: bool


def count_bound(plan: PodPlan) -> CountBound | None:
    """What the per-node counts decide for ``plan`` (see the module doc); None when nothing (a plan
    that waits, nothing to allocate, or a claim allocated already)."""
    if plan.waiting is not None or not plan.to_allocate or plan.allocated:
        return None
    exact = len(plan.to_allocate) == 1
    bounded: list[tuple[tuple[Alternative, int], ...]] = []
    for prepared in plan.to_allocate:
        if prepared.claim.spec.constraints or len(prepared.requests) != 1:
            exact = False
        for alternatives in prepared.requests:
            countable: list[tuple[Alternative, int]] = []
            unbounded = False
            for alternative in alternatives:
                request = alternative.request
                if request.mode != EXACT_COUNT or request.admin_access:
                    unbounded = True
                    break
                if request.capacity is not None:
                    exact = False
                if 0 < request.count <= MAX_RESULTS:
                    countable.append((alternative, request.count))
                elif request.count > MAX_RESULTS:
                    continue
                else:
                    unbounded = True
                    break
            if unbounded:
                exact = False
                continue
            bounded.append(tuple(countable))
    if not bounded:
        return None
    return CountBound(tuple(bounded), exact)
