"""Job mode: may a PodGroup enter its queue under its namespace's ElasticQuota? (design.md Semantics 4,
"Enqueue and the ElasticQuota").

An Inqueue PodGroup reserves what its job needs in every enqueue plugin (capacity-card's card quota,
proportion's capability) until it runs. A job its ElasticQuota cannot hold would sit Inqueue with
those reservations and keep every other job of its queue out of them, while running none: the
enqueue check asks the ElasticQuota too, counting the reservations of the namespace's jobs already
Inqueue, as Volcano's capacity plugin counts ``inqueue`` against a queue's capability.

With ``reserved`` the unbound part of every Inqueue job's demand, per namespace, a job of
``namespace`` asking ``demand`` is admitted when, for each resource it asks:

1. ``used(ns) + reserved(ns) + demand <= max(ns)``: its quota's max;
2. and, for a resource some ElasticQuota guarantees (has a ``min`` for), either
   ``used(ns) + reserved(ns) + demand <= min(ns)`` (within its own guarantee: what other namespaces
   borrow is taken back by capacity-scheduling's preemption) or
   ``sum(used) + sum(reserved) + demand <= sum(min)`` (the guaranteed pool has room for it).

A namespace without an ElasticQuota is not checked. Pods are still checked one by one at PreFilter
(:meth:`~.ledger.ElasticQuotaInfos.prefilter`): the enqueue check only keeps out of the queue's
reservations the jobs that could not run now.

A reservation holds room for a job on its way to running, not for one that tried and found none
(:func:`reserves`): an Inqueue job every member of which (not placed yet) was tried and parked
unschedulable, none of them nominated, being tried or due for a retry, reserves nothing until one of
them is tried again. Found by the day in the life (issue 28): Inqueue jobs whose pods found no node
held 28 GPUs of the guaranteed pool for minutes, and two gangs that fitted the quota and the nodes
waited behind them. A stalled job within its own ``min`` loses nothing by it: capacity-scheduling's
preemption takes back from borrowers what its pods need when they are tried again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Literal

from gpuq_k8s.common.model.elastic.ledger import RULE_MAX, RULE_TOTAL_MIN, ElasticQuotaInfos
from gpuq_k8s.common.model.gang import least_total
from gpuq_k8s.common.model.quantity import PODS, format_units
from gpuq_k8s.common.model.quota_exceeded import QuotaExceeded
from gpuq_k8s.common.model.refusal import Refusal

Amounts = Mapping[str, int]

# Where a member of an Inqueue job that is not placed yet (bound, binding, or waiting in Permit) stands.
TRYING: Final = "trying"  # in the active queue, backing off before a retry, being tried, or nominated
PARKED: Final = "parked"  # tried, found no room, parked until a cluster event may help it
GATED: Final = "gated"  # kept out of the queue by a PreEnqueue plugin (scheduling gates): never tried
MemberState = Literal["trying", "parked", "gated"]


def reserves(unplaced: Iterable[MemberState]) -> bool:
    """Whether an Inqueue job reserves its unbound part, given where each member not placed yet stands:
    yes while any is trying (or none exists yet: its pods are on their way), no once every one was
    tried and parked or is gated, at least one parked (a job tried, that found no room)."""
    parked = False
    for state in unplaced:
        if state == TRYING:
            return True
        parked = parked or state == PARKED
    return not parked


def job_demand(min_resources: Amounts | None, members: Sequence[Amounts], min_member: int) -> dict[str, int]:
    """What a job needs of its ElasticQuota to start: its PodGroup's ``minResources`` when set (as
    Volcano's ``GetMinResources``), else the least any ``min_member`` of its known pods ask together
    (all of them while fewer exist)."""
    if min_resources:
        return {k: v for k, v in min_resources.items() if v > 0 and k != PODS}
    asked = [{k: v for k, v in m.items() if k != PODS} for m in members]
    return least_total(asked, min(max(min_member, 1), len(asked)))


def unbound_part(demand: Amounts, charged: Sequence[Amounts]) -> dict[str, int]:
    """What an Inqueue job still reserves: its demand less what its pods already charge (bound or
    reserved), never below zero (Volcano's ``inqueue`` of a running elastic job: ``min - allocated``)."""
    out: dict[str, int] = {}
    for key, amount in demand.items():
        left = amount - sum(c.get(key, 0) for c in charged)
        if left > 0:
            out[key] = left
    return out


def enqueue_refusal(
    infos: ElasticQuotaInfos,
    namespace: str,
    demand: Amounts,
    reserved: Mapping[str, Amounts],
    job: str,
) -> Refusal | None:
    """The rule of this module: None admits; a refusal names the quota, the resource and the amounts.

    ``reserved`` is, per namespace, what its Inqueue jobs reserve and do not charge yet
    (:func:`unbound_part`); ``job`` names the job (``PodGroup ns/name``) in the message."""
    info = infos.get(namespace)
    if info is None:
        return None
    own = reserved.get(namespace, {})
    guaranteed = infos.guaranteed
    total_used, total_min = infos.total_used, infos.total_min
    pool_reserved: dict[str, int] = {}
    for ns, amounts in reserved.items():
        if ns in infos:
            for key, amount in amounts.items():
                pool_reserved[key] = pool_reserved.get(key, 0) + amount
    for key in sorted(demand):
        amount = demand[key]
        if amount <= 0 or key == PODS:
            continue
        held = info.used.amount(key) + own.get(key, 0)
        limit = info.max.get(key)
        if limit is not None and held + amount > limit:
            return _refusal(key, amount, held, limit, scope=f"{info.ref} (max)", rule=RULE_MAX, job=job)
        if key not in guaranteed or held + amount <= info.min.get(key, 0):
            continue
        pool_held = total_used.amount(key) + pool_reserved.get(key, 0)
        pool = total_min.amount(key)
        if pool_held + amount > pool:
            scope = "the sum of all ElasticQuota min (guaranteed pool)"
            return _refusal(key, amount, pool_held, pool, scope=scope, rule=RULE_TOTAL_MIN, job=job)
    return None


def _refusal(key: str, amount: int, held: int, limit: int, *, scope: str, rule: str, job: str) -> Refusal:
    error = QuotaExceeded(
        key,
        format_units(key, amount),
        format_units(key, max(limit - held, 0)),
        format_units(key, limit),
        scope=f"{scope} by {job} with the jobs already Inqueue",
        used=format_units(key, held),
        unresolvable=amount > limit,
    )
    return Refusal(error, rule=rule)
