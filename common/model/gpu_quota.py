"""GPUResourceQuota: namespace quotas in TFLOPS, VRAM and workers (gpu-resource-quota.md).

Three parts:

* the object (:class:`GPUResourceQuota`, ``tensor-fusion.ai/v1``, field names and json tags of
  tensor-fusion's ``api/v1/gpuresourcequota_types.go``; unknown fields are ignored) and the webhook's
  validation (:func:`validate_gpu_resource_quota`);
* a pod's GPU request (:func:`pod_gpu_request`, DESIGN.md Semantics 5): the tensor-fusion
  annotations, else derived from the card it lands on;
* the in-memory :class:`GPUQuotaStore` (spec "QuotaStore"): single and total checks, atomic
  check-and-allocate, clamped deallocation, reconcile, dirty set, status and alert events.

Units: TFLOPS in milli-TFLOPS, VRAM in bytes (:mod:`common.model.quantity`), workers as a count.

Decisions where the spec and upstream are silent or a trap:

* An absent limit is unlimited (``total.requests`` without ``vram`` does not cap VRAM; upstream's
  zero-valued Quantity caps it at 0). An explicit ``0`` is a real limit of 0, for totals *and* single
  limits (upstream ignores a zero single limit). A namespace without a GPUResourceQuota is unlimited.
* ``maxWorkers`` absent means unlimited (upstream's CRD defaults it to 32768, which an apiserver
  applies before gpuq sees the object); ``alertThresholdPercent`` absent means 95 (upstream default).
* Single limits compare the *per-GPU* request and limit with ``maxRequests``/``maxLimits`` and the
  GPU count with ``maxGPUCount``; totals charge ``per-GPU x count`` (as upstream's calculator).
* ``AlertThresholdReached`` is True when any ratio ``used / limit >= threshold%``; ``Ready`` is False
  only while usage is above a total (after the quota was lowered below current usage).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from common.model import annotations as ann
from common.model.cards import CardType, NodeCards, is_gpu_resource
from common.model.crd import (
    GPU_RESOURCE_QUOTA_API_VERSION,
    GPU_RESOURCE_QUOTA_KIND,
    GPUResourceQuotaWire,
    TflopsVramWire,
)
from common.model.errors import InvalidAnnotation, InvalidValue, QuotaExceeded
from common.model.events import INVALID_ANNOTATION, QUOTA_ALERT_THRESHOLD, EventRecord
from common.model.gpu_specs import card_tflops
from common.model.nodes import NodeInfo
from common.model.pods import PodInfo
from common.model.quantity import format_bytes, format_units, parse_quantity, to_units
from common.model.wire import namespaced_object

API_VERSION: Final = GPU_RESOURCE_QUOTA_API_VERSION
KIND: Final = GPU_RESOURCE_QUOTA_KIND
DEFAULT_ALERT_THRESHOLD_PERCENT: Final = 95
# Stands for "no limit" in the store's plain-int hot path: above any real sum, far below int64 overflow.
UNLIMITED: Final = 1 << 62
DEFAULT_LABEL_PREFIX: Final = "nvidia.com/gpu"
# tensor-fusion's gpu-count is a uint32-sized count; bounding it keeps per-GPU amount x count within
# the int64 arrays of fits_array instead of overflowing there.
MAX_GPU_COUNT: Final = 2**31 - 1

TFLOPS: Final = "tflops"
VRAM: Final = "vram"
# resource_type label values of gpu_quota_usage_ratio, and availablePercent keys.
REQUESTS_TFLOPS: Final = "requests.tflops"
REQUESTS_VRAM: Final = "requests.vram"
LIMITS_TFLOPS: Final = "limits.tflops"
LIMITS_VRAM: Final = "limits.vram"
WORKERS: Final = "workers"
RESOURCE_TYPES: Final = (REQUESTS_TFLOPS, REQUESTS_VRAM, LIMITS_TFLOPS, LIMITS_VRAM, WORKERS)

CONDITION_READY: Final = "Ready"
CONDITION_ALERT: Final = "AlertThresholdReached"


def _fmt_tflops(milli: int) -> str:
    return format_units(TFLOPS, milli)


# --------------------------------------------------------------------------------------------------
# The object
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TflopsVram:
    """A ``{tflops, vram}`` pair (tensor-fusion's ``Resource``); ``None`` = not set."""

    tflops: int | None = None  # milli-TFLOPS
    vram: int | None = None  # bytes


_UNSET: Final = TflopsVram()


def _parse_amounts(raw: TflopsVramWire | None, field: str) -> TflopsVram:
    if raw is None:
        return _UNSET
    tflops = to_units(TFLOPS, raw.tflops, f"{field}.tflops") if raw.tflops is not None else None
    vram = to_units(VRAM, raw.vram, f"{field}.vram") if raw.vram is not None else None
    return TflopsVram(tflops, vram)


class GPUResourceQuota(BaseModel):
    """A GPUResourceQuota with amounts in gpuq's integer units (see the module doc for defaults)."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    total_requests: TflopsVram = _UNSET
    total_limits: TflopsVram = _UNSET
    max_workers: int | None = None
    alert_threshold_percent: int = DEFAULT_ALERT_THRESHOLD_PERCENT
    max_requests: TflopsVram = _UNSET
    max_limits: TflopsVram = _UNSET
    max_gpu_count: int | None = None
    default_requests: TflopsVram = _UNSET
    default_limits: TflopsVram = _UNSET
    # status.conditions[AlertThresholdReached] as last written: no repeated alert event after a restart.
    alert_active: bool = False

    @property
    def ref(self) -> str:
        return f"{KIND}/{self.namespace}/{self.name}"

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
                        f"{field}.{sub}", _fmt(sub, value), "a non-negative quantity", self.ref
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
                        _fmt(sub, mine),
                        f"{relation} {other_field}.{sub} = {_fmt(sub, theirs)}",
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
                added[key] = _fmt(sub, value)
        return added


def _fmt(sub: str, value: int) -> str:
    return format_bytes(value) if sub == VRAM else _fmt_tflops(value)


def validate_gpu_resource_quota(obj: Mapping[str, Any]) -> GPUResourceQuota:
    """Parse and semantically validate a GPUResourceQuota for admission (CREATE/UPDATE)."""
    quota = GPUResourceQuota.from_dict(obj)
    quota.validate_spec()
    return quota


# --------------------------------------------------------------------------------------------------
# A pod's GPU request (Semantics 5)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GPURequest:
    """One worker's GPU request: per-GPU amounts and the number of GPUs (totals are ``x gpu_count``)."""

    tflops_request: int = 0  # milli-TFLOPS per GPU
    vram_request: int = 0  # bytes per GPU
    tflops_limit: int = 0
    vram_limit: int = 0
    gpu_count: int = 1

    def totals(self) -> tuple[int, int, int, int]:
        """(requests.tflops, requests.vram, limits.tflops, limits.vram) charged to the namespace."""
        n = self.gpu_count
        return (self.tflops_request * n, self.vram_request * n, self.tflops_limit * n, self.vram_limit * n)


def request_from_annotations(pod: PodInfo, quota: GPUResourceQuota | None = None) -> GPURequest | None:
    """The request the tensor-fusion annotations state, or ``None`` if the pod has none of them.

    A missing request falls back to the quota's ``single.defaultRequests``, else to the limit, else
    0; a missing limit to ``single.defaultLimits``, else to the request. ``gpu-count`` defaults to 1.
    Raises :class:`InvalidAnnotation` naming the pod, the annotation and the value.
    """
    a = pod.annotations
    if not any(key in a for key in ann.TENSOR_FUSION_ANNOTATIONS):
        return None

    def amount(key: str, resource: str) -> int | None:
        if key not in a:
            return None
        value = a[key]
        try:
            parsed = to_units(resource, value, key)
        except InvalidValue:
            raise InvalidAnnotation(
                key, value, "a Kubernetes quantity such as 20, 500m or 16Gi", pod.ref
            ) from None
        if parsed < 0:
            raise InvalidAnnotation(key, value, "a non-negative quantity", pod.ref)
        return parsed

    tflops_req = amount(ann.TF_TFLOPS_REQUEST, TFLOPS)
    vram_req = amount(ann.TF_VRAM_REQUEST, VRAM)
    tflops_lim = amount(ann.TF_TFLOPS_LIMIT, TFLOPS)
    vram_lim = amount(ann.TF_VRAM_LIMIT, VRAM)
    count = 1
    if ann.TF_GPU_COUNT in a:
        raw = a[ann.TF_GPU_COUNT]
        try:
            parsed_count = parse_quantity(raw, ann.TF_GPU_COUNT)
        except InvalidValue:
            parsed_count = Fraction(-1)
        if parsed_count.denominator != 1 or not 1 <= parsed_count <= MAX_GPU_COUNT:
            raise InvalidAnnotation(
                ann.TF_GPU_COUNT, raw, f"a whole number of GPUs from 1 to {MAX_GPU_COUNT}", pod.ref
            )
        count = int(parsed_count)
    defaults_req = quota.default_requests if quota else _UNSET
    defaults_lim = quota.default_limits if quota else _UNSET
    tflops_req = _first(tflops_req, defaults_req.tflops, tflops_lim, 0)
    vram_req = _first(vram_req, defaults_req.vram, vram_lim, 0)
    tflops_lim = _first(tflops_lim, defaults_lim.tflops, tflops_req, 0)
    vram_lim = _first(vram_lim, defaults_lim.vram, vram_req, 0)
    for key, lim, req, sub in (
        (ann.TF_TFLOPS_LIMIT, tflops_lim, tflops_req, TFLOPS),
        (ann.TF_VRAM_LIMIT, vram_lim, vram_req, VRAM),
    ):
        if lim < req:
            raise InvalidAnnotation(
                key, a.get(key, _fmt(sub, lim)), f"at least the request {_fmt(sub, req)}", pod.ref
            )
    return GPURequest(tflops_req, vram_req, tflops_lim, vram_lim, count)


def _first(*values: int | None) -> int:
    for value in values:
        if value is not None:
            return value
    return 0


_MIG_PROFILE: Final = re.compile(r"^(?:(?P<c>\d+)c\.)?(?P<g>\d+)g\.(?P<gb>\d+)gb")


@dataclass(frozen=True, slots=True)
class CardShare:
    """What one allocatable unit of a card type is worth: ``None`` where gpuq cannot tell."""

    tflops: int | None  # milli-TFLOPS
    vram: int | None  # bytes


def card_share(
    card: CardType, node_labels: Mapping[str, str] | None = None, label_prefix: str = DEFAULT_LABEL_PREFIX
) -> CardShare:
    """TFLOPS and VRAM of one unit of ``card`` (a whole card, one MIG instance, one MPS replica).

    Whole card: ``.memory`` label (MiB, Semantics 9) and TFLOPS from the ``<prefix>.tflops`` node
    label, else :mod:`common.model.gpu_specs`.

    MIG ``[<c>c.]<g>g.<n>gb``: VRAM is the profile's ``n`` GiB (NVIDIA names profiles by the card's
    nominal memory split in eighths: on a 40 GB A100 ``1g.5gb`` is 1/8 of 40 GiB, so the profile
    number is the exact share of the nominal size); TFLOPS is ``c`` (else ``g``) sevenths of the
    card (A30: quarters), the compute slices the instance owns.

    MPS: memory and TFLOPS divided by ``replicas`` (rounded up: never under-charge).
    """
    labels = node_labels or {}
    tflops_milli: int | None = None
    label = labels.get(f"{label_prefix}.tflops")
    if label is not None:
        try:
            tflops_milli = to_units(TFLOPS, label, f"{label_prefix}.tflops")
        except InvalidValue:
            tflops_milli = None
    if tflops_milli is None:
        table = card_tflops(card.product)
        tflops_milli = round(table * 1000) if table is not None else None
    vram = card.memory_mib * 2**20 if card.memory_mib is not None else None

    if card.kind == "mig" and card.mig_profile:
        match = _MIG_PROFILE.match(card.mig_profile)
        if match is None:
            return CardShare(None, None)
        slices = 4 if "A30" in card.product.upper() else 7
        used_slices = int(match.group("c") or match.group("g"))
        vram = int(match.group("gb")) * 2**30
        if tflops_milli is not None:
            tflops_milli = math.ceil(tflops_milli * min(used_slices, slices) / slices)
    elif card.kind == "mps" and card.replicas:
        if tflops_milli is not None:
            tflops_milli = math.ceil(tflops_milli / card.replicas)
        if vram is not None:
            vram = math.ceil(vram / card.replicas)
    return CardShare(tflops_milli, vram)


UNIDENTIFIED: Final = "(no product label)"


def with_unidentified_cards(node: NodeInfo, cards: NodeCards) -> NodeCards:
    """``cards`` plus a nameless card type for each GPU resource of ``node`` that card discovery could
    not name (no ``.product`` label). Queues cannot quote such a card, but a GPUResourceQuota must not
    be bypassed on it (Semantics 5: each pod is one worker): TFLOPS come from a ``.tflops`` label and
    a whole card's VRAM from its ``.memory`` label when the node has them; otherwise they are
    underivable and a quota that limits them refuses the node, as for an unknown product."""
    named = {card.resource for card in cards.cards}
    extra: list[CardType] = []
    for resource in sorted(node.allocatable):
        if resource in named or not is_gpu_resource(resource):
            continue
        # A whole card's memory label; an MPS replica's or MIG instance's share needs the card type.
        memory = node.labels.get(f"{resource}.memory", "") if resource.endswith("/gpu") else ""
        memory_mib = int(memory) if memory.isdigit() and int(memory) > 0 else None
        count = node.allocatable.amount(resource) // 1000
        extra.append(
            CardType(f"{resource} {UNIDENTIFIED}", "whole", UNIDENTIFIED, resource, count, memory_mib)
        )
    if not extra:
        return cards
    return NodeCards(cards.node, cards.cards + tuple(extra), cards.problems)


def request_from_card(
    pod: PodInfo,
    card: CardType,
    node_labels: Mapping[str, str] | None = None,
    *,
    node_name: str = "",
    label_prefix: str = DEFAULT_LABEL_PREFIX,
    require_tflops: bool = True,
    require_vram: bool = True,
) -> GPURequest | None:
    """The request of a pod without tensor-fusion annotations, derived from the card it lands on.

    ``None`` if the pod asks for none of ``card.resource``. When a needed amount cannot be derived
    (an unknown product without a ``.tflops`` label, a card without ``.memory``), raises
    :class:`InvalidValue` naming the node and the label that would fix it, never a guessed number.
    """
    units = pod.requests.amount(card.resource)
    if units <= 0:
        return None
    count = math.ceil(units / 1000)
    share = card_share(card, node_labels, label_prefix)
    where = f"Node//{node_name}" if node_name else pod.ref
    if share.tflops is None and require_tflops:
        raise InvalidValue(
            f"{label_prefix}.tflops",
            card.product,
            "a node label with the card's TFLOPS, or a product gpuq's built-in table knows",
            where,
        )
    if share.vram is None and require_vram:
        raise InvalidValue(
            f"{label_prefix}.memory", card.product, "a node label with the card's memory in MiB", where
        )
    tflops = share.tflops or 0
    vram = share.vram or 0
    return GPURequest(tflops, vram, tflops, vram, count)


def pod_gpu_request(
    pod: PodInfo,
    card: CardType | None = None,
    node_labels: Mapping[str, str] | None = None,
    *,
    quota: GPUResourceQuota | None = None,
    node_name: str = "",
    label_prefix: str = DEFAULT_LABEL_PREFIX,
) -> GPURequest | None:
    """A pod's GPU request (Semantics 5): its annotations, else the card it lands on, else ``None``.

    With ``quota`` given, its defaults apply and only the amounts it limits must be derivable.
    """
    request = request_from_annotations(pod, quota)
    if request is not None or card is None:
        return request
    return request_from_card(
        pod,
        card,
        node_labels,
        node_name=node_name,
        label_prefix=label_prefix,
        require_tflops=quota.uses_tflops if quota else False,
        require_vram=quota.uses_vram if quota else False,
    )


# Card-derived requests repeat a few (TFLOPS, VRAM, count) triples; GPURequest is immutable, so
# every pod asking the same shares one. Bounded: a cleared cache only costs recomputation.
_MAX_MEMO: Final = 4096
_CARD_REQUESTS: dict[tuple[int, int, int], GPURequest] = {}

TF_ANNOTATION_KEYS: Final = frozenset(ann.TENSOR_FUSION_ANNOTATIONS)


def has_tf_annotations(pod: PodInfo) -> bool:
    """The pod sets some tensor-fusion annotation (its request then comes from them)."""
    annotations = pod.annotations
    return bool(annotations) and not TF_ANNOTATION_KEYS.isdisjoint(annotations)


def card_request(
    units: int, share: CardShare, *, require_tflops: bool = True, require_vram: bool = True
) -> GPURequest | None:
    """:func:`request_from_card` for ``units`` (> 0) of a card worth ``share``, from the share
    already computed; ``None`` where :func:`request_from_card` raises (a required amount unknown),
    so a caller re-asks it for the error."""
    tflops, vram = share.tflops, share.vram
    if (tflops is None and require_tflops) or (vram is None and require_vram):
        return None
    key = (tflops or 0, vram or 0, math.ceil(units / 1000))
    request = _CARD_REQUESTS.get(key)
    if request is None:
        if len(_CARD_REQUESTS) >= _MAX_MEMO:
            _CARD_REQUESTS.clear()
        t, v, count = key
        request = _CARD_REQUESTS[key] = GPURequest(t, v, t, v, count)
    return request


# --------------------------------------------------------------------------------------------------
# The store
# --------------------------------------------------------------------------------------------------


class _Entry:
    """One namespace: its limits as plain ints (UNLIMITED when unset) and its usage."""

    __slots__ = (
        "alerting",
        "conditions",
        "lim_tflops",
        "lim_vram",
        "max_gpu_count",
        "max_workers",
        "needs_tflops",
        "needs_vram",
        "pods",
        "quota",
        "req_tflops",
        "req_vram",
        "s_lim_tflops",
        "s_lim_vram",
        "s_req_tflops",
        "s_req_vram",
        "used_lim_tflops",
        "used_lim_vram",
        "used_req_tflops",
        "used_req_vram",
        "workers",
    )

    def __init__(self) -> None:
        self.quota: GPUResourceQuota | None = None
        self.pods: dict[str, tuple[int, int, int, int]] = {}
        self.used_req_tflops = 0
        self.used_req_vram = 0
        self.used_lim_tflops = 0
        self.used_lim_vram = 0
        self.workers = 0
        self.alerting = False
        self.conditions: dict[str, dict[str, str]] = {}
        self.set_limits(None)

    def set_limits(self, quota: GPUResourceQuota | None) -> None:
        def lim(value: int | None) -> int:
            return UNLIMITED if value is None else value

        self.quota = quota
        q = quota or GPUResourceQuota(namespace="", name="")
        self.req_tflops = lim(q.total_requests.tflops)
        self.req_vram = lim(q.total_requests.vram)
        self.lim_tflops = lim(q.total_limits.tflops)
        self.lim_vram = lim(q.total_limits.vram)
        self.max_workers = lim(q.max_workers)
        self.s_req_tflops = lim(q.max_requests.tflops)
        self.s_req_vram = lim(q.max_requests.vram)
        self.s_lim_tflops = lim(q.max_limits.tflops)
        self.s_lim_vram = lim(q.max_limits.vram)
        self.max_gpu_count = lim(q.max_gpu_count)
        # What a card-derived request must know (pod_gpu_request's require_*), read per pod.
        self.needs_tflops = quota is not None and quota.uses_tflops
        self.needs_vram = quota is not None and quota.uses_vram


@dataclass(frozen=True, slots=True)
class GPUQuotaStatus:
    """What a status sync writes and reports for one namespace."""

    status: dict[str, Any]  # the CR's `status`
    ratios: dict[str, float]  # resource_type -> used/limit, for gpu_quota_usage_ratio
    event: EventRecord | None  # QuotaAlertThreshold when usage crossed the threshold upward


class GPUQuotaStore:
    """The authoritative in-memory GPU quota state (spec "QuotaStore"), one entry per namespace.

    Atomicity: the scheduler is single-threaded asyncio and every method here is synchronous, so
    :meth:`check_and_allocate` checks and applies in one call that nothing can interleave with; that
    is the whole of the spec's "check + allocate under storeMutex", without a lock.

    Usage is tracked per pod key (``namespace/name``), for namespaces with and without a quota, so
    allocation is idempotent, deallocation releases exactly what was charged, and a quota created
    later starts from the right usage.
    """

    __slots__ = ("_dirty", "_entries")

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._dirty: set[str] = set()

    # -- quota objects ----------------------------------------------------------------------------

    def set_quota(self, quota: GPUResourceQuota) -> None:
        """Add or replace the quota of ``quota.namespace``; usage is kept."""
        entry = self._entries.get(quota.namespace)
        if entry is None:
            entry = self._entries[quota.namespace] = _Entry()
            entry.alerting = quota.alert_active
        elif entry.quota is None:
            entry.alerting = quota.alert_active
        entry.set_limits(quota)
        self._dirty.add(quota.namespace)

    def remove_quota(self, namespace: str) -> None:
        """The namespace becomes unlimited; its pods stay tracked."""
        entry = self._entries.get(namespace)
        if entry is not None:
            entry.set_limits(None)
            entry.alerting = False
            entry.conditions = {}
        self._dirty.discard(namespace)

    def quota(self, namespace: str) -> GPUResourceQuota | None:
        entry = self._entries.get(namespace)
        return entry.quota if entry else None

    def has_quota(self, namespace: str) -> bool:
        entry = self._entries.get(namespace)
        return entry is not None and entry.quota is not None

    def namespaces(self) -> list[str]:
        """Namespaces that have a quota."""
        return sorted(ns for ns, e in self._entries.items() if e.quota is not None)

    def request_for(
        self,
        pod: PodInfo,
        card: CardType | None = None,
        node_labels: Mapping[str, str] | None = None,
        *,
        node_name: str = "",
        label_prefix: str = DEFAULT_LABEL_PREFIX,
    ) -> GPURequest | None:
        """:func:`pod_gpu_request` with the pod's namespace quota (its defaults and needs)."""
        return pod_gpu_request(
            pod,
            card,
            node_labels,
            quota=self.quota(pod.namespace),
            node_name=node_name,
            label_prefix=label_prefix,
        )

    def card_request(self, namespace: str, units: int, share: CardShare) -> GPURequest | None:
        """:meth:`request_for` of a pod of ``namespace`` without tensor-fusion annotations that asks
        ``units`` (> 0) of a card worth ``share``; ``None`` where :meth:`request_for` raises."""
        e = self._entries.get(namespace)
        if e is None:
            return card_request(units, share, require_tflops=False, require_vram=False)
        return card_request(units, share, require_tflops=e.needs_tflops, require_vram=e.needs_vram)

    # -- checks -----------------------------------------------------------------------------------

    def check_single(self, namespace: str, request: GPURequest) -> QuotaExceeded | None:
        """Per-workload limits (``single``); a failure is unresolvable (the webhook denies it)."""
        e = self._entries.get(namespace)
        if e is None or e.quota is None:
            return None
        return _check_single(e, namespace, request)

    def check(self, namespace: str, request: GPURequest) -> QuotaExceeded | None:
        """Single then total limits, without changing anything (the scheduler's Filter)."""
        e = self._entries.get(namespace)
        if e is None or e.quota is None:
            return None
        return _check_single(e, namespace, request) or _check_total(e, namespace, request)

    def check_and_allocate(self, namespace: str, request: GPURequest, key: str) -> bool:
        """Check every limit and charge pod ``key`` atomically (all or nothing).

        Returns True when charged, False when ``key`` was already charged (idempotent: nothing
        changes). Raises :class:`QuotaExceeded` (``unresolvable`` for single limits) and changes
        nothing when a limit would be exceeded.
        """
        e = self._entries.get(namespace)
        if e is None:
            e = self._entries[namespace] = _Entry()
        elif key in e.pods:
            return False
        n = request.gpu_count
        rt = request.tflops_request * n
        rv = request.vram_request * n
        lt = request.tflops_limit * n
        lv = request.vram_limit * n
        # New totals computed once, used by the check and by the update (fewer attribute reads).
        new_rt = e.used_req_tflops + rt
        new_rv = e.used_req_vram + rv
        new_lt = e.used_lim_tflops + lt
        new_lv = e.used_lim_vram + lv
        new_w = e.workers + 1
        if e.quota is not None and (
            request.tflops_request > e.s_req_tflops
            or request.vram_request > e.s_req_vram
            or request.tflops_limit > e.s_lim_tflops
            or request.vram_limit > e.s_lim_vram
            or n > e.max_gpu_count
            or new_rt > e.req_tflops
            or new_rv > e.req_vram
            or new_lt > e.lim_tflops
            or new_lv > e.lim_vram
            or new_w > e.max_workers
        ):
            # The slow path only runs on failure: it finds and describes the first broken limit.
            error = _check_single(e, namespace, request) or _check_total(e, namespace, request)
            if error is None:  # unreachable: the fast and slow checks test the same limits
                raise RuntimeError(f"{namespace}: GPU quota checks disagree for {request}")
            raise error
        e.pods[key] = (rt, rv, lt, lv)
        e.used_req_tflops = new_rt
        e.used_req_vram = new_rv
        e.used_lim_tflops = new_lt
        e.used_lim_vram = new_lv
        e.workers = new_w
        self._dirty.add(namespace)
        return True

    def deallocate(self, namespace: str, key: str) -> bool:
        """Release pod ``key``; False if it was not charged. Usage is clamped at 0 (spec "safeSub")."""
        e = self._entries.get(namespace)
        if e is None:
            return False
        charged = e.pods.pop(key, None)
        if charged is None:
            return False
        rt, rv, lt, lv = charged
        # Conditional expressions, not max(): this is the hot path and a builtin call costs more.
        v = e.used_req_tflops - rt
        e.used_req_tflops = v if v > 0 else 0
        v = e.used_req_vram - rv
        e.used_req_vram = v if v > 0 else 0
        v = e.used_lim_tflops - lt
        e.used_lim_tflops = v if v > 0 else 0
        v = e.used_lim_vram - lv
        e.used_lim_vram = v if v > 0 else 0
        e.workers = e.workers - 1 if e.workers > 0 else 0
        self._dirty.add(namespace)
        return True

    def fits_array(
        self,
        namespace: str,
        *,
        tflops_request: npt.ArrayLike,
        vram_request: npt.ArrayLike,
        tflops_limit: npt.ArrayLike,
        vram_limit: npt.ArrayLike,
        gpu_count: npt.ArrayLike,
    ) -> npt.NDArray[np.bool_]:
        """Vectorised :meth:`check` over candidate nodes: per-GPU amounts (one per node, as derived
        from each node's card) in, a boolean per node out. Explain a False with :meth:`check`."""
        t_req = np.asarray(tflops_request, dtype=np.int64)
        v_req = np.asarray(vram_request, dtype=np.int64)
        t_lim = np.asarray(tflops_limit, dtype=np.int64)
        v_lim = np.asarray(vram_limit, dtype=np.int64)
        count = np.asarray(gpu_count, dtype=np.int64)
        shape = np.broadcast_shapes(t_req.shape, v_req.shape, t_lim.shape, v_lim.shape, count.shape)
        e = self._entries.get(namespace)
        if e is None or e.quota is None:
            return np.ones(shape, dtype=np.bool_)
        ok = (
            (t_req <= e.s_req_tflops)
            & (v_req <= e.s_req_vram)
            & (t_lim <= e.s_lim_tflops)
            & (v_lim <= e.s_lim_vram)
            & (count <= e.max_gpu_count)
            & (e.used_req_tflops + t_req * count <= e.req_tflops)
            & (e.used_req_vram + v_req * count <= e.req_vram)
            & (e.used_lim_tflops + t_lim * count <= e.lim_tflops)
            & (e.used_lim_vram + v_lim * count <= e.lim_vram)
            & (e.workers + 1 <= e.max_workers)
        )
        return np.broadcast_to(ok, shape).copy()

    # -- usage ------------------------------------------------------------------------------------

    def usage(self, namespace: str) -> GPURequest:
        """Current usage as totals: ``gpu_count`` holds the number of workers."""
        e = self._entries.get(namespace)
        if e is None:
            return GPURequest(0, 0, 0, 0, 0)
        return GPURequest(e.used_req_tflops, e.used_req_vram, e.used_lim_tflops, e.used_lim_vram, e.workers)

    def is_allocated(self, namespace: str, key: str) -> bool:
        e = self._entries.get(namespace)
        return e is not None and key in e.pods

    def reconcile(
        self,
        pods: Iterable[PodInfo],
        request_of: Callable[[PodInfo], GPURequest | None] | None = None,
    ) -> list[EventRecord]:
        """Reset all usage to zero and rebuild it from the pods that hold resources (spec workflow 4).

        ``request_of`` gives a pod's request (the scheduler passes one that knows the pod's node and
        card); by default the pod's annotations with its namespace quota's defaults. Totals are not
        enforced here: the pods already run. A pod whose request cannot be read is not charged and
        yields a Warning event on the pod (Semantics 3). Every namespace with a quota becomes dirty.
        """
        resolve = request_of or (lambda pod: request_from_annotations(pod, self.quota(pod.namespace)))
        for entry in self._entries.values():
            entry.pods = {}
            entry.used_req_tflops = entry.used_req_vram = entry.used_lim_tflops = 0
            entry.used_lim_vram = entry.workers = 0
        events: list[EventRecord] = []
        for pod in pods:
            if not pod.holds_resources:
                continue
            try:
                request = resolve(pod)
            except InvalidValue as err:
                events.append(
                    EventRecord(pod.ref, "Warning", INVALID_ANNOTATION, f"GPU quota not charged: {err}")
                )
                continue
            if request is None:
                continue
            e = self._entries.get(pod.namespace)
            if e is None:
                e = self._entries[pod.namespace] = _Entry()
            if pod.key in e.pods:
                continue
            rt, rv, lt, lv = request.totals()
            e.pods[pod.key] = (rt, rv, lt, lv)
            e.used_req_tflops += rt
            e.used_req_vram += rv
            e.used_lim_tflops += lt
            e.used_lim_vram += lv
            e.workers += 1
        self._dirty.update(ns for ns, e in self._entries.items() if e.quota is not None)
        return events

    # -- status -----------------------------------------------------------------------------------

    def mark_dirty(self, namespace: str) -> None:
        self._dirty.add(namespace)

    def take_dirty(self) -> set[str]:
        """Namespaces with a quota whose status needs syncing; the set is emptied."""
        dirty, self._dirty = self._dirty, set()
        return {ns for ns in dirty if self.has_quota(ns)}

    def status(self, namespace: str, now: datetime) -> GPUQuotaStatus:
        """The status to write for ``namespace`` (spec "Status Reporting Structure").

        ``availablePercent`` has a two-decimal string per limited resource (``"25.00"``); both
        conditions are always present, keeping ``lastTransitionTime`` while their status holds. The
        alert event is returned only when usage crosses the threshold upward, not on every call.
        Raises ``KeyError`` for a namespace without a quota.
        """
        e = self._entries[namespace]
        quota = e.quota
        if quota is None:
            raise KeyError(namespace)
        stamp = _rfc3339(now)
        rows = (
            (REQUESTS_TFLOPS, e.used_req_tflops, quota.total_requests.tflops),
            (REQUESTS_VRAM, e.used_req_vram, quota.total_requests.vram),
            (LIMITS_TFLOPS, e.used_lim_tflops, quota.total_limits.tflops),
            (LIMITS_VRAM, e.used_lim_vram, quota.total_limits.vram),
            (WORKERS, e.workers, quota.max_workers),
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
            if (limit > 0 and used * 100 >= threshold * limit) or (limit == 0 and used > 0):
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
                f"Usage of {', '.join(alerting)} reached the {threshold}% alert threshold",
            )
        else:
            alert = ("False", "BelowThreshold", f"Usage is below the {threshold}% alert threshold")
        conditions = [
            self._condition(e, CONDITION_READY, ready, stamp),
            self._condition(e, CONDITION_ALERT, alert, stamp),
        ]

        event = None
        if alerting and not e.alerting:
            event = EventRecord(quota.ref, "Warning", QUOTA_ALERT_THRESHOLD, alert[2])
        e.alerting = bool(alerting)
        status = {
            "used": {
                "requests": {TFLOPS: _fmt_tflops(e.used_req_tflops), VRAM: format_bytes(e.used_req_vram)},
                "limits": {TFLOPS: _fmt_tflops(e.used_lim_tflops), VRAM: format_bytes(e.used_lim_vram)},
                "workers": e.workers,
            },
            "availablePercent": available,
            "conditions": conditions,
            "lastUpdateTime": stamp,
        }
        return GPUQuotaStatus(status, ratios, event)

    @staticmethod
    def _condition(e: _Entry, kind: str, value: tuple[str, str, str], stamp: str) -> dict[str, str]:
        status, reason, message = value
        previous = e.conditions.get(kind)
        since = previous["lastTransitionTime"] if previous and previous["status"] == status else stamp
        condition = {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since,
        }
        e.conditions[kind] = condition
        return dict(condition)


def _rfc3339(now: datetime) -> str:
    aware = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _available_percent(used: int, limit: int) -> str:
    """``(limit - used) / limit`` as a percentage with two decimals, rounded half up, within 0..100."""
    if limit <= 0:
        return "0.00"
    free = min(max(limit - used, 0), limit)
    hundredths = (free * 20000 + limit) // (2 * limit)
    return f"{hundredths // 100}.{hundredths % 100:02d}"


def _exceeded(
    namespace: str,
    quota: GPUResourceQuota,
    resource: str,
    requested: str,
    *,
    used: int,
    limit: int,
    fmt: Callable[[int], str],
    unresolvable: bool,
) -> QuotaExceeded:
    available = fmt(max(limit - used, 0)) if not unresolvable else fmt(limit)
    return QuotaExceeded(
        resource,
        requested,
        available,
        fmt(limit),
        scope=f"namespace {namespace} ({quota.ref})",
        used=None if unresolvable else fmt(used),
        unresolvable=unresolvable,
    )


def _check_single(e: _Entry, namespace: str, request: GPURequest) -> QuotaExceeded | None:
    quota = e.quota
    if quota is None:
        return None
    rows = (
        ("single.maxRequests.tflops", request.tflops_request, e.s_req_tflops, _fmt_tflops),
        ("single.maxRequests.vram", request.vram_request, e.s_req_vram, format_bytes),
        ("single.maxLimits.tflops", request.tflops_limit, e.s_lim_tflops, _fmt_tflops),
        ("single.maxLimits.vram", request.vram_limit, e.s_lim_vram, format_bytes),
        ("single.maxGPUCount", request.gpu_count, e.max_gpu_count, str),
    )
    for resource, asked, limit, fmt in rows:
        if asked > limit:
            return _exceeded(
                namespace, quota, resource, fmt(asked), used=0, limit=limit, fmt=fmt, unresolvable=True
            )
    return None


def _check_total(e: _Entry, namespace: str, request: GPURequest) -> QuotaExceeded | None:
    quota = e.quota
    if quota is None:
        return None
    rt, rv, lt, lv = request.totals()
    rows = (
        ("total.requests.tflops", rt, e.used_req_tflops, e.req_tflops, _fmt_tflops),
        ("total.requests.vram", rv, e.used_req_vram, e.req_vram, format_bytes),
        ("total.limits.tflops", lt, e.used_lim_tflops, e.lim_tflops, _fmt_tflops),
        ("total.limits.vram", lv, e.used_lim_vram, e.lim_vram, format_bytes),
        ("total.maxWorkers", 1, e.workers, e.max_workers, str),
    )
    for resource, asked, used, limit, fmt in rows:
        if used + asked > limit:
            return _exceeded(
                namespace, quota, resource, fmt(asked), used=used, limit=limit, fmt=fmt, unresolvable=False
            )
    return None
