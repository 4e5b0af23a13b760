"""One shape for every "no" a quota rule gives: a :class:`Refusal` carrying the :class:`GpuqError` that
explains it.

Every check in the engines answers ``Refusal | None``: ``None`` is "allowed". The webhook raises
``refusal.error`` (its message is the denial), the scheduler turns a refusal into a Status
(``unresolvable`` picks kube-scheduler's UnschedulableAndUnresolvable) and, where the design names one, an
Event with ``reason``; ``rule`` tells callers that branch on *which* rule said no (ElasticQuota's
``max`` against the guaranteed pool) without parsing messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.events import EventRecord
from gpuq_k8s.common.model.quota_exceeded import QuotaExceeded


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a quota rule refused: ``error`` explains it; ``reason`` is the Event reason (may be empty)."""

    error: GpuqError = field(compare=False)
    reason: str = ""
    rule: str = ""
    # Prefixed to the message: the object the refusal is about when the error does not name it.
    subject: str = ""

    @property
    def message(self) -> str:
        text = str(self.error)
        return f"{self.subject}: {text}" if self.subject else text

    @property
    def identity(self) -> str:
        """What tells two refusals apart for their Warning event: the message, except that a quota
        refusal that can never fit is the same refusal whatever the usage it quotes (8 asked of a
        limit of 4 stays that while the usage moves), so it is reported once, not once per figure."""
        error = self.error
        if isinstance(error, QuotaExceeded):
            outlook = error.outlook
            if outlook is not None and outlook.never:
                return f"{self.subject}|{type(error).__name__}|{error.scope}|{error.resource}|{outlook}"
        return self.message

    @property
    def unresolvable(self) -> bool:
        """No amount of waiting or preemption helps (per-workload limits, unreadable requests)."""
        return not isinstance(self.error, QuotaExceeded) or self.error.unresolvable

    def event(self, obj: str) -> EventRecord:
        """The Warning event for ``obj`` (``Pod/ns/p``, ``PodGroup/ns/pg``)."""
        return EventRecord(obj, "Warning", self.reason, self.message)

    def raise_error(self) -> NoReturn:
        raise self.error
