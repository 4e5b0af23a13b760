"""How the capacity-card checks say no: :class:`~common.model.refusal.Refusal` values carrying
upstream's event reasons (capacity-card.md "Event Recording").

The job-mode check (:mod:`.enqueue`) and the task-mode checks (:mod:`.task`) build their refusals
here, so a closed queue, a queue with no capability and a quota shortfall read the same in both
modes. Amounts are quoted in the resource's own unit: cpu in cores, memory in bytes, cards in cards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.annotations import CARD_QUOTA
from gpuq_k8s.common.model.capacity_card.quota import CPU_MEMORY, QueueQuota
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.events import (
    EMPTY_QUEUE_CAPABILITY,
    INSUFFICIENT_CPU_QUOTA,
    INSUFFICIENT_MEMORY_QUOTA,
)
from gpuq_k8s.common.model.quantity import CPU, MEMORY, format_units
from gpuq_k8s.common.model.quota_exceeded import QuotaExceeded
from gpuq_k8s.common.model.refusal import Refusal
from gpuq_k8s.common.model.wire import object_ref

# Not one of Volcano's event reasons (upstream only logs it); the scheduler shows it as the reason.
QUEUE_CLOSED: Final = "QueueClosed"


class NoCardTypeFits(QuotaExceeded):
    """No card type among a pod's candidates has quota left for it (design.md Semantics 1: each card
    type is checked on its own). Its fields are the first refused candidate's; its message names
    every refused candidate's shortfall."""

    def __init__(self, candidates: str, shortfalls: Sequence[QuotaExceeded]) -> None:
        self.candidates = candidates
        self.shortfalls = tuple(shortfalls)
        first = self.shortfalls[0] if self.shortfalls else QuotaExceeded(candidates, "", "", "")
        super().__init__(
            first.resource, first.requested, first.available, first.limit, scope=first.scope, used=first.used
        )

    def _render(self) -> str:
        return f"no card type among {self.candidates} has quota for the pod: " + "; ".join(
            str(shortfall) for shortfall in self.shortfalls
        )


def _amount(resource: str, amount: int) -> str:
    # Card keys are not known resource names to quantity.py; cards are milli-unit counts.
    return format_units(resource if resource in CPU_MEMORY else "cards", amount)


def exceeded(queue: str, resource: str, requested: int, used: int, limit: int) -> QuotaExceeded:
    """``used`` is what counts against the limit *before* this request."""
    return QuotaExceeded(
        resource,
        _amount(resource, requested),
        _amount(resource, max(limit - used, 0)),
        _amount(resource, limit),
        scope=kinds.QUEUE.ref("", queue),
        used=_amount(resource, used),
    )


def queue_closed(queue: str, consequence: str) -> Refusal:
    """A Queue that is not Open: ``consequence`` says what it refuses (new jobs, new pods)."""
    return Refusal(GpuqError(f"{object_ref('Queue', '', queue)} is closed: {consequence}"), QUEUE_CLOSED)


def empty_capability(quota: QueueQuota) -> Refusal:
    """A Queue with neither a cpu/memory capability nor a card quota asked for anything."""
    message = (
        f"{object_ref('Queue', '', quota.name)} has no capability: set spec.capability (cpu, memory) or the "
        f"{CARD_QUOTA} annotation"
    )
    return Refusal(GpuqError(message), EMPTY_QUEUE_CAPABILITY)


def cpu_memory_refusal(
    quota: QueueQuota, asked: Mapping[str, int], used: Mapping[str, int]
) -> Refusal | None:
    """``used + asked <= capability`` for cpu, then memory; a resource not asked for always fits."""
    for resource, reason in ((CPU, INSUFFICIENT_CPU_QUOTA), (MEMORY, INSUFFICIENT_MEMORY_QUOTA)):
        wanted = asked.get(resource, 0)
        held = used.get(resource, 0)
        limit = quota.capability.amount(resource)
        if wanted > 0 and held + wanted > limit:
            return Refusal(exceeded(quota.name, resource, wanted, held, limit), reason)
    return None
