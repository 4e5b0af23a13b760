"""Every annotation and label key gpuq reads or writes (design.md, "Annotations and labels").

The keys live here so a grep finds all of them in one place; the rules that parse each value live
with their concept (card annotations in :mod:`common.model.cards`, cross-quota node overrides in
:mod:`common.model.crossquota.node_quota`, and so on).
"""

from __future__ import annotations

from typing import Final

# Queue
CARD_QUOTA: Final = "volcano.sh/card.quota"
# PodGroup
CARD_REQUEST: Final = "volcano.sh/card.request"
# Pod
CARD_NAME: Final = "volcano.sh/card.name"
GROUP_NAME: Final = "scheduling.k8s.io/group-name"
QUEUE_NAME: Final = "scheduling.volcano.sh/queue-name"
# Pod (annotation, else label): "false" keeps it from being evicted by preempt and reclaim.
PREEMPTABLE: Final = "volcano.sh/preemptable"
# Pod (annotation, else label): its task (role) in its PodGroup, the key of spec.minTaskMember.
TASK_SPEC: Final = "volcano.sh/task-spec"
DEFAULT_QUEUE: Final = "default"
# Node: cross-quota overrides, suffixed by the resource name.
CROSSQUOTA_PREFIX: Final = "volcano.sh/crossquota-"
CROSSQUOTA_PERCENTAGE_PREFIX: Final = "volcano.sh/crossquota-percentage-"
# Pod: scoring overrides.
CROSSQUOTA_SCORING_STRATEGY: Final = "volcano.sh/crossquota-scoring-strategy"
RESOURCE_STRATEGY_SCORING_TYPE: Final = "volcano.sh/resource-strategy-scoring-type"
RESOURCE_STRATEGY_WEIGHT: Final = "volcano.sh/resource-strategy-weight"
# Pod: GPU quota requests (tensor-fusion).
TF_TFLOPS_REQUEST: Final = "tensor-fusion.ai/tflops-request"
TF_VRAM_REQUEST: Final = "tensor-fusion.ai/vram-request"
TF_TFLOPS_LIMIT: Final = "tensor-fusion.ai/tflops-limit"
TF_VRAM_LIMIT: Final = "tensor-fusion.ai/vram-limit"
TF_GPU_COUNT: Final = "tensor-fusion.ai/gpu-count"
# Written by the scheduler (PreBind): the shared GPUs a tensor-fusion pod was given, as tensor-fusion's
# components read them (its GPUDeviceIDsAnnotation; design.md Semantics 19).
TF_GPU_IDS: Final = "tensor-fusion.ai/gpu-ids"
TENSOR_FUSION_ANNOTATIONS: Final = (
    TF_TFLOPS_REQUEST,
    TF_VRAM_REQUEST,
    TF_TFLOPS_LIMIT,
    TF_VRAM_LIMIT,
    TF_GPU_COUNT,
)
