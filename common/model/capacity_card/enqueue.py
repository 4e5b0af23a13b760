"""Job mode: may a PodGroup enter its queue? (capacity-card.md "Job Enqueueable Check"; design.md
Semantics 3, 7).

A job's minimum is its ``spec.minResources`` (cpu, memory) plus its ``volcano.sh/card.request``
annotation until its pods exist (then their card requests, kept by :mod:`.ledger`).
:func:`check_enqueue` compares ``allocated + inqueue + minimum - elastic`` with the queue's capability;
an ``A|B`` request is checked against the sum of its alternatives.
"""

from __future__ import annotations

from itertools import combinations
from typing import Final

from gpuq_k8s.common.model.annotations import CARD_REQUEST
from gpuq_k8s.common.model.capacity_card.args import CapacityCardArgs
from gpuq_k8s.common.model.capacity_card.ledger import QueueLedger
from gpuq_k8s.common.model.capacity_card.quota import CPU_MEMORY, QueueQuota
from gpuq_k8s.common.model.capacity_card.refusals import (
    cpu_memory_refusal,
    empty_capability,
    exceeded,
    queue_closed,
)
from gpuq_k8s.common.model.cards.amounts import parse_card_request
from gpuq_k8s.common.model.cards.names import card_key, is_composite, key_alternatives
from gpuq_k8s.common.model.crd import PodGroup
from gpuq_k8s.common.model.events import (
    INSUFFICIENT_SCALAR_QUOTA,
    EventRecord,
    annotation_or_fallback,
)
from gpuq_k8s.common.model.refusal import Refusal
from gpuq_k8s.common.model.resources import EMPTY, Resources

# Job mode enumerates unions of alternative sets (see check_enqueue); past this many distinct sets in
# one queue it checks each requested set alone, as upstream does.
_MAX_EXACT_SETS: Final = 12


def job_min_from_podgroup(group: PodGroup) -> tuple[Resources, Resources, EventRecord | None]:
    """``(min cpu/memory, card.request)`` of a PodGroup; a malformed card.request is a Warning and 0."""
    min_cpu_memory = (group.spec.minResources or EMPTY).only(CPU_MEMORY)
    text = group.annotations.get(CARD_REQUEST)
    consequence = "card request treated as 0 until the annotation is fixed"
    request, event = annotation_or_fallback(group.ref, text, parse_card_request, EMPTY, consequence)
    return min_cpu_memory, request, event


def check_enqueue(
    quota: QueueQuota,
    ledger: QueueLedger,
    minimum: Resources,
    args: CapacityCardArgs,
) -> Refusal | None:
    """May a job with this minimum enter the queue? (spec "Job Enqueueable Check", job mode)

    ``to_be_used = allocated + inqueue + minimum - elastic`` against the capability: cpu and memory
    (unless ``cardUnlimitedCpuMemory`` and the job uses cards), then cards. An ``A|B: n`` request is
    checked against the *sum* of the alternatives (spec "Job Mode": queue A100=5, H100=3, allocated
    2+1, ``A100|H100: 4`` -> 7 <= 8 passes). Generalising that sum to other jobs' ``A|B``
    reservations, which upstream ignores, the check is Hall's condition: for every union T of
    alternative sets involving this job, the demands confined to T fit in T's free quota. With no
    composite reservation in the queue this is exactly upstream's per-key rule.
    """
    if not quota.open:
        return queue_closed(quota.name, "it admits no new jobs")
    cards = minimum.without(CPU_MEMORY).nonzero()
    if not quota.configured and not minimum.nonzero().is_zero():
        return empty_capability(quota)
    if not (args.card_unlimited_cpu_memory and cards):
        allocated, inqueue, elastic = ledger.allocated, ledger.inqueue, ledger.elastic
        used = {r: allocated.amount(r) + inqueue.amount(r) - elastic.amount(r) for r in CPU_MEMORY}
        refusal = cpu_memory_refusal(quota, minimum, used)
        if refusal is not None:
            return refusal
    if cards:
        return _check_cards_job_mode(quota, ledger, cards)
    return None


def _check_cards_job_mode(quota: QueueQuota, ledger: QueueLedger, request: Resources) -> Refusal | None:
    allocated, inqueue, elastic = ledger.allocated, ledger.inqueue, ledger.elastic

    def used(name: str) -> int:
        return allocated.amount(name) + inqueue.amount(name) - elastic.amount(name)

    new = [(frozenset(key_alternatives(k)), k, v) for k, v in sorted(request.items())]
    reserved = [(frozenset(key_alternatives(k)), v) for k, v in sorted(inqueue.items()) if is_composite(k)]
    new_sets = sorted({s for s, _, _ in new}, key=sorted)
    other_sets = sorted({s for s, _ in reserved} - set(new_sets), key=sorted)

    unions: list[frozenset[str]] = []
    if len(new_sets) + len(other_sets) <= _MAX_EXACT_SETS:
        for n in range(1, len(new_sets) + 1):
            for chosen in combinations(new_sets, n):
                core = frozenset().union(*chosen)
                for m in range(len(other_sets) + 1):
                    for extra in combinations(other_sets, m):
                        unions.append(core.union(*extra))
    else:
        unions = list(new_sets)
    seen: set[frozenset[str]] = set()
    # Smallest unions first, so the refusal names the tightest set (usually the requested key itself).
    for union in sorted(unions, key=lambda u: (len(u), sorted(u))):
        if union in seen:
            continue
        seen.add(union)
        asked = sum(v for s, _, v in new if s <= union)
        if asked <= 0:
            continue
        held = sum(v for s, v in reserved if s <= union)
        base = sum(used(name) for name in union) + held
        limit = sum(quota.capability.amount(name) for name in union)
        if base + asked > limit:
            keys = [k for s, k, _ in new if s <= union]
            name = keys[0] if len(keys) == 1 and frozenset(key_alternatives(keys[0])) == union else None
            resource = name or card_key(sorted(union))
            return Refusal(exceeded(quota.name, resource, asked, base, limit), INSUFFICIENT_SCALAR_QUOTA)
    return None
