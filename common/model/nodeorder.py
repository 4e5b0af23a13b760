"""nodeorder: kube-scheduler's default scorers with Volcano's weight arguments (volcano-sh/volcano
``pkg/scheduler/plugins/nodeorder``; the scorers are kube-scheduler 1.36's).

Each enabled scorer gives every candidate node an integer score in [0, 100], which is multiplied by
its weight; the plugin's node score is the sum. The scorers gpuq computes, with their kube formulas:

* ``leastrequested`` (NodeResourcesFit, LeastAllocated, cpu and memory weighted 50/50):
  per resource ``(allocatable - requested) * 100 // allocatable`` (0 when requested > allocatable),
  ``requested`` = the node's non-zero requests plus the pod's (a pod or container without a cpu
  or memory request counts 100m / 200Mi), resources the node has none of skipped, then the weighted
  mean with integer division.
* ``mostrequested`` (NodeResourcesFit, MostAllocated, cpu and memory weighted 1/1):
  ``min(requested, allocatable) * 100 // allocatable``, same mean.
* ``balancedresource`` (NodeResourcesBalancedAllocation over cpu, memory and nvidia.com/gpu, the
  requests as they are): ``50 + (50 + s(with pod) - s(without pod)) / 2`` where ``s`` is
  ``int((1 - std) * 100)`` of the fractions ``min(requested / allocatable, 1)`` (an extended resource
  only when the pod requests it, a resource only when the node has it); skipped for a pod that
  requests none of the three.
* ``nodeaffinity`` (NodeAffinity): the sum of the weights of the pod's preferred terms the node
  matches, normalised over the candidate nodes (``100 * s // max``); skipped for a pod without
  preferred terms.
* ``tainttoleration`` (TaintToleration): the number of the node's PreferNoSchedule taints the pod does
  not tolerate, normalised and reversed (``100 - 100 * c // max``; 100 everywhere when no node has one).
* ``imagelocality`` (ImageLocality, a member plugin of its own: scheduler/plugins/image_locality.py,
  common/model/placement/image_locality.py): the pod's images the node holds, by size and spread.
* ``podaffinity`` (InterPodAffinity, kube's scorer as a member plugin of nodeorder:
  ``scheduler/plugins/inter_pod_affinity.py``, the rules in ``common/model/placement/pod_affinity.py``)
  and ``podtopologyspread`` (PodTopologySpread with the system default constraints:
  ``scheduler/plugins/pod_topology_spread.py``), each normalised to [0, 100] and multiplied by its
  weight (Volcano's defaults, 2 and 2). ``podaffinity.hardPodAffinityWeight`` is kube-scheduler's
  ``hardPodAffinityWeight`` (default 1, 0 to 100): how much an existing pod's *required* affinity term
  that the incoming pod matches adds (Volcano builds the plugin with zero-valued arguments, so 0 there:
  set it to 0 for Volcano's scores exactly).

Where gpuq differs: a negative or fractional weight, or an unknown argument, is a configuration error
(upstream's ``GetInt`` takes negative weights and ignores unknown keys). The non-zero request of a pod
with several containers is taken from its total (a cpu or memory request of 0 counts as 100m /
200Mi), where kube adds the default per container that lacks the request.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated, ClassVar, Final

import numpy as np
import numpy.typing as npt
from pydantic import Field

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.placement.pod_affinity import (
    DEFAULT_HARD_POD_AFFINITY_WEIGHT,
    MAX_HARD_POD_AFFINITY_WEIGHT,
)
from gpuq_k8s.common.model.plugin_args import PluginArgs, ZeroWeight, expect
from gpuq_k8s.common.model.quantity import CPU, MEMORY

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

NODE_AFFINITY: Final = "nodeaffinity.weight"
POD_AFFINITY: Final = "podaffinity.weight"
LEAST_REQUESTED: Final = "leastrequested.weight"
BALANCED_RESOURCE: Final = "balancedresource.weight"
MOST_REQUESTED: Final = "mostrequested.weight"
TAINT_TOLERATION: Final = "tainttoleration.weight"
IMAGE_LOCALITY: Final = "imagelocality.weight"
POD_TOPOLOGY_SPREAD: Final = "podtopologyspread.weight"

# Volcano's defaults (calculateWeight), for the scorers gpuq computes.
DEFAULTS: Final = {
    LEAST_REQUESTED: 1,
    MOST_REQUESTED: 0,
    NODE_AFFINITY: 2,
    BALANCED_RESOURCE: 1,
    TAINT_TOLERATION: 3,
    IMAGE_LOCALITY: 1,
    POD_AFFINITY: 2,
    POD_TOPOLOGY_SPREAD: 2,
}
HARD_POD_AFFINITY: Final = "podaffinity.hardPodAffinityWeight"
MAX_NODE_SCORE: Final = 100
# kube-scheduler's schedutil.DefaultMilliCPURequest and DefaultMemoryRequest.
DEFAULT_MILLI_CPU_REQUEST: Final = 100
DEFAULT_MEMORY_REQUEST: Final = 200 * 1024 * 1024
LEAST_WEIGHTS: Final = (50, 50)  # cpu, memory (Volcano's LeastAllocated resource weights)
MOST_WEIGHTS: Final = (1, 1)
BALANCED_RESOURCES: Final = (CPU, MEMORY, "nvidia.com/gpu")


HardWeight = Annotated[
    int,
    Field(ge=0, le=MAX_HARD_POD_AFFINITY_WEIGHT),
    expect(f"an integer from 0 to {MAX_HARD_POD_AFFINITY_WEIGHT}"),
]


class NodeOrderArgs(PluginArgs):
    """The weights of Volcano's nodeorder scorers (0: that scorer is off)."""

    PLUGIN: ClassVar[str] = plugin_names.NODEORDER

    least_requested: ZeroWeight = Field(DEFAULTS[LEAST_REQUESTED], alias=LEAST_REQUESTED)
    most_requested: ZeroWeight = Field(DEFAULTS[MOST_REQUESTED], alias=MOST_REQUESTED)
    node_affinity: ZeroWeight = Field(DEFAULTS[NODE_AFFINITY], alias=NODE_AFFINITY)
    balanced_resource: ZeroWeight = Field(DEFAULTS[BALANCED_RESOURCE], alias=BALANCED_RESOURCE)
    taint_toleration: ZeroWeight = Field(DEFAULTS[TAINT_TOLERATION], alias=TAINT_TOLERATION)
    pod_affinity: ZeroWeight = Field(DEFAULTS[POD_AFFINITY], alias=POD_AFFINITY)
    image_locality: ZeroWeight = Field(DEFAULTS[IMAGE_LOCALITY], alias=IMAGE_LOCALITY)
    pod_topology_spread: ZeroWeight = Field(DEFAULTS[POD_TOPOLOGY_SPREAD], alias=POD_TOPOLOGY_SPREAD)
    hard_pod_affinity: HardWeight = Field(DEFAULT_HARD_POD_AFFINITY_WEIGHT, alias=HARD_POD_AFFINITY)

    @property
    def scoring(self) -> bool:
        """Whether nodeorder's own scorers score (the member scorers, pod affinity and topology
        spread, are plugins of their own)."""
        weights = (self.least_requested, self.most_requested, self.node_affinity)
        return any(weights) or bool(self.balanced_resource or self.taint_toleration)


