"""What an allocated DRA claim is charged in its namespace's GPUResourceQuota (docs/design.md "Quota
over devices"): the :class:`~common.model.devices.charges.ClaimCharge` of its devices as a
:class:`~common.model.gpu_quota.request.GPURequest`.

The claim has no worker of its own: its pods are the workers (tensor-fusion counts one worker per
allocation, i.e. per worker pod), each charged by the gpu-quota plugin under the pod's key
(:meth:`GPURequest.worker_only`), so a claim shared by N pods is N workers and its devices once, and
a pod with two claims one worker. Its GPU count is its devices (a share of one device counts as one
GPU); per GPU, the TFLOPS and VRAM of its devices divided by that count, rounded up (so a claim of two H100s
is 2 x 989 TFLOPS, and a 40Gi share of an 80Gi H100 one GPU of 40Gi and half its TFLOPS: charged
exactly what it consumes). Requests and limits are the same (a device is taken whole, or its
consumed capacity). A device whose product gpuq has no specs for has unknown amounts: charged as 0
with ``amounts_known`` false (never guessed; the GPU count still counts).
"""

from __future__ import annotations

from gpuq_k8s.common.model.cards.card_type import CARD_UNIT
from gpuq_k8s.common.model.devices.charges import ClaimCharge
from gpuq_k8s.common.model.gpu_quota.request import GPURequest


def claim_request(charge: ClaimCharge) -> GPURequest | None:
    """The GPUResourceQuota usage of one claim's devices; None when it charges no device."""
    if charge.gpus <= 0:
        return None
    count = max(1, -(-charge.gpus // CARD_UNIT))
    known = charge.tflops is not None and charge.vram is not None
    tflops = -(-(charge.tflops or 0) // count)
    vram = -(-(charge.vram or 0) // count)
    return GPURequest(tflops, vram, tflops, vram, count, amounts_known=known, workers=0)


def combined_request(charges: list[ClaimCharge]) -> GPURequest | None:
    """Several claims checked with the one worker of their pod (Filter's quick check; Reserve charges
    claim by claim, and the pod's worker under the pod's key)."""
    requests = [r for r in (claim_request(c) for c in charges) if r is not None]
    if not requests:
        return None
    count = sum(r.gpu_count for r in requests)
    tflops = -(-sum(r.tflops_request * r.gpu_count for r in requests) // count)
    vram = -(-sum(r.vram_request * r.gpu_count for r in requests) // count)
    known = all(r.amounts_known for r in requests)
    return GPURequest(tflops, vram, tflops, vram, count, amounts_known=known, workers=1)
