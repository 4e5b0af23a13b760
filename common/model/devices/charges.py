"""What a pod's DRA claims are charged, claim by claim: the one model the quota engines share (issue 26
"Quota over devices"; docs/design.md "DRA devices", "Quota over devices").

A claim is charged **while it is allocated**, once, whatever number of pods share it: the charge
follows the allocation, not the pods. The scheduler charges it at Reserve with the allocation the
DynamicResources plugin chose for the node (in flight), refunds it at Unreserve unless the API
already shows the allocation, keeps it while the claim's ``status.allocation`` stands and refunds it
when the allocation is cleared or the claim deleted; after a restart the charges are rebuilt from the
claims' ``status.allocation`` (:func:`claim_charge` of each allocated claim). A claim is charged to
the quota of the pod that allocated it, or, rebuilt from the API, of the first pod in its
``status.reservedFor`` the scheduler knows.

:class:`ClaimCharge` holds every engine's view of one allocation (:mod:`.quota` per device):

* ``cards``: milli-cards per card type (Queue card quotas, the capacity-card plugin; a device without
  a card type is in ``untyped`` and counts against no card quota);
* ``tflops``, ``vram``, ``gpus``: GPUResourceQuota's TFLOPS (milli), VRAM (bytes) and cards (milli),
  a consumable-capacity share charged exactly what it consumes; ``None`` when a device's amount
  cannot be told (its product has no known specs);
* ``per_class``: devices per DeviceClass, which a ``deviceClassMappings`` entry turns into an
  ElasticQuota or Queue capability resource (:func:`~.quota.mapped_resources`).

``adminAccess`` results are never charged.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from gpuq_k8s.common.model.capacity_card.args import DeviceAttributeNames
from gpuq_k8s.common.model.cards.card_type import CARD_UNIT
from gpuq_k8s.common.model.cards.names import card_key
from gpuq_k8s.common.model.devices.claims import EXACT_COUNT, ResourceClaim
from gpuq_k8s.common.model.devices.plan import Alternative, PlanSource, PodPlan, PreparedClaim
from gpuq_k8s.common.model.devices.pools import Inventory
from gpuq_k8s.common.model.devices.quota import (
    DEFAULT_NAMING,
    DeviceCharge,
    DeviceNaming,
    allocation_charges,
    card_type,
    device_charge,
    devices_per_class,
    mapped_resources,
)
from gpuq_k8s.common.model.devices.results import ClaimAllocation
from gpuq_k8s.common.model.devices.search import Allocation


@dataclass(frozen=True, slots=True)
class ClaimCharge:
    """One allocated claim's charge (module doc)."""

    claim: str
    cards: Mapping[str, int] = field(default_factory=dict)
    untyped: int = 0  # milli-cards of devices without a card type
    gpus: int = 0  # milli-cards of every charged device
    tflops: int | None = 0
    vram: int | None = 0
    per_class: Mapping[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.gpus and not self.per_class

    def resources(self, mapping: Mapping[str, str]) -> dict[str, int]:
        """The devices as ElasticQuota / Queue capability amounts (milli-units, as every count) through
        a DeviceClass -> resource ``mapping``; classes it does not name are not counted."""
        return {name: count * 1000 for name, count in mapped_resources(self.per_class, mapping).items()}


def _sum(values: Iterable[int | None]) -> int | None:
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def charge_of(key: str, charges: Iterable[DeviceCharge], per_class: Mapping[str, int]) -> ClaimCharge:
    """The :class:`ClaimCharge` of claim ``key`` from its devices' charges."""
    listed = list(charges)
    cards: dict[str, int] = {}
    untyped = 0
    for charge in listed:
        if charge.card_type is None:
            untyped += charge.cards
        else:
            cards[charge.card_type] = cards.get(charge.card_type, 0) + charge.cards
    return ClaimCharge(
        key,
        cards,
        untyped,
        sum(c.cards for c in listed),
        _sum(c.tflops for c in listed),
        _sum(c.vram for c in listed),
        dict(per_class),
    )


def claim_charge(
    claim: ResourceClaim,
    allocation: ClaimAllocation,
    inventory: Inventory,
    naming: Mapping[str, DeviceNaming] = DEFAULT_NAMING,
) -> ClaimCharge:
    """What ``allocation`` of ``claim`` costs (module doc); devices no longer published are left out."""
    return charge_of(
        claim.key, allocation_charges(allocation, inventory, naming), devices_per_class(claim, allocation)
    )


def total(charges: Iterable[ClaimCharge]) -> ClaimCharge:
    """The sum of several claims' charges (a pod's), under the first claim's key."""
    listed = list(charges)
    cards: dict[str, int] = {}
    per_class: dict[str, int] = {}
    for charge in listed:
        for name, amount in charge.cards.items():
            cards[name] = cards.get(name, 0) + amount
        for name, count in charge.per_class.items():
            per_class[name] = per_class.get(name, 0) + count
    return ClaimCharge(
        listed[0].claim if listed else "",
        cards,
        sum(c.untyped for c in listed),
        sum(c.gpus for c in listed),
        _sum(c.tflops for c in listed),
        _sum(c.vram for c in listed),
        per_class,
    )


def result_card_types(
    allocation: ClaimAllocation, inventory: Inventory, naming: Mapping[str, DeviceNaming] = DEFAULT_NAMING
) -> list[tuple[str, str]]:
    """(result's request name, card type) of each charged result of ``allocation`` that has one."""
    out = []
    for result in allocation.results:
        if result.admin_access:
            continue
        found = inventory.device(result.driver, result.pool, result.device)
        if found is not None:
            name = card_type(found[1], naming)
            if name is not None:
                out.append((result.request, name))
    return out


def narrowed(plan: PodPlan, drop: Mapping[str, Collection[str]]) -> PodPlan | None:
    """``plan`` without the ``firstAvailable`` subrequests ``drop`` names (claim key -> subrequest
    names such as ``gpu/h100``): the DRA form of capacity-card's ``A|B``, where a card type without
    quota left is passed over for the next alternative. None when a request has no alternative left
    (or nothing was dropped)."""
    changed = False
    prepared: list[PreparedClaim] = []
    for claim in plan.to_allocate:
        names = drop.get(claim.claim.key, ())
        requests = []
        for alternatives in claim.requests:
            kept = tuple(a for a in alternatives if a.name not in names)
            if not kept:
                return None
            changed = changed or len(kept) != len(alternatives)
            requests.append(kept)
        prepared.append(PreparedClaim(claim.claim, tuple(requests)))
    if not changed:
        return None
    return PodPlan(plan.allocator, plan.pod_uid, tuple(prepared), plan.allocated, plan.waiting)


def chosen_subrequests(plan: PodPlan, allocation: Allocation) -> dict[str, set[str]]:
    """The ``firstAvailable`` subrequests ``allocation`` of ``plan`` took (claim key -> names such as
    ``gpu/h100``), of the requests that have another subrequest left in ``plan``: what a quota that
    refuses the allocation as a whole (GPUResourceQuota's totals) passes over for the next ones."""
    out: dict[str, set[str]] = {}
    for prepared in plan.to_allocate:
        claim_allocation = allocation.claims.get(prepared.claim.key)
        if claim_allocation is None:
            continue
        taken = {result.request for result in claim_allocation.results}
        for alternatives in prepared.requests:
            if len(alternatives) > 1:
                for alternative in alternatives:
                    if alternative.name in taken:
                        out.setdefault(prepared.claim.key, set()).add(alternative.name)
    return out


@dataclass(frozen=True, slots=True)
class Candidates:
    """What an alternative could be allocated, for the job-mode enqueue check: the card types of the
    devices it could use (sorted), and the milli-cards one of its devices is charged (a whole card,
    or for a capacity request the share the devices' request policies make of it)."""

    types: tuple[str, ...]
    cards: int = CARD_UNIT


def candidates(
    alternative: Alternative, source: PlanSource, naming: Mapping[str, DeviceNaming] = DEFAULT_NAMING
) -> Candidates:
    """The :class:`Candidates` of every published device ``alternative`` could ever use (its class,
    selectors, tolerations and capacity), in complete and valid pools. A capacity request
    (``capacity.requests``) is charged per device as its allocation would be (:func:`device_charge`
    of the consumption the device's request policy makes: a 20Gi share of an 80Gi H100 a quarter
    card; a device without ``allowMultipleAllocations`` whole): the largest such charge among the
    candidates, so the demand never falls short of what the allocation is charged."""
    types: set[str] = set()
    shares = alternative.request.capacity is not None
    cards = 0 if shares else CARD_UNIT
    for pool in source.inventory.pools.values():
        if not pool.complete or pool.invalid:
            continue
        for s in pool.device_slices:
            for index, (taken, _taint) in source.static_view(alternative, s).usable.items():
                device = s.devices[index]
                name = card_type(device, naming)
                if name is not None:
                    types.add(name)
                    if shares:
                        charge = device_charge(device, taken if device.allow_multiple else None, naming)
                        cards = max(cards, charge.cards)
    return Candidates(tuple(sorted(types)), cards or CARD_UNIT)


def candidate_card_types(
    alternative: Alternative, source: PlanSource, naming: Mapping[str, DeviceNaming] = DEFAULT_NAMING
) -> tuple[str, ...]:
    """The card types of every published device ``alternative`` could ever use, sorted
    (:func:`candidates`)."""
    return candidates(alternative, source, naming).types


def pending_cards(
    plan: PodPlan,
    candidates_of: Callable[[Alternative], Candidates],
) -> dict[str, int]:
    """What the claims ``plan`` still allocates ask of the card quotas before any device is chosen
    (the job-mode enqueue check): per ``ExactCount`` request, its count of devices times the
    milli-cards one is charged (a whole card; a capacity request's share, :func:`candidates`), under
    the card key of the card types its alternatives could take (``A|B`` when several, in the order of
    the ``firstAvailable`` subrequests; the smallest amount among them); a request for ``All``
    devices or for admin access is charged when allocated only."""
    out: dict[str, int] = {}
    for prepared in plan.to_allocate:
        for alternatives in prepared.requests:
            requests = [a.request for a in alternatives]
            if any(r.mode != EXACT_COUNT or r.admin_access for r in requests):
                continue
            types: list[str] = []
            amount: int | None = None
            for alternative in alternatives:
                found = candidates_of(alternative)
                types.extend(t for t in found.types if t not in types)
                if found.types:
                    asked = alternative.request.count * found.cards
                    amount = asked if amount is None else min(amount, asked)
            if types and amount is not None:
                key = card_key(types)
                out[key] = out.get(key, 0) + amount
    return out


def naming_from(configured: Mapping[str, DeviceAttributeNames]) -> dict[str, DeviceNaming]:
    """capacity-card's ``deviceNaming`` argument as the per-driver :class:`DeviceNaming` (NVIDIA's
    ``gpu.nvidia.com`` defaults for a driver it does not list)."""
    out = dict(DEFAULT_NAMING)
    for driver, names in configured.items():
        out[driver] = DeviceNaming(
            names.product,
            names.kind,
            names.mig_profile,
            names.memory,
            names.tflops,
            frozenset(names.mig_types),
        )
    return out
