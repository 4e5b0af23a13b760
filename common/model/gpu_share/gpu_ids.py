"""``tensor-fusion.ai/gpu-ids``: the shared GPUs a pod was given, the annotation tensor-fusion's own
components read (its ``GPUDeviceIDsAnnotation``: comma-separated GPU ids). gpuq writes it in PreBind
and reads it back to rebuild its ledger after a restart (design.md Semantics 19)."""

from __future__ import annotations

from gpuq_k8s.common.model.annotations import TF_GPU_IDS
from gpuq_k8s.common.model.errors import InvalidAnnotation
from gpuq_k8s.common.model.gpu_share.devices import NodeGPUs
from gpuq_k8s.common.model.pods import PodInfo


def read_gpu_ids(pod: PodInfo, gpus: NodeGPUs, count: int) -> tuple[int, ...] | None:
    """The device indices the pod's annotation names on its node, or None when it has none. Raises
    :class:`InvalidAnnotation` (pod, annotation, value, expectation) unless it names exactly ``count``
    distinct devices of the node, as ``<node>-gpu-<index>``."""
    raw = pod.annotations.get(TF_GPU_IDS)
    if raw is None:
        return None
    prefix = f"{gpus.node}-gpu-"
    indices: list[int] = []
    for part in raw.split(","):
        digits = part.strip().removeprefix(prefix) if part.strip().startswith(prefix) else ""
        if not digits.isdigit() or int(digits) >= gpus.count or int(digits) in indices:
            indices = []
            break
        indices.append(int(digits))
    if len(indices) != count:
        raise InvalidAnnotation(
            TF_GPU_IDS,
            raw,
            f"{count} distinct GPU id(s) of node {gpus.node}, comma-separated, each {prefix}<index> "
            f"with index below {gpus.count}",
            pod.ref,
        )
    return tuple(sorted(indices))
