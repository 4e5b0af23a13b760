"""A Queue's quota as the capacity-card engine sees it (capacity-card.md "Queue Annotations for Card
Quotas"; design.md Semantics 3, 7).

A Queue's capability is ``spec.capability`` for cpu and memory and the ``volcano.sh/card.quota``
annotation for card types; both default to 0 ("If not set, the default quota is also 0"), every other
resource is unlimited ("Other Resources"). A malformed card quota on a Queue that predates the webhook
is a Warning event and a card quota of 0 (Semantics 3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpuq_k8s.common.model.annotations import CARD_QUOTA
from gpuq_k8s.common.model.cards.amounts import parse_card_quota
from gpuq_k8s.common.model.crd import Queue
from gpuq_k8s.common.model.events import EventRecord, annotation_or_fallback
from gpuq_k8s.common.model.quantity import CPU, MEMORY
from gpuq_k8s.common.model.resources import EMPTY, Resources

# The resources a Queue's spec limits; every other key of a capability is a card type.
CPU_MEMORY: Final = (CPU, MEMORY)


@dataclass(frozen=True, slots=True)
class QueueQuota:
    """A Queue as this engine sees it.

    ``capability`` holds cpu, memory and each card type with a quota (milli-units); a key absent from
    it is 0 for cpu, memory and card types. ``configured`` is False when the Queue sets neither a
    cpu/memory capability nor a card quota (``EmptyQueueCapability``). ``guarantee`` and ``deserved``
    (cpu/memory from the spec, cards from the card quota, as upstream) feed the metrics only.
    """

    name: str
    capability: Resources = EMPTY
    open: bool = True
    configured: bool = False
    guarantee: Resources = EMPTY
    deserved: Resources = EMPTY
    events: tuple[EventRecord, ...] = ()

    @property
    def cards(self) -> Resources:
        return self.capability.without(CPU_MEMORY)


def queue_quota(queue: Queue) -> QueueQuota:
    """The quota of a Queue (spec "Queue Annotations for Card Quotas"; design.md Semantics 3, 7)."""
    text = queue.annotations.get(CARD_QUOTA)
    consequence = "card quota treated as 0 until the annotation is fixed"
    cards, event = annotation_or_fallback(queue.ref, text, parse_card_quota, EMPTY, consequence)
    cpu_memory = queue.spec.capability.only(CPU_MEMORY)
    return QueueQuota(
        name=queue.name,
        capability=cpu_memory + cards,
        open=queue.open,
        configured=bool(cpu_memory) or bool(cards),
        guarantee=queue.spec.guarantee.resource.only(CPU_MEMORY) + cards,
        deserved=queue.spec.deserved.only(CPU_MEMORY) + cards,
        events=() if event is None else (event,),
    )
