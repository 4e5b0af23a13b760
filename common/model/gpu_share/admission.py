"""Whether a shared-GPU pod could ever be placed: the webhook's rule over tensor-fusion pods
(design.md Semantics 10 and 19).

Some node's shareable GPUs, idle, must hold the request: ``gpu-count`` devices of one node, each worth
at least the TFLOPS and VRAM asked per GPU; a device whose amount gpuq cannot tell holds no amount
asked of it, as GPUShare's Filter refuses it. Usage comes and goes and is the scheduler's to judge.
A cluster with no shareable GPU at all gives no verdict: its GPU nodes may not have joined yet.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuq_k8s.common.model.gpu_quota.quota import format_tflops
from gpuq_k8s.common.model.gpu_share.devices import NodeGPUs
from gpuq_k8s.common.model.gpu_share.request import ShareRequest
from gpuq_k8s.common.model.quantity import format_bytes


def holds(gpus: NodeGPUs, request: ShareRequest) -> bool:
    """The node's GPUs, idle, hold ``request``."""
    if gpus.count < request.count:
        return False
    if request.tflops > 0 and (gpus.tflops is None or gpus.tflops < request.tflops):
        return False
    return not (request.vram > 0 and (gpus.vram is None or gpus.vram < request.vram))


def never_placed(request: ShareRequest, gpus: Iterable[NodeGPUs]) -> str | None:
    """Why no node's shareable GPUs could ever hold ``request`` (what the cluster has, per card), or
    None when some node could (or no node has shareable GPUs)."""
    offered: dict[tuple[str, int, int | None, int | None], int] = {}
    for node in gpus:
        if holds(node, request):
            return None
        key = (node.card, node.count, node.tflops, node.vram)
        offered[key] = offered.get(key, 0) + 1
    if not offered:
        return None
    shown = "; ".join(
        f"{nodes} node(s) with {count} {card} of "
        f"{format_tflops(tflops) + ' TFLOPS' if tflops is not None else 'unknown TFLOPS'} and "
        f"{format_bytes(vram) + ' VRAM' if vram is not None else 'unknown VRAM'}"
        for (card, count, tflops, vram), nodes in sorted(offered.items(), key=lambda item: item[0][0])
    )
    return f"no shareable GPU in the cluster can ever hold it (the cluster has {shown})"
