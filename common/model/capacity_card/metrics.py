"""The per-queue card metrics and share (capacity-card.md "Resource Tracking" and "Metrics").

``volcano_queue_card_{capacity,allocated,request,deserved}{queue_name, card_name}`` in cards (not
milli-units), and a queue's share ``max(allocated / deserved)`` over the card types it deserves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuq_k8s.common.model.capacity_card.ledger import QueueLedger
from gpuq_k8s.common.model.capacity_card.quota import CPU_MEMORY, QueueQuota
from gpuq_k8s.common.model.cards.card_type import CARD_UNIT
from gpuq_k8s.common.model.resources import Resources


@dataclass(frozen=True, slots=True)
class QueueCardMetric:
    """One ``volcano_queue_card_*{queue_name, card_name}`` sample set, in cards (not milli)."""

    queue: str
    card: str
    capacity: float
    allocated: float
    request: float
    deserved: float


def deserved_cards(quotas: Iterable[QueueQuota]) -> dict[str, Resources]:
    """Per queue: the card types it deserves, which is its card quota.

    Upstream puts the card quota in a queue's capability, guarantee *and* deserved, so
    ``deserved = min(realCapability, max(guarantee, deserved))`` with ``realCapability =
    max(0, cluster - all guarantees) + guarantee >= quota`` always comes out as the quota. Kept as a
    function so the metric has one definition should hierarchical queues change it (spec "Future Work").
    """
    return {quota.name: quota.cards for quota in quotas}


def queue_share(ledger: QueueLedger, deserved: Mapping[str, int]) -> float:
    """``max(allocated / deserved)`` over the card types the queue deserves (spec "Resource Tracking").

    As Volcano's ``helpers.Share``: a deserved 0 with something allocated counts as 1.
    """
    share = 0.0
    allocated = ledger.allocated
    for name, amount in deserved.items():
        used = allocated.amount(name)
        share = max(share, used / amount if amount > 0 else (1.0 if used > 0 else 0.0))
    return share


def queue_card_metrics(
    quota: QueueQuota, ledger: QueueLedger, deserved: Mapping[str, int]
) -> list[QueueCardMetric]:
    """The card metrics of one queue, sorted by card name.

    capacity = the card quota; allocated = charged to bound pods; request = allocated + the card
    requests of unbound pods (upstream's ``request``: allocated and pending tasks; an unbound ``A|B``
    pod appears under ``A|B``); deserved = :func:`deserved_cards`.
    """
    cards = quota.cards
    allocated = ledger.allocated.without(CPU_MEMORY)
    request = allocated + ledger.pending
    names = sorted(set(cards) | set(allocated) | set(request))
    return [
        QueueCardMetric(
            quota.name,
            name,
            cards.amount(name) / CARD_UNIT,
            allocated.amount(name) / CARD_UNIT,
            request.amount(name) / CARD_UNIT,
            deserved.get(name, 0) / CARD_UNIT,
        )
        for name in names
    ]
