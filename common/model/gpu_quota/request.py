"""A pod's GPU request: what one worker is charged to its namespace's GPUResourceQuota (design.md
Semantics 5; gpu-resource-quota.md).

Per-GPU TFLOPS and VRAM, requests and limits, and the number of GPUs (:class:`GPURequest`): from the
pod's tensor-fusion annotations, gaps filled by the quota's ``single.default*``
(:func:`request_from_annotations`); else derived from the card the pod lands on
(:func:`request_from_card`, from a :class:`~common.model.gpu_quota.card_share.CardShare`);
:func:`pod_gpu_request` picks between them. Single limits compare the *per-GPU* amounts and the GPU
count; totals charge ``per-GPU x count`` (:meth:`GPURequest.totals`, as upstream's calculator).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from gpuq_k8s.common.model import annotations as ann
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.cards.card_type import CardType
from gpuq_k8s.common.model.errors import InvalidAnnotation, InvalidValue
from gpuq_k8s.common.model.gpu_quota.card_share import DEFAULT_LABEL_PREFIX, CardShare, card_share
from gpuq_k8s.common.model.gpu_quota.quota import TFLOPS, UNSET, VRAM, GPUResourceQuota, format_amount
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quantity import parse_quantity, to_units

# tensor-fusion's gpu-count is a uint32-sized count; bounding it keeps per-GPU amount x count within
# the int64 arrays of GPUQuotaStore.fits_array instead of overflowing there.
MAX_GPU_COUNT: Final = 2**31 - 1
TF_ANNOTATION_KEYS: Final = frozenset(ann.TENSOR_FUSION_ANNOTATIONS)


@dataclass(frozen=True, slots=True)
class GPURequest:
    """One worker's GPU request: per-GPU amounts and the number of GPUs (totals are ``x gpu_count``)."""

    tflops_request: int = 0  # milli-TFLOPS per GPU
    vram_request: int = 0  # bytes per GPU
    tflops_limit: int = 0
    vram_limit: int = 0
    gpu_count: int = 1
    # False for :meth:`count_only`: the amounts are unknown (0 stands in), so minima are not checked.
    amounts_known: bool = True
    # Workers charged: 1 for a pod; 0 for a DRA claim's devices, whose pods are the workers
    # (docs/design.md "Quota over devices").
    workers: int = 1

    @classmethod
    def count_only(cls, gpu_count: int) -> GPURequest:
        """A card pod without tensor-fusion annotations before a node is chosen: only its GPU count
        is known (admission checks it against ``maxGPUCount``, never against ``single.min``)."""
        return cls(0, 0, 0, 0, gpu_count, amounts_known=False)

    @classmethod
    def worker_only(cls) -> GPURequest:
        """A pod whose GPUs are its DRA claims' devices: the pod is the worker, the devices are
        charged with their claims (once, whatever number of pods share them)."""
        return cls(0, 0, 0, 0, 0, amounts_known=False)

    def totals(self) -> tuple[int, int, int, int]:
        """(requests.tflops, requests.vram, limits.tflops, limits.vram) charged to the namespace."""
        n = self.gpu_count
        return (self.tflops_request * n, self.vram_request * n, self.tflops_limit * n, self.vram_limit * n)


def has_tf_annotations(pod: PodInfo) -> bool:
    """The pod sets some tensor-fusion annotation (its request then comes from them)."""
    annotations = pod.annotations
    return bool(annotations) and not TF_ANNOTATION_KEYS.isdisjoint(annotations)


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
    defaults_req = quota.default_requests if quota else UNSET
    defaults_lim = quota.default_limits if quota else UNSET
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
                key,
                a.get(key, format_amount(sub, lim)),
                f"at least the request {format_amount(sub, req)}",
                pod.ref,
            )
    return GPURequest(tflops_req, vram_req, tflops_lim, vram_lim, count)


def _first(*values: int | None) -> int:
    for value in values:
        if value is not None:
            return value
    return 0


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
    where = kinds.NODE.ref("", node_name) if node_name else pod.ref
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


# Card-derived requests repeat a few (TFLOPS, VRAM, count) triples; GPURequest is immutable, so
# every pod asking the same shares one. Bounded: a cleared cache only costs recomputation.
_MAX_MEMO: Final = 4096
_CARD_REQUESTS: dict[tuple[int, int, int], GPURequest] = {}


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
