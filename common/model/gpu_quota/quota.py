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

Two layouts, one model (design.md Semantics 12): tensor-fusion's CRD layout above, and the
gpu-resource-quota design's (``total["requests.tflops"]``, ``total["requests.vram"]``,
``total.workers``, ``single.max{tflops,vram,workers}``, ``single.min{tflops,vram}``). ``total.workers``
is ``maxWorkers``; ``single.max.tflops``/``vram`` are ``maxRequests`` (a workload's per-GPU request);
``single.max.workers`` is ``maxGPUCount`` (a workload's GPU count); ``single.min`` is a per-GPU
request *minimum* with no tensor-fusion counterpart, refused below it like the maxima. A limit set in
both layouts with different values is an error naming both fields; messages name a limit by the field
the quota set it with. ``maxWorkers: 32768`` (the CRD default an apiserver writes into every object
that omits it) never conflicts with ``total.workers``: the design's value wins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict

from gpuq_k8s.common.model import annotations as ann
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.crd import (
    GPUResourceQuotaWire,
    GPUSingleMaxWire,
    TflopsVramWire,
)
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.quantity import format_bytes, format_units, to_units
from gpuq_k8s.common.model.quoting import quote
from gpuq_k8s.common.model.wire import namespaced_object

KIND: Final = kinds.GPU_RESOURCE_QUOTA.kind
DEFAULT_ALERT_THRESHOLD_PERCENT: Final = 95
# The CRD's default maxWorkers (tensor-fusion's kubebuilder default), present in every stored object.
CRD_DEFAULT_MAX_WORKERS: Final = 32768
# A limit's tensor-fusion field -> the design layout's field for it (Semantics 12).
DESIGN_FIELDS: Final = {
    "total.maxWorkers": "total.workers",
    "single.maxRequests.tflops": "single.max.tflops",
    "single.maxRequests.vram": "single.max.vram",
    "single.maxGPUCount": "single.max.workers",
}

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


def _parse_amounts(raw: TflopsVramWire | GPUSingleMaxWire | None, field: str) -> TflopsVram:
    if raw is None:
        return UNSET
    return TflopsVram(
        _amount(TFLOPS, raw.tflops, f"{field}.tflops"), _amount(VRAM, raw.vram, f"{field}.vram")
    )


def _amount(sub: str, raw: str | int | float | None, field: str) -> int | None:
    return None if raw is None else to_units(sub, raw, field)


class _Layouts:
    """Merges a limit the quota may set in either layout; remembers which came from the design's."""

    def __init__(self) -> None:
        self.design: set[str] = set()

    def one(
        self, name: str, ours: int | None, design_field: str, theirs: int | None, sub: str = ""
    ) -> int | None:
        """``ours`` (tensor-fusion's ``spec.<name>``) or ``theirs`` (``spec.<design_field>``)."""
        if theirs is None:
            return ours
        if ours is None or (name == "total.maxWorkers" and ours == CRD_DEFAULT_MAX_WORKERS):
            if name in DESIGN_FIELDS:
                self.design.add(name)
            return theirs
        if ours != theirs:
            show: Callable[[int], str] = (lambda v: format_amount(sub, v)) if sub else quote  # any integer
            raise InvalidValue(
                f"spec.{design_field}",
                show(theirs),
                f"{show(ours)}, the value of spec.{name} (a limit set in both layouts must agree)",
            )
        return ours

    def pair(
        self, name: str, ours: TflopsVram, design_fields: tuple[str, str], theirs: TflopsVram
    ) -> TflopsVram:
        return TflopsVram(
            self.one(f"{name}.{TFLOPS}", ours.tflops, design_fields[0], theirs.tflops, TFLOPS),
            self.one(f"{name}.{VRAM}", ours.vram, design_fields[1], theirs.vram, VRAM),
        )


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
    # The design layout's single.min: a workload's per-GPU request may not be below it.
    min_requests: TflopsVram = UNSET
    # Limits (DESIGN_FIELDS keys) the quota set in the design's layout: messages use its names.
    design_fields: frozenset[str] = frozenset()
    # status.conditions[AlertThresholdReached] as last written: no repeated alert event after a restart.
    alert_active: bool = False

    @property
    def _limits(self) -> tuple[TflopsVram, ...]:
        """Every {tflops, vram} pair that limits a pod (defaults only fill requests in)."""
        return (self.total_requests, self.total_limits, self.max_requests, self.max_limits, self.min_requests)

    @property
    def uses_tflops(self) -> bool:
        """Some limit is in TFLOPS, so a pod's TFLOPS must be known to check it."""
        return any(x.tflops is not None for x in self._limits)

    @property
    def uses_vram(self) -> bool:
        return any(x.vram is not None for x in self._limits)

    def field_name(self, field: str) -> str:
        """``field`` (``single.maxGPUCount``, optionally ``spec.``-prefixed) as this quota spells it:
        the design layout's name when the quota set that limit in the design's layout."""
        prefix = "spec." if field.startswith("spec.") else ""
        bare = field.removeprefix(prefix)
        return prefix + DESIGN_FIELDS[bare] if bare in self.design_fields else field

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
            layouts = _Layouts()
            total_requests = layouts.pair(
                "total.requests",
                _parse_amounts(total.requests, "spec.total.requests"),
                ('total["requests.tflops"]', 'total["requests.vram"]'),
                TflopsVram(
                    _amount(TFLOPS, total.requests_tflops, 'spec.total["requests.tflops"]'),
                    _amount(VRAM, total.requests_vram, 'spec.total["requests.vram"]'),
                ),
            )
            design_max = single.max
            max_requests = layouts.pair(
                "single.maxRequests",
                _parse_amounts(single.maxRequests, "spec.single.maxRequests"),
                ("single.max.tflops", "single.max.vram"),
                _parse_amounts(design_max, "spec.single.max"),
            )
            return cls(
                namespace=namespace,
                name=name,
                total_requests=total_requests,
                total_limits=_parse_amounts(total.limits, "spec.total.limits"),
                max_workers=layouts.one("total.maxWorkers", total.maxWorkers, "total.workers", total.workers),
                alert_threshold_percent=(
                    DEFAULT_ALERT_THRESHOLD_PERCENT
                    if total.alertThresholdPercent is None
                    else total.alertThresholdPercent
                ),
                max_requests=max_requests,
                max_limits=_parse_amounts(single.maxLimits, "spec.single.maxLimits"),
                max_gpu_count=layouts.one(
                    "single.maxGPUCount",
                    single.maxGPUCount,
                    "single.max.workers",
                    design_max.workers if design_max is not None else None,
                ),
                default_requests=_parse_amounts(single.defaultRequests, "spec.single.defaultRequests"),
                default_limits=_parse_amounts(single.defaultLimits, "spec.single.defaultLimits"),
                min_requests=_parse_amounts(single.min, "spec.single.min"),
                design_fields=frozenset(layouts.design),
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
        defaults within the single maxima and minima; ``single.min`` at most the single maxima.
        Fields are named as the quota spelled them (:meth:`field_name`).
        """
        pairs = (
            ("spec.total.requests", self.total_requests),
            ("spec.total.limits", self.total_limits),
            ("spec.single.maxRequests", self.max_requests),
            ("spec.single.maxLimits", self.max_limits),
            ("spec.single.defaultRequests", self.default_requests),
            ("spec.single.defaultLimits", self.default_limits),
            ("spec.single.min", self.min_requests),
        )
        for field, amounts in pairs:
            for sub, value in ((TFLOPS, amounts.tflops), (VRAM, amounts.vram)):
                if value is not None and value < 0:
                    raise InvalidValue(
                        self.field_name(f"{field}.{sub}"),
                        format_amount(sub, value),
                        "a non-negative quantity",
                        self.ref,
                    )
        for field, count in (
            ("spec.total.maxWorkers", self.max_workers),
            ("spec.single.maxGPUCount", self.max_gpu_count),
        ):
            if count is not None and count < 0:
                raise InvalidValue(self.field_name(field), count, "a non-negative integer", self.ref)
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
            ("spec.single.min", self.min_requests, "spec.single.maxRequests", self.max_requests, "at most"),
            (
                "spec.single.defaultRequests",
                self.default_requests,
                "spec.single.min",
                self.min_requests,
                "at least",
            ),
        )
        for field, pair, other_field, other, relation in checks:
            for sub in (TFLOPS, VRAM):
                mine, theirs = getattr(pair, sub), getattr(other, sub)
                if mine is None or theirs is None:
                    continue
                bad = mine < theirs if relation == "at least" else mine > theirs
                if bad:
                    other_name = self.field_name(f"{other_field}.{sub}")
                    raise InvalidValue(
                        self.field_name(f"{field}.{sub}"),
                        format_amount(sub, mine),
                        f"{relation} {other_name} = {format_amount(sub, theirs)}",
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
