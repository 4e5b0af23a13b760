"""A GPUResourceQuota's status (gpu-resource-quota.md "Status Reporting Structure").

What a status sync writes for one namespace from its quota and usage: ``used``, ``availablePercent``
(a two-decimal string per limited resource), the ``Ready`` and ``AlertThresholdReached`` conditions,
the ratios behind the ``gpuq_gpu_quota_usage_ratio`` metric, and the QuotaAlertThreshold event when usage
crosses the alert threshold upward. :class:`ReportedStatus` is what the previous sync said, so a
condition keeps its ``lastTransitionTime`` while its status holds and the event fires once per crossing.

Decisions: ``availablePercent`` of a limit of 0 is ``100.00`` while nothing is used (tensor-fusion's
division guard) and ``0.00`` once something is (an explicit 0 is a real limit, Semantics 5);
``AlertThresholdReached`` is True when any ratio ``used / limit`` *exceeds* ``threshold%``
(strictly greater, as tensor-fusion words and tests it: usage exactly at the threshold does not alert;
design.md Semantics 11); ``Ready`` is False only while usage is above a total (after the quota was
lowered below current usage).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from gpuq_k8s.common.model.events import QUOTA_ALERT_THRESHOLD, EventRecord
from gpuq_k8s.common.model.gpu_quota.quota import (
    CONDITION_ALERT,
    CONDITION_READY,
    TFLOPS,
    VRAM,
    GPUResourceQuota,
    format_tflops,
)
from gpuq_k8s.common.model.gpu_quota.request import GPURequest
from gpuq_k8s.common.model.quantity import format_bytes


@dataclass(frozen=True, slots=True)
class GPUQuotaStatus:
    """What a status sync writes and reports for one namespace."""

    status: dict[str, Any]  # the CR's `status`
    ratios: dict[str, float]  # resource_type -> used/limit, for gpuq_gpu_quota_usage_ratio
    event: EventRecord | None  # QuotaAlertThreshold when usage crossed the threshold upward


class ReportedStatus:
    """What the last status computed for one namespace said: its conditions and whether the alert was
    active (set from the object's own status after a restart, so no alert event repeats)."""

    __slots__ = ("alerting", "conditions")

    def __init__(self, alerting: bool = False) -> None:
        self.alerting = alerting
        self.conditions: dict[str, dict[str, str]] = {}


# resource_type label values of gpuq_gpu_quota_usage_ratio, and availablePercent keys.
REQUESTS_TFLOPS: Final = "requests.tflops"
REQUESTS_VRAM: Final = "requests.vram"
LIMITS_TFLOPS: Final = "limits.tflops"
LIMITS_VRAM: Final = "limits.vram"
WORKERS: Final = "workers"


def quota_status(
    quota: GPUResourceQuota, usage: GPURequest, reported: ReportedStatus, now: datetime
) -> GPUQuotaStatus:
    """The status to write for ``quota`` with ``usage`` (totals, ``gpu_count`` = workers, as
    :meth:`~common.model.gpu_quota.store.GPUQuotaStore.usage` gives it); updates ``reported``.

    Both conditions are always present. The alert event is returned only when usage crosses the
    threshold upward, not on every call.
    """
    stamp = _rfc3339(now)
    rows = (
        (REQUESTS_TFLOPS, usage.tflops_request, quota.total_requests.tflops),
        (REQUESTS_VRAM, usage.vram_request, quota.total_requests.vram),
        (LIMITS_TFLOPS, usage.tflops_limit, quota.total_limits.tflops),
        (LIMITS_VRAM, usage.vram_limit, quota.total_limits.vram),
        (WORKERS, usage.gpu_count, quota.max_workers),
    )
    available: dict[str, str] = {}
    ratios: dict[str, float] = {}
    alerting: list[str] = []
    over: list[str] = []
    threshold = quota.alert_threshold_percent
    for name, used, limit in rows:
        if limit is None:
            continue
        available[name] = _available_percent(used, limit)
        ratios[name] = used / limit if limit > 0 else (1.0 if used > 0 else 0.0)
        if used * 100 > threshold * limit:  # exceeds (Semantics 11); a limit of 0: any usage
            alerting.append(name)
        if used > limit:
            over.append(name)

    if over:
        ready = ("False", "QuotaExceeded", f"Usage is above the quota for {', '.join(over)}")
    else:
        ready = ("True", "QuotaActive", "GPU resource quota is active and enforced")
    if alerting:
        alert = (
            "True",
            "ThresholdReached",
            f"Usage of {', '.join(alerting)} exceeded the {threshold}% alert threshold",
        )
    else:
        alert = ("False", "BelowThreshold", f"Usage is at or below the {threshold}% alert threshold")
    conditions = [
        _condition(reported, CONDITION_READY, ready, stamp),
        _condition(reported, CONDITION_ALERT, alert, stamp),
    ]

    event = None
    if alerting and not reported.alerting:
        event = EventRecord(quota.ref, "Warning", QUOTA_ALERT_THRESHOLD, alert[2])
    reported.alerting = bool(alerting)
    status = {
        "used": {
            "requests": {TFLOPS: format_tflops(usage.tflops_request), VRAM: format_bytes(usage.vram_request)},
            "limits": {TFLOPS: format_tflops(usage.tflops_limit), VRAM: format_bytes(usage.vram_limit)},
            "workers": usage.gpu_count,
        },
        "availablePercent": available,
        "conditions": conditions,
        "lastUpdateTime": stamp,
    }
    return GPUQuotaStatus(status, ratios, event)


def _condition(
    reported: ReportedStatus, kind: str, value: tuple[str, str, str], stamp: str
) -> dict[str, str]:
    status, reason, message = value
    previous = reported.conditions.get(kind)
    since = previous["lastTransitionTime"] if previous and previous["status"] == status else stamp
    condition = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }
    reported.conditions[kind] = condition
    return dict(condition)


def _rfc3339(now: datetime) -> str:
    aware = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _available_percent(used: int, limit: int) -> str:
    """``(limit - used) / limit`` as a percentage with two decimals, rounded half up, within 0..100.

    A limit of 0 with nothing used is 100: nothing of it is taken (tensor-fusion's calculator guards
    the division the same way, ``internal/quota/calculator.go`` calculateResourcePercent). With
    something used it is 0, where tensor-fusion still says 100: gpuq holds an explicit 0 to be a real
    limit (design.md Semantics 5), so usage under it leaves nothing available, as the
    AlertThresholdReached condition (True for any use of a limit of 0) says too."""
    if limit <= 0:
        return "100.00" if used <= 0 else "0.00"
    free = min(max(limit - used, 0), limit)
    hundredths = (free * 20000 + limit) // (2 * limit)
    return f"{hundredths // 100}.{hundredths % 100:02d}"
