"""What a tensor-fusion pod asks of the GPUs it shares (design.md Semantics 19).

A pod is placed on shared GPUs when it carries tensor-fusion's annotations and asks for no GPU resource
of a device plugin (tensor-fusion's webhook removes those from its pods: a device plugin would hand the
card out whole). It asks ``count`` devices (``tensor-fusion.ai/gpu-count``, default 1), each with its
``tflops-request`` and ``vram-request`` left (gaps filled as the GPUResourceQuota charge fills them:
:func:`~common.model.gpu_quota.request.request_from_annotations`), as tensor-fusion's GpuAllocator
filters GPUs by the request. A pod asking GPU resources as well is a whole-card pod charged by its
annotations (Semantics 5), its cards counted whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuq_k8s.common.model.cards.card_type import CARD_UNIT
from gpuq_k8s.common.model.cards.discovery import is_gpu_resource
from gpuq_k8s.common.model.gpu_quota.quota import GPUResourceQuota
from gpuq_k8s.common.model.gpu_quota.request import has_tf_annotations, request_from_annotations
from gpuq_k8s.common.model.pods import PodInfo


@dataclass(frozen=True, slots=True)
class ShareRequest:
    """``count`` devices, each with ``tflops`` milli-TFLOPS and ``vram`` bytes left."""

    tflops: int
    vram: int
    count: int = 1


def asks_gpu_resource(pod: PodInfo) -> bool:
    """The pod asks some device-plugin GPU resource (whole cards, MIG instances, MPS replicas)."""
    requests = pod.requests
    return any(is_gpu_resource(r) and requests[r] > 0 for r in requests)


def share_request(pod: PodInfo, quota: GPUResourceQuota | None = None) -> ShareRequest | None:
    """The pod's request of shared GPUs, or None when it is not a shared-GPU pod. Raises
    :class:`~common.model.errors.InvalidAnnotation` (naming the pod, the annotation, the value and
    what was expected) for a malformed tensor-fusion annotation."""
    if not has_tf_annotations(pod) or asks_gpu_resource(pod):
        return None
    request = request_from_annotations(pod, quota)
    if request is None:
        return None
    return ShareRequest(request.tflops_request, request.vram_request, request.gpu_count)


def whole_units(pod: PodInfo, resource: str) -> int:
    """How many whole cards of ``resource`` the pod asks (rounded up from milli-units)."""
    return -(-pod.requests.amount(resource) // CARD_UNIT)
