"""The GPUResourceQuota object: a namespace's quota in TFLOPS, VRAM and workers (gpu-resource-quota.md).

``tensor-fusion.ai/v1``, with the field names and json tags of tensor-fusion's
``api/v1/gpuresourcequota_types.go``, parsed from the wire model
(:class:`common.model.crd.GPUResourceQuotaWire`; unknown fields are ignored) into gpuq's integer units:
TFLOPS in milli-TFLOPS, VRAM in bytes (:mod:`common.model.quantity`), workers as a count. Also the
webhook's semantic validation (:func:`validate_gpu_resource_quota`) and the tensor-fusion annotations
its mutating webhook defaults from ``single.default*`` (:meth:`GPUResourceQuota.default_annotations`).

Decisions where the spec and upstream are silent or a trap:

* An absent limit is unlimited (``total.requests`` without ``vram`` does not cap VRAM; upstream's
  zero-valued Quantity caps it at 0). An explicit ``0`` is a real limit of 0, for totals *and* single
  limits (upstream ignores a zero single limit). A namespace without a GPUResourceQuota is unlimited.
* ``maxWorkers`` absent means unlimited (upstream's CRD defaults it to 32768, which an apiserver
  applies before gpuq sees the object); ``alertThresholdPercent`` absent means 95 (upstream default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict

from common.model import annotations as ann
from common.model.crd import GPU_RESOURCE_QUOTA_KIND, GPUResourceQuotaWire, TflopsVramWire
from common.model.errors import InvalidValue
from common.model.quantity import format_bytes, format_units, to_units
from common.model.wire import namespaced_object

KIND: Final = GPU_RESOURCE_QUOTA_KIND
DEFAULT_ALERT_THRESHOLD_PERCENT: Final = 95

TFLOPS: Final = "tflops"
VRAM: Final = "vram"

# The conditions gpuq writes in status (:mod:`.status`); the alert one is read back by from_dict.
CONDITION_READY: Final = "Ready"
CONDITION_ALERT: Final = "AlertThresholdReached"


def format_tflops(milli: int) -> str:
    return format_units(TFLOPS, milli)


def format_amount(sub: str, value: int) -> str:
    """``value`` of ``sub`` (:data:`TFLOPS` or :data:`VRAM`) as a quantity (``20``, ``16Gi``)."""
    return format_bytes(value) if sub == VRAM else format_tflops(value)


@dataclass(frozen=True, slots=True)
class TflopsVram:
    """A ``{tflops, vram}`` pair (tensor-fusion's ``Resource``); ``None`` = not set."""

    tflops: int | None = None  # milli-TFLOPS
    vram: int | None = None  # bytes


UNSET: Final = TflopsVram()


def _parse_amounts(raw: TflopsVramWire | None, field: str) -> TflopsVram:
    if raw is None:
        return UNSET
    tflops = to_units(TFLOPS, raw.tflops, f"{field}.tflops") if raw.tflops is not None else None
    vram = to_units(VRAM, raw.vram, f"{field}.vram") if raw.vram is not None else None
    return TflopsVram(tflops, vram)


class GPUResourceQuota(BaseModel):
    """A GPUResourceQuota with amounts in gpuq's integer units (see the module doc for defaults)."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    total_requests: TflopsVram = UNSET
    total_limits: TflopsVram = UNSET
    max_workers: int | None = None
    alert_threshold_percent: int = DEFAULT_ALERT_THRESHOLD_PERCENT
    max_requests: TflopsVram = UNSET
    max_limits: TflopsVram = UNSET
    max_gpu_count: int | None = None
    default_requests: TflopsVram = UNSET
    default_limits: TflopsVram = UNSET
    # status.conditions[AlertThresholdReached] as last written: no repeated alert event after a restart.
    alert_active: bool = False

    @property
    def uses_tflops(self) -> bool:
        """Some limit is in TFLOPS, so a pod's TFLOPS must be known to check it."""
        return any(
            x.tflops is not None
            for x in (self.total_requests, self.total_limits, self.max_requests, self.max_limits)
        )

    @property
    def uses_vram(self) -> bool:
        return any(
            x.vram is not None
            for x in (self.total_requests, self.total_limits, self.max_requests, self.max_limits)
        )

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> GPUResourceQuota:
        """Parse an API object; raises :class:`InvalidValue` naming the object and the field."""
        wire, namespace, name, where = namespaced_object(GPUResourceQuotaWire, obj, KIND)
        total, single = wire.spec.total, wire.spec.single
        alert_active = False
        conditions = (wire.status or {}).get("conditions")
        # status is gpuq's own output, read back only to avoid a repeated alert event after a restart;
        # a malformed one (a hand-edited manifest) just means no alert was active.
        for condition in conditions if isinstance(conditions, list) else ():
            if isinstance(condition, Mapping) and condition.get("type") == CONDITION_ALERT:
                alert_active = condition.get("status") == "True"
        try:
            return cls(
                namespace=namespace,
                name=name,
                total_requests=_parse_amounts(total.requests, "spec.total.requests"),
                total_limits=_parse_amounts(total.limits, "spec.total.limits"),
                max_workers=total.maxWorkers,
                alert_threshold_percent=(
                    DEFAULT_ALERT_THRESHOLD_PERCENT
                    if total.alertThresholdPercent is None
                    else total.alertThresholdPercent
                ),
                max_requests=_parse_amounts(single.maxRequests, "spec.single.maxRequests"),
                max_limits=_parse_amounts(single.maxLimits, "spec.single.maxLimits"),
                max_gpu_count=single.maxGPUCount,
                default_requests=_parse_amounts(single.defaultRequests, "spec.single.defaultRequests"),
                default_limits=_parse_amounts(single.defaultLimits, "spec.single.defaultLimits"),
                alert_active=alert_active,
            )
        except InvalidValue as err:
            raise err.located(where) from None

    @property
    def ref(self) -> str:
        return f"{KIND}/{self.namespace}/{self.name}"

    def validate_spec(self) -> None:
        """The webhook's semantic checks; raises the first :class:`InvalidValue`.

        Every amount non-negative; ``alertThresholdPercent`` within 0..100; ``maxGPUCount`` and
        ``maxWorkers`` non-negative; limits at least the requests they pair with (total limits vs
        total requests, ``maxLimits`` vs ``maxRequests``, ``defaultLimits`` vs ``defaultRequests``);
        defaults within the single maxima.
        """
        pairs = (
            ("spec.total.requests", self.total_requests),
            ("spec.total.limits", self.total_limits),
            ("spec.single.maxRequests", self.max_requests),
            ("spec.single.maxLimits", self.max_limits),
            ("spec.single.defaultRequests", self.default_requests),
            ("spec.single.defaultLimits", self.default_limits),
        )
        for field, amounts in pairs:
            for sub, value in ((TFLOPS, amounts.tflops), (VRAM, amounts.vram)):
                if value is not None and value < 0:
                    raise InvalidValue(
                        f"{field}.{sub}", format_amount(sub, value), "a non-negative quantity", self.ref
                    )
        for field, count in (
            ("spec.total.maxWorkers", self.max_workers),
            ("spec.single.maxGPUCount", self.max_gpu_count),
        ):
            if count is not None and count < 0:
                raise InvalidValue(field, count, "a non-negative integer", self.ref)
        if not 0 <= self.alert_threshold_percent <= 100:
            raise InvalidValue(
                "spec.total.alertThresholdPercent",
                self.alert_threshold_percent,
                "an integer from 0 to 100",
                self.ref,
            )
        checks = (
            ("spec.total.limits", self.total_limits, "spec.total.requests", self.total_requests, "at least"),
            (
                "spec.single.maxLimits",
                self.max_limits,
                "spec.single.maxRequests",
                self.max_requests,
                "at least",
            ),
            (
                "spec.single.defaultLimits",
                self.default_limits,
                "spec.single.defaultRequests",
                self.default_requests,
                "at least",
            ),
            (
                "spec.single.defaultRequests",
                self.default_requests,
                "spec.single.maxRequests",
                self.max_requests,
                "at most",
            ),
            (
                "spec.single.defaultLimits",
                self.default_limits,
                "spec.single.maxLimits",
                self.max_limits,
                "at most",
            ),
        )
        for field, pair, other_field, other, relation in checks:
            for sub in (TFLOPS, VRAM):
                mine, theirs = getattr(pair, sub), getattr(other, sub)
                if mine is None or theirs is None:
                    continue
                bad = mine < theirs if relation == "at least" else mine > theirs
                if bad:
                    raise InvalidValue(
                        f"{field}.{sub}",
                        format_amount(sub, mine),
                        f"{relation} {other_field}.{sub} = {format_amount(sub, theirs)}",
                        self.ref,
                    )

    def default_annotations(self, annotations: Mapping[str, str]) -> dict[str, str]:
        """The tensor-fusion annotations the mutating webhook adds to a GPU pod from ``single.default*``.

        Only keys the pod does not set and the quota has a default for; the caller decides which pods
        are GPU pods.
        """
        added: dict[str, str] = {}
        wanted = (
            (ann.TF_TFLOPS_REQUEST, self.default_requests.tflops, TFLOPS),
            (ann.TF_VRAM_REQUEST, self.default_requests.vram, VRAM),
            (ann.TF_TFLOPS_LIMIT, self.default_limits.tflops, TFLOPS),
            (ann.TF_VRAM_LIMIT, self.default_limits.vram, VRAM),
        )
        for key, value, sub in wanted:
            if key not in annotations and value is not None:
                added[key] = format_amount(sub, value)
        return added


def validate_gpu_resource_quota(obj: Mapping[str, Any]) -> GPUResourceQuota:
    """Parse and semantically validate a GPUResourceQuota for admission (CREATE/UPDATE)."""
    quota = GPUResourceQuota.from_dict(obj)
    quota.validate_spec()
    return quota
