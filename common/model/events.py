"""Event reasons gpuq emits (design.md, "Events"), and the event record the engines return.

Engines never emit events themselves (they do no I/O): they return :class:`EventRecord` values and
the scheduler or simulator turns them into Kubernetes Events or JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, TypeVar

from gpuq_k8s.common.model.errors import InvalidAnnotation

GET_TASK_REQUEST_RESOURCE_FAILED: Final = "GetTaskRequestResourceFailed"
EMPTY_QUEUE_CAPABILITY: Final = "EmptyQueueCapability"
INSUFFICIENT_CPU_QUOTA: Final = "InsufficientCPUQuota"
INSUFFICIENT_MEMORY_QUOTA: Final = "InsufficientMemoryQuota"
INSUFFICIENT_SCALAR_QUOTA: Final = "InsufficientScalarQuota"
# A PodGroup its namespace's ElasticQuota cannot hold now is kept Pending (elastic/enqueue.py).
INSUFFICIENT_ELASTIC_QUOTA: Final = "InsufficientElasticQuota"
QUOTA_ALERT_THRESHOLD: Final = "QuotaAlertThreshold"
FAILED_SCHEDULING: Final = "FailedScheduling"
SCHEDULED: Final = "Scheduled"
PREEMPTED: Final = "Preempted"
# Semantics 3: a malformed annotation met on an object that predates the webhook.
INVALID_ANNOTATION: Final = "InvalidAnnotation"
# An error of gpuq's own (a bug) met on one object, contained to it (scheduler/containment.py).
INTERNAL_ERROR: Final = "InternalError"

EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True, slots=True)
class EventRecord:
    """An event to emit: ``obj`` is ``Kind/namespace/name``, ``Kind/name`` for cluster scope."""

    obj: str
    type: EventType
    reason: str
    message: str


def invalid_annotation(obj: str, message: str) -> EventRecord:
    """The Warning event on an object gpuq met malformed (design.md Semantics 3)."""
    return EventRecord(obj, "Warning", INVALID_ANNOTATION, message)


Raw = TypeVar("Raw")
Parsed = TypeVar("Parsed")


def annotation_or_fallback(
    obj: str, raw: Raw | None, parse: Callable[[Raw, str], Parsed], fallback: Parsed, consequence: str
) -> tuple[Parsed, EventRecord | None]:
    """``parse(raw, obj)``; ``fallback`` when ``raw`` is absent (None), or when it is malformed, with the
    Warning event that says so (design.md Semantics 3).

    A malformed annotation on an object that predates the webhook never stops the scheduler: the
    rule falls back to its documented default and the object gets an ``InvalidAnnotation`` event
    whose message is the parse error followed by ``consequence`` (what gpuq does meanwhile).
    """
    if raw is None:
        return fallback, None
    try:
        return parse(raw, obj), None
    except InvalidAnnotation as err:
        return fallback, invalid_annotation(obj, f"{err}; {consequence}")