# -- resource scorers (row-wise: a row's score depends on that row only) --------------------------


def fit_scores(
    allocatable: tuple[Int64Array, Int64Array],
    nonzero_used: tuple[Int64Array, Int64Array],
    pod_nonzero: tuple[int, int],
    *,
    most: bool,
) -> Int64Array:
    """leastrequested (``most=False``) or mostrequested scores per row: NodeResourcesFit's weighted
    mean of the per-resource scores over the cpu and memory columns given, with integer division.

    ``nonzero_used`` is each node's non-zero requested cpu and memory, ``pod_nonzero`` the pod's.
    """
    weights = MOST_WEIGHTS if most else LEAST_WEIGHTS
    if all(bool((cap > 0).all()) for cap in allocatable):
        # Every node has both resources (the usual case): no masking, a constant weight sum.
        total: Int64Array | None = None
        for cap, used, asked, weight in zip(allocatable, nonzero_used, pod_nonzero, weights, strict=True):
            req = used + asked
            if most:
                part = np.minimum(req, cap) * MAX_NODE_SCORE // cap
            else:
                part = (cap - req) * MAX_NODE_SCORE // cap
                np.putmask(part, req > cap, 0)
            part *= weight
            total = part if total is None else total + part
        assert total is not None
        quotient: Int64Array = total // sum(weights)
        return quotient
    total = np.zeros(allocatable[0].shape[0], dtype=np.int64)
    weight_sum = np.zeros_like(total)
    for cap, used, asked, weight in zip(allocatable, nonzero_used, pod_nonzero, weights, strict=True):
        req = used + asked
        has = cap > 0
        safe = np.where(has, cap, 1)
        if most:
            part = np.minimum(req, cap) * MAX_NODE_SCORE // safe
        else:
            part = np.where(req > cap, 0, (cap - req) * MAX_NODE_SCORE // safe)
        total += np.where(has, part * weight, 0)
        weight_sum += np.where(has, weight, 0)
    result: Int64Array = np.where(weight_sum > 0, total // np.maximum(weight_sum, 1), 0)
    return result


def pod_nonzero(requests: Mapping[str, int]) -> tuple[int, int]:
    """The pod's cpu and memory request as NodeResourcesFit counts it (see module doc)."""
    cpu = requests.get(CPU, 0) or DEFAULT_MILLI_CPU_REQUEST
    memory = requests.get(MEMORY, 0) or DEFAULT_MEMORY_REQUEST
    return cpu, memory


def _balance(fractions: list[FloatArray], valid: list[npt.NDArray[np.bool_]]) -> Int64Array:
    """``int((1 - std) * 100)`` per row over the valid fractions (kube's balancedResourceScore)."""
    rows = fractions[0].shape[0]
    if len(fractions) == 2:  # cpu and memory (the pod asks no GPU): |a - b| / 2 where both count
        std2 = np.abs((fractions[0] - fractions[1]) / 2)
        np.putmask(std2, ~(valid[0] & valid[1]), 0.0)
        scores2: Int64Array = ((1.0 - std2) * float(MAX_NODE_SCORE)).astype(np.int64)
        return scores2
    count = np.zeros(rows, dtype=np.int64)
    total = np.zeros(rows, dtype=np.float64)
    for f, v in zip(fractions, valid, strict=True):
        count += v
        total += np.where(v, f, 0.0)
    std = np.zeros(rows, dtype=np.float64)
    if len(fractions) >= 2:
        # Exactly two valid fractions: |a - b| / 2, the first two valid in resource order.
        first = fractions[0].copy()
        second = fractions[1].copy()
        if len(fractions) == 3:
            first = np.where(valid[0], fractions[0], fractions[1])
            second = np.where(valid[0] & valid[1], fractions[1], fractions[2])
        two = count == 2
        std = np.where(two, np.abs((first - second) / 2), std)
    if len(fractions) == 3:
        three = count == 3
        mean = total / 3.0
        squares = np.zeros(rows, dtype=np.float64)
        for f in fractions:
            squares = squares + (f - mean) * (f - mean)
        std = np.where(three, np.sqrt(squares / 3.0), std)
    return ((1.0 - std) * float(MAX_NODE_SCORE)).astype(np.int64)


def balanced_scores(
    allocatable: list[Int64Array], used: list[Int64Array], pod_request: list[int]
) -> Int64Array:
    """NodeResourcesBalancedAllocation per row; one entry per resource the scorer looks at (cpu and
    memory always, ``nvidia.com/gpu`` when the pod requests it), requests as they are."""
    with_pod: list[FloatArray] = []
    without: list[FloatArray] = []
    valid: list[npt.NDArray[np.bool_]] = []
    for cap, req, asked in zip(allocatable, used, pod_request, strict=True):
        has = cap > 0
        # int64 / int64 divides as float64, as Go's float64(a) / float64(b).
        safe = cap if has.all() else np.where(has, cap, 1)
        valid.append(has)
        with_pod.append(np.minimum((req + asked) / safe, 1.0))
        without.append(np.minimum(req / safe, 1.0))
    diff = MAX_NODE_SCORE // 2 + _balance(with_pod, valid) - _balance(without, valid)
    # Go's integer division truncates toward zero.
    half = np.sign(diff) * (np.abs(diff) // 2)
    result: Int64Array = MAX_NODE_SCORE // 2 + half
    return result


def fit_score_one(
    allocatable: Sequence[int], nonzero_used: Sequence[int], pod_nonzero: Sequence[int], *, most: bool
) -> int:
    """:func:`fit_scores` of one node (cpu and memory values as Python ints)."""
    weights = MOST_WEIGHTS if most else LEAST_WEIGHTS
    total = weight_sum = 0
    for cap, used, asked, weight in zip(allocatable, nonzero_used, pod_nonzero, weights, strict=True):
        if cap <= 0:
            continue
        req = used + asked
        if most:
            part = min(req, cap) * MAX_NODE_SCORE // cap
        else:
            part = 0 if req > cap else (cap - req) * MAX_NODE_SCORE // cap
        total += part * weight
        weight_sum += weight
    return total // weight_sum if weight_sum else 0


def _balance_one(fractions: Sequence[float]) -> int:
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) == 3:
        total = 0.0
        for f in fractions:
            total += f
        mean = total / 3.0
        squares = 0.0
        for f in fractions:
            squares = squares + (f - mean) * (f - mean)
        std = math.sqrt(squares / 3.0)
    else:
        std = 0.0
    return int((1.0 - std) * float(MAX_NODE_SCORE))


def balanced_score_one(allocatable: Sequence[int], used: Sequence[int], pod_request: Sequence[int]) -> int:
    """:func:`balanced_scores` of one node: the same IEEE operations, so the same result."""
    with_pod: list[float] = []
    without: list[float] = []
    for cap, req, asked in zip(allocatable, used, pod_request, strict=True):
        if cap <= 0:
            continue
        with_pod.append(min(float(req + asked) / float(cap), 1.0))
        without.append(min(float(req) / float(cap), 1.0))
    diff = MAX_NODE_SCORE // 2 + _balance_one(with_pod) - _balance_one(without)
    half = abs(diff) // 2 * (1 if diff >= 0 else -1)
    return MAX_NODE_SCORE // 2 + half


# -- normalised scorers ---------------------------------------------------------------------------


def normalize(scores: Int64Array, candidates: npt.NDArray[np.bool_], *, reverse: bool) -> Int64Array:
    """kube's DefaultNormalizeScore(100, reverse) over the candidate rows (other rows: 0)."""
    out = np.zeros_like(scores)
    if not candidates.any():
        return out
    top = int(scores[candidates].max())
    if top <= 0:
        if reverse:
            out[candidates] = MAX_NODE_SCORE
        return out
    normalised = MAX_NODE_SCORE * scores // top
    if reverse:
        normalised = MAX_NODE_SCORE - normalised
    out[candidates] = normalised[candidates]
    return out
