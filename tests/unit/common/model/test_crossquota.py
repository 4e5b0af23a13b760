"""crossquota engine (specs/crossquota.md; design.md Semantics 3 and 8)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuq_k8s.common.model.annotations import CROSSQUOTA_SCORING_STRATEGY
from gpuq_k8s.common.model.crossquota.args import (
    CrossQuotaArgs,
    parse_amount,
    parse_percentage,
)
from gpuq_k8s.common.model.crossquota.node_quota import QuotaSource, annotation_keys, node_quota
from gpuq_k8s.common.model.crossquota.pod import ScoringStrategy, prepare_pod, validate_pod_annotations
from gpuq_k8s.common.model.crossquota.predicate import filter_nodes, quota_exceeded
from gpuq_k8s.common.model.errors import ConfigError, InvalidAnnotation
from gpuq_k8s.common.model.events import INVALID_ANNOTATION, EventRecord
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quantity import format_units
from gpuq_k8s.common.model.quota_exceeded import CrossQuotaExceeded
from gpuq_k8s.common.model.refusal import Refusal
from gpuq_k8s.common.model.resources import Resources
from tests.testing.builders import Amount, MakeNode, MakePod
from tests.testing.hostile import ANNOTATION_VALUES, OBJECTS, only_gpuq_errors
from tests.testing.reference_scoring import crossquota_score_node, crossquota_score_nodes

GI = 2**30
BASE: dict[str, Any] = {"gpu-resource-names": "nvidia.com/gpu", "quota-resources": "cpu,memory"}
# 64 cpus, 128Gi, 8 GPUs; copy() before adding to it.
GPU_NODE = MakeNode("gpu-node-1").alloc(cpu="64", memory="128Gi", **{"nvidia.com/gpu": 8})


def args_of(**extra: Any) -> CrossQuotaArgs:
    return CrossQuotaArgs.parse({**BASE, **extra})


def message_of(refusal: Refusal | None) -> str | None:
    return None if refusal is None else refusal.message


def quantities(amounts: Mapping[str, int]) -> dict[str, Amount]:
    """Amounts in gpuq's units as the quantities a manifest holds (exact: canonical form)."""
    return {r: format_units(r, v) for r, v in amounts.items()}


# ---------------------------------------------------------------------------------------------- references
# Scalar and per-node forms of the engine that only these tests run: the vectorised engine must agree.


def check_node(
    args: CrossQuotaArgs,
    requests: Mapping[str, int],
    *,
    node_is_gpu: bool,
    quota: Mapping[str, int],
    used: Mapping[str, int],
) -> Refusal | None:
    """Scalar predicate ("Predicate Function"): None if the pod fits, else the refusal naming the first
    violation in ``quota-resources`` order. ``used`` is the node's CPU-pod usage (:func:`cpu_pod_usage`)."""
    if not node_is_gpu or not args.is_cpu_pod(requests):
        return None
    for r in args.quota_resources:
        required, in_use, limit = requests.get(r, 0), used.get(r, 0), quota.get(r, 0)
        if in_use + required > limit:
            return quota_exceeded(r, required, in_use, limit)
    return None


def cpu_pod_usage(args: CrossQuotaArgs, pods: Iterable[PodInfo]) -> Resources:
    """Usage of a node's cross quota: the quota resources requested by its CPU pods that hold
    resources (bound and not finished)."""
    total: dict[str, int] = dict.fromkeys(args.quota_resources, 0)
    for pod in pods:
        if pod.holds_resources and args.is_cpu_pod(pod.requests):
            for r in args.quota_resources:
                total[r] += pod.requests.amount(r)
    return Resources(total)


@dataclass(frozen=True, slots=True)
class NodeArrays:
    """Per-node inputs of the vectorised forms, for nodes in a fixed order N."""

    is_gpu_node: npt.NDArray[np.bool_]  # bool[N]
    quota: npt.NDArray[np.int64]  # int64[N, R]; rows of non-GPU nodes are unused
    events: tuple[EventRecord, ...]


def node_arrays(args: CrossQuotaArgs, nodes: Sequence[NodeInfo]) -> NodeArrays:
    """Classify and compute the quota of every node, as the plugin does row by row on node updates."""
    r = len(args.quota_resources)
    is_gpu = np.zeros(len(nodes), dtype=np.bool_)
    quota = np.zeros((len(nodes), r), dtype=np.int64)
    events: list[EventRecord] = []
    for i, node in enumerate(nodes):
        if args.is_gpu_node(node.allocatable):
            is_gpu[i] = True
            nq = node_quota(args, node)
            quota[i] = nq.vector(args)
            events.extend(nq.events)
    return NodeArrays(is_gpu, quota, tuple(events))


def validate_node_annotations(args: CrossQuotaArgs, annotations: Mapping[str, str], where: str = "") -> None:
    """Raise :class:`InvalidAnnotation` for the first malformed cross-quota annotation of a node.

    Only the quota resources' keys are checked: other ``volcano.sh/crossquota-*`` keys are not read.
    """
    for resource in args.quota_resources:
        absolute_key, percentage_key = annotation_keys(resource)
        try:
            if (raw := annotations.get(absolute_key)) is not None and raw.strip():
                parse_amount(resource, absolute_key, raw.strip(), InvalidAnnotation)
            if (raw := annotations.get(percentage_key)) is not None and raw.strip():
                parse_percentage(percentage_key, raw.strip(), InvalidAnnotation)
        except InvalidAnnotation as err:
            raise err.located(where) from None


# ---------------------------------------------------------------------------------------------- arguments


def test_defaults_follow_upstream_constants() -> None:
    """spec "Constants": crossQuotaWeight 10, cpu weight 10, memory 1; quota-resources defaults to cpu."""
    args = CrossQuotaArgs.parse({"gpu-resource-names": "nvidia.com/gpu"})
    assert args.quota_resources == ("cpu",)
    assert args.plugin_weight == 10
    assert args.weight_of("cpu") == 10
    two = args_of()
    assert (two.weight_of("cpu"), two.weight_of("memory"), two.weight_of("ephemeral-storage")) == (10, 1, 1)


def test_configuration_format_example_parses() -> None:
    """spec "Configuration Format" example, with YAML numbers and strings both accepted."""
    args = CrossQuotaArgs.parse(
        {
            "gpu-resource-names": "nvidia.com/gpu,amd.com/gpu",
            "quota-resources": "cpu,memory",
            "quota.cpu": "32",
            "quota-percentage.memory": "50",
            "crossQuotaWeight": 10,
            "weight.cpu": 10,
            "weight.memory": "1",
        }
    )
    assert [p.pattern for p in args.gpu_resource_patterns] == ["nvidia.com/gpu", "amd.com/gpu"]
    assert args.quotas == {"cpu": 32_000}
    assert args.quota_percentages == {"memory": Fraction(50)}
    assert args.resource_weights == {"cpu": 10, "memory": 1}


@pytest.mark.parametrize(
    ("extra", "key", "value"),
    [
        ({"quota.cpu": 32}, "quota.cpu", 32_000),
        ({"quota.cpu": 2.5}, "quota.cpu", 2_500),
        ({"quota.cpu": "500m"}, "quota.cpu", 500),
        ({"quota.memory": "64Gi"}, "quota.memory", 64 * GI),
        ({"crossQuotaWeight": "7"}, "crossQuotaWeight", 7),
        ({"crossQuotaWeight": 7.0}, "crossQuotaWeight", 7),
        ({"crossQuotaWeight": 0}, "crossQuotaWeight", 0),
    ],
)
def test_argument_value_forms(extra: dict[str, Any], key: str, value: int) -> None:
    args = args_of(**extra)
    got = args.plugin_weight if key == "crossQuotaWeight" else args.quotas[key.split(".", 1)[1]]
    assert got == value


def test_percentage_forms() -> None:
    assert args_of(**{"quota-percentage.cpu": "12.5"}).quota_percentages["cpu"] == Fraction(25, 2)
    assert args_of(**{"quota-percentage.cpu": 100}).quota_percentages["cpu"] == 100


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"quota-resources": "cpu"}, "gpu-resource-names"),  # upstream silently disables the plugin
        ({"gpu-resource-names": ["nvidia.com/gpu"]}, "gpu-resource-names"),
        ({"gpu-resource-names": " , "}, "gpu-resource-names"),
        ({"gpu-resource-names": "nvidia.com/gpu("}, "gpu-resource-names"),
        ({**BASE, "quota-resources": "cpu,cpu"}, "quota-resources"),
        ({**BASE, "quota-resources": "cpu,mem ory"}, "quota-resources"),
        ({**BASE, "quota-resources": 5}, "quota-resources"),
        ({**BASE, "quota.cpu": "abc"}, "quota.cpu"),
        ({**BASE, "quota.cpu": "-1"}, "quota.cpu"),
        ({**BASE, "quota.cpu": True}, "quota.cpu"),
        ({**BASE, "quota.nvidia.com/gpu": "1"}, "quota.nvidia.com/gpu"),  # not a quota resource
        ({**BASE, "quota-percentage.cpu": "0"}, "quota-percentage.cpu"),
        ({**BASE, "quota-percentage.cpu": "100.5"}, "quota-percentage.cpu"),
        ({**BASE, "quota-percentage.cpu": "50%"}, "quota-percentage.cpu"),
        ({**BASE, "quota-percentage.cpu": float("nan")}, "quota-percentage.cpu"),
        ({**BASE, "quota-percentage.ephemeral-storage": "50"}, "quota-percentage.ephemeral-storage"),
        ({**BASE, "crossQuotaWeight": 2.5}, "crossQuotaWeight"),
        ({**BASE, "crossQuotaWeight": -1}, "crossQuotaWeight"),
        ({**BASE, "crossQuotaWeight": "ten"}, "crossQuotaWeight"),
        ({**BASE, "weight.cpu": -3}, "weight.cpu"),
        ({**BASE, "weight.gpu": 3}, "weight.gpu"),
        ({**BASE, "quotas.cpu": "3"}, "quotas.cpu"),  # unknown key
    ],
)
def test_invalid_arguments_are_config_errors_naming_the_key(arguments: dict[str, Any], field: str) -> None:
    """design.md "Scheduler configuration": an invalid configuration is a start-up error naming the key."""
    with pytest.raises(ConfigError) as err:
        CrossQuotaArgs.parse(arguments)
    assert err.value.field == field


def test_from_arguments_is_the_same_parser() -> None:
    assert CrossQuotaArgs.parse({**BASE, "quota.cpu": "4"}).quotas == {"cpu": 4000}


# ------------------------------------------------------------------------------------------ classification


@pytest.mark.parametrize(
    ("patterns", "allocatable", "gpu"),
    [
        ("nvidia.com/gpu", ["cpu", "memory", "nvidia.com/gpu"], True),
        ("nvidia.com/gpu", ["cpu", "nvidia.com/gpu-a100"], True),  # Go MatchString is unanchored
        (r"^nvidia\.com/gpu$", ["cpu", "nvidia.com/gpu-a100"], False),
        ("nvidia.com/gpu,amd.com/gpu", ["amd.com/gpu"], True),
        (r".*\.com/gpu", ["cpu", "intel.com/gpu"], True),
        ("nvidia.com/gpu", ["cpu", "memory", "pods"], False),
    ],
)
def test_is_gpu_node(patterns: str, allocatable: list[str], gpu: bool) -> None:
    """spec "GPU Node Detection"."""
    assert CrossQuotaArgs.parse({"gpu-resource-names": patterns}).is_gpu_node(allocatable) is gpu


@pytest.mark.parametrize(
    ("patterns", "requests", "cpu_pod"),
    [
        ("nvidia.com/gpu", {"cpu": 1000, "memory": GI}, True),
        ("nvidia.com/gpu", {"cpu": 1000, "nvidia.com/gpu": 1000}, False),
        ("nvidia.com/gpu", {"cpu": 1000, "nvidia.com/gpu": 0}, True),  # a zero request asks for no GPU
        ("nvidia.com/gpu", {"cpu": 1000, "nvidia.com/gpu-h100": 1000}, False),
        ("m", {"cpu": 1000, "memory": GI}, True),  # cpu/memory never make a GPU pod (upstream: scalars only)
        ("nvidia.com/gpu", {}, True),
    ],
)
def test_is_cpu_pod(patterns: str, requests: dict[str, int], cpu_pod: bool) -> None:
    """spec "CPU Pod Detection"."""
    assert CrossQuotaArgs.parse({"gpu-resource-names": patterns}).is_cpu_pod(requests) is cpu_pod


def test_usage_vector_is_zero_for_gpu_pods() -> None:
    args = args_of()
    assert args.usage_vector({"cpu": 2000, "memory": GI}).tolist() == [2000, GI]
    assert args.usage_vector({"cpu": 2000, "nvidia.com/gpu": 1000}).tolist() == [0, 0]


def test_cpu_pod_usage_counts_bound_live_cpu_pods_only() -> None:
    """spec "Predicate Function" step 4: usage U of CPU pods on N."""
    args = args_of()
    pods = [
        MakePod().req(cpu="1", memory="1Gi").node("n").phase("Running").info(),
        MakePod().req(cpu="2", memory="1Gi").node("n").phase("Pending").info(),
        MakePod().req(cpu="4").gpus(1).node("n").phase("Running").info(),  # GPU pod
        MakePod().req(cpu="8").node("n").phase("Succeeded").info(),  # finished
        MakePod().req(cpu="16").info(),  # not bound
    ]
    assert cpu_pod_usage(args, pods) == {"cpu": 3000, "memory": 2 * GI}


# ---------------------------------------------------------------------------------------------- node quota


@pytest.mark.parametrize(
    ("extra", "annotations", "quota", "source"),
    [
        # 1. node annotation, absolute, beats everything
        (
            {"quota.cpu": "32", "quota-percentage.cpu": "10"},
            {"volcano.sh/crossquota-cpu": "48", "volcano.sh/crossquota-percentage-cpu": "75"},
            48_000,
            QuotaSource.NODE_ANNOTATION,
        ),
        # 2. node annotation, percentage of allocatable (64 cpus)
        (
            {"quota.cpu": "32"},
            {"volcano.sh/crossquota-percentage-cpu": "75"},
            48_000,
            QuotaSource.NODE_ANNOTATION_PERCENTAGE,
        ),
        # 3. argument, absolute, beats the argument percentage (README: quota takes precedence)
        ({"quota.cpu": "32", "quota-percentage.cpu": "10"}, {}, 32_000, QuotaSource.ARGUMENT),
        # 4. argument percentage
        ({"quota-percentage.cpu": "25"}, {}, 16_000, QuotaSource.ARGUMENT_PERCENTAGE),
        # 5. full allocatable
        ({}, {}, 64_000, QuotaSource.ALLOCATABLE),
        # not capped at allocatable, as upstream
        ({}, {"volcano.sh/crossquota-cpu": "100"}, 100_000, QuotaSource.NODE_ANNOTATION),
        # blank annotation counts as absent
        ({"quota.cpu": "8"}, {"volcano.sh/crossquota-cpu": " "}, 8_000, QuotaSource.ARGUMENT),
    ],
)
def test_configuration_priority(
    extra: dict[str, Any], annotations: dict[str, str], quota: int, source: QuotaSource
) -> None:
    """spec "Configuration Priority": the five levels, highest first."""
    result = node_quota(args_of(**extra), GPU_NODE.copy().annotations(annotations).info())
    assert result.quota["cpu"] == quota
    assert result.sources["cpu"] is source
    assert result.events == ()


@pytest.mark.parametrize(
    ("annotations", "quota", "source"),
    [
        ({"volcano.sh/crossquota-cpu": "lots"}, 32_000, QuotaSource.ARGUMENT),
        (
            {"volcano.sh/crossquota-cpu": "-4", "volcano.sh/crossquota-percentage-cpu": "50"},
            32_000,
            QuotaSource.NODE_ANNOTATION_PERCENTAGE,
        ),
        ({"volcano.sh/crossquota-percentage-cpu": "150"}, 32_000, QuotaSource.ARGUMENT),
    ],
)
def test_malformed_node_annotation_falls_through_with_warning(
    annotations: dict[str, str], quota: int, source: QuotaSource
) -> None:
    """design.md Semantics 3: a crossquota node annotation falls through to the next source + Warning."""
    result = node_quota(args_of(**{"quota.cpu": "32"}), GPU_NODE.copy().annotations(annotations).info())
    assert result.quota["cpu"] == quota
    assert result.sources["cpu"] is source
    assert len(result.events) == 1
    event = result.events[0]
    assert (event.obj, event.type, event.reason) == ("Node/gpu-node-1", "Warning", INVALID_ANNOTATION)
    bad_key = next(iter(annotations))
    assert bad_key in event.message and repr(annotations[bad_key]) in event.message


def test_percentages_round_down_to_the_unit() -> None:
    """33% of 3 cpus is 990m (upstream compares against the float 990.0, same verdicts)."""
    args = args_of(**{"quota-percentage.cpu": "33", "quota-percentage.memory": "50"})
    result = node_quota(args, GPU_NODE.copy().alloc(cpu="3", memory=1001).info())
    assert result.quota == {"cpu": 990, "memory": 500}


def test_annotation_keys_use_the_resource_name_verbatim() -> None:
    assert annotation_keys("hugepages-1Gi") == (
        "volcano.sh/crossquota-hugepages-1Gi",
        "volcano.sh/crossquota-percentage-hugepages-1Gi",
    )
    args = args_of(**{"quota-resources": "cpu,hugepages-1Gi"})
    annotations = {"volcano.sh/crossquota-hugepages-1Gi": "2Gi"}
    node = GPU_NODE.copy().annotations(annotations).alloc(**{"hugepages-1Gi": "8Gi"}).info()
    assert node_quota(args, node).quota["hugepages-1Gi"] == 2 * GI


def test_validate_node_annotations_for_admission() -> None:
    args = args_of()
    validate_node_annotations(args, {"volcano.sh/crossquota-cpu": "4", "unrelated": "x"})
    with pytest.raises(InvalidAnnotation) as err:
        validate_node_annotations(args, {"volcano.sh/crossquota-percentage-memory": "0"}, "Node/n")
    assert err.value.where == "Node/n"
    assert err.value.field == "volcano.sh/crossquota-percentage-memory"


def test_node_arrays_classify_and_collect_events() -> None:
    args = args_of(**{"quota.cpu": "32"})
    nodes = [
        GPU_NODE.copy().name("g1").info(),
        MakeNode("c1").alloc(cpu="8", memory="1Gi").info(),
        GPU_NODE.copy().name("g2").annotation("volcano.sh/crossquota-memory", "x").info(),
    ]
    arrays = node_arrays(args, nodes)
    assert arrays.is_gpu_node.tolist() == [True, False, True]
    assert arrays.quota.tolist() == [[32_000, 128 * GI], [0, 0], [32_000, 128 * GI]]
    assert [e.obj for e in arrays.events] == ["Node/g2"]


# ---------------------------------------------------------------------------------------------- predicate

PREDICATE_QUOTA = {"cpu": 32_000, "memory": 64 * GI}
PREDICATE_USED = {"cpu": 28_000, "memory": 50 * GI}
PREDICATE_REQUEST = {"cpu": 6_000, "memory": 10 * GI}


def test_predicate_worked_example() -> None:
    """spec "Predicate Function" example: 28000 + 6000 > 32000 rejects on cpu; memory 60 < 64 passes."""
    args = args_of()
    violation = check_node(
        args, PREDICATE_REQUEST, node_is_gpu=True, quota=PREDICATE_QUOTA, used=PREDICATE_USED
    )
    assert violation is not None and isinstance(violation.error, CrossQuotaExceeded)
    error = violation.error
    assert (error.resource, error.requested, error.used, error.limit) == ("cpu", "6", "28", "32")
    assert violation.message == "cpu quota exceeded: required=6 used=28 quota=32"
    # memory alone fits
    only_memory = {"cpu": 0, "memory": 10 * GI}
    assert check_node(args, only_memory, node_is_gpu=True, quota=PREDICATE_QUOTA, used=PREDICATE_USED) is None


def test_predicate_worked_example_vectorised_with_lazy_reason() -> None:
    """spec "Predicate Function" example over nodes: a GPU node that fails, one that fits, a CPU node."""
    args = args_of()
    prepared = prepare_pod(args, MakePod().req(quantities(PREDICATE_REQUEST)).info())
    is_gpu = np.array([True, True, False])
    quota = np.array([[32_000, 64 * GI], [64_000, 64 * GI], [1, 1]], dtype=np.int64)
    used = np.array([[28_000, 50 * GI], [28_000, 50 * GI], [28_000, 50 * GI]], dtype=np.int64)
    result = filter_nodes(args, prepared, is_gpu, quota, used)
    assert result.fits.tolist() == [False, True, True]
    assert result.reason(0) == "cpu quota exceeded: required=6 used=28 quota=32"
    assert result.reason(1) is None and result.reason(2) is None


def test_predicate_reports_first_resource_in_configured_order() -> None:
    args = args_of(**{"quota-resources": "memory,cpu"})
    violation = check_node(
        args,
        {"cpu": 8000, "memory": 32 * GI},
        node_is_gpu=True,
        quota={"cpu": 4000, "memory": 16 * GI},
        used={},
    )
    assert violation is not None
    assert violation.message == "memory quota exceeded: required=32Gi used=0 quota=16Gi"


@pytest.mark.parametrize(
    ("requests", "is_gpu", "fits"),
    [
        ({"cpu": 4_000}, True, True),  # 28 + 4 == 32: at the quota fits
        ({"cpu": 4_001}, True, False),
        ({"cpu": 6_000, "nvidia.com/gpu": 1000}, True, True),  # GPU pods are not limited
        ({"cpu": 6_000}, False, True),  # CPU nodes are not limited
    ],
)
def test_predicate_scope(requests: dict[str, int], is_gpu: bool, fits: bool) -> None:
    """spec "Predicate Function" steps 1-2 and the strict ``>`` of step 5d."""
    args = args_of()
    got = check_node(args, requests, node_is_gpu=is_gpu, quota=PREDICATE_QUOTA, used=PREDICATE_USED)
    assert (got is None) is fits
    prepared = prepare_pod(args, MakePod().req(quantities(requests)).info())
    vec = filter_nodes(
        args,
        prepared,
        np.array([is_gpu]),
        np.array([[32_000, 64 * GI]], dtype=np.int64),
        np.array([[28_000, 50 * GI]], dtype=np.int64),
    )
    assert bool(vec.fits[0]) is fits


# ---------------------------------------------------------------------------------------------- scores

SCORE_QUOTA = {"cpu": 32_000, "memory": 64 * GI}
SCORE_REQUEST = {"cpu": 4_000, "memory": 8 * GI}


def _both(
    args: CrossQuotaArgs,
    requests: dict[str, int],
    used: dict[str, int],
    strategy: str | None = None,
    quota: dict[str, int] | None = None,
) -> float:
    """Score through the scalar and the vectorised forms; they must agree."""
    quota = quota or SCORE_QUOTA
    scalar = crossquota_score_node(
        args,
        requests,
        strategy=ScoringStrategy(strategy or "most-allocated"),
        node_is_gpu=True,
        quota=quota,
        used=used,
    )
    annotations = {CROSSQUOTA_SCORING_STRATEGY: strategy} if strategy else {}
    prepared = prepare_pod(args, MakePod().req(quantities(requests)).annotations(annotations).info())
    vector = crossquota_score_nodes(
        args,
        prepared,
        np.array([True]),
        np.array([[quota.get(r, 0) for r in args.quota_resources]], dtype=np.int64),
        np.array([[used.get(r, 0) for r in args.quota_resources]], dtype=np.int64),
    )
    assert vector[0] == pytest.approx(scalar, rel=1e-12, abs=1e-12)
    return scalar


def test_most_allocated_worked_example() -> None:
    """spec "Most-Allocated Strategy": (8.75 + 0.75) / 11 x 10 = 8.64."""
    score = _both(args_of(), SCORE_REQUEST, {"cpu": 24_000, "memory": 40 * GI})
    assert round(score, 2) == 8.64
    assert score == pytest.approx((28 / 32 * 10 + 48 / 64 * 1) / 11 * 10)


def test_least_allocated_worked_example() -> None:
    """spec "Least-Allocated Strategy": (6.25 + 0.625) / 11 x 10 = 6.25."""
    score = _both(args_of(), SCORE_REQUEST, {"cpu": 8_000, "memory": 16 * GI}, "least-allocated")
    assert score == pytest.approx(6.25)


def test_default_strategy_is_most_allocated() -> None:
    """spec "Strategy Selection": no annotation means most-allocated."""
    args = args_of()
    prepared = prepare_pod(args, MakePod().req(quantities(SCORE_REQUEST)).info())
    assert prepared.strategy is ScoringStrategy.MOST_ALLOCATED and prepared.events == ()


def test_unrequested_resources_carry_no_weight() -> None:
    """design.md Semantics 8: memory request 0 contributes neither score nor weight."""
    score = _both(args_of(), {"cpu": 4_000}, {"cpu": 24_000, "memory": 60 * GI})
    assert score == pytest.approx(28 / 32 * 10)


def test_zero_quota_scores_zero_but_keeps_weight() -> None:
    """Upstream calculateResourceScore: total 0 -> resource score 0, weight still counted."""
    score = _both(
        args_of(),
        {"cpu": 4_000, "memory": GI},
        {"cpu": 24_000},
        quota={"cpu": 32_000, "memory": 0},
    )
    assert score == pytest.approx((28 / 32 * 10 + 0) / 11 * 10)


def test_over_quota_scores_the_node_zero() -> None:
    """Upstream: a resource over its quota makes the whole node score 0."""
    assert _both(args_of(), SCORE_REQUEST, {"cpu": 30_000, "memory": 0}) == 0.0


def test_zero_plugin_weight_disables_scoring() -> None:
    assert _both(args_of(crossQuotaWeight=0), SCORE_REQUEST, {"cpu": 24_000}) == 0.0


def test_only_cpu_pods_on_gpu_nodes_are_scored() -> None:
    args = args_of()
    quota = np.array([[32_000, 64 * GI]] * 2, dtype=np.int64)
    used = np.zeros((2, 2), dtype=np.int64)
    cpu_pod = prepare_pod(args, MakePod().req(quantities(SCORE_REQUEST)).info())
    gpu_pod = prepare_pod(args, MakePod().req(quantities(SCORE_REQUEST)).gpus(1).info())
    scores = crossquota_score_nodes(args, cpu_pod, np.array([True, False]), quota, used)
    assert scores[0] > 0 and scores[1] == 0
    assert crossquota_score_nodes(args, gpu_pod, np.array([True, True]), quota, used).tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    ("value", "strategy", "warned"),
    [
        ("least-allocated", ScoringStrategy.LEAST_ALLOCATED, False),
        ("most-allocated", ScoringStrategy.MOST_ALLOCATED, False),
        ("LeastAllocated", ScoringStrategy.MOST_ALLOCATED, True),
        ("", ScoringStrategy.MOST_ALLOCATED, True),
    ],
)
def test_strategy_annotation(value: str, strategy: ScoringStrategy, warned: bool) -> None:
    """A malformed strategy is a Warning event on the pod and the default (Semantics 3)."""
    strategy_pod = MakePod().req(quantities(SCORE_REQUEST)).annotation(CROSSQUOTA_SCORING_STRATEGY, value)
    prepared = prepare_pod(args_of(), strategy_pod.info())
    assert prepared.strategy is strategy
    assert bool(prepared.events) is warned
    if warned:
        event = prepared.events[0]
        assert (event.obj, event.type, event.reason) == ("Pod/ns/p", "Warning", INVALID_ANNOTATION)
        assert CROSSQUOTA_SCORING_STRATEGY in event.message


def test_webhook_validation_of_strategy_annotation() -> None:
    validate_pod_annotations({CROSSQUOTA_SCORING_STRATEGY: "least-allocated"})
    with pytest.raises(InvalidAnnotation) as err:
        validate_pod_annotations({CROSSQUOTA_SCORING_STRATEGY: "spread"}, "Pod/ns/p")
    assert err.value.where == "Pod/ns/p" and err.value.value == "spread"


# ---------------------------------------------------------------------------------------------- properties

_amount = st.integers(min_value=0, max_value=2**40)


@settings(max_examples=200, deadline=None)
@given(
    request=st.tuples(_amount, _amount),
    rows=st.lists(st.tuples(st.booleans(), _amount, _amount, _amount, _amount), min_size=1, max_size=6),
    least=st.booleans(),
    gpu_pod=st.booleans(),
)
def test_vectorised_equals_scalar(
    request: tuple[int, int],
    rows: list[tuple[bool, int, int, int, int]],
    least: bool,
    gpu_pod: bool,
) -> None:
    """filter_nodes/score_nodes agree with check_node/score_node node by node."""
    args = args_of(**{"weight.memory": 3})
    requests = {"cpu": request[0], "memory": request[1]}
    if gpu_pod:
        requests["nvidia.com/gpu"] = 1000
    strategy = ScoringStrategy.LEAST_ALLOCATED if least else ScoringStrategy.MOST_ALLOCATED
    scheduled = MakePod().req(quantities(requests)).annotation(CROSSQUOTA_SCORING_STRATEGY, strategy.value)
    prepared = prepare_pod(args, scheduled.info())
    is_gpu = np.array([r[0] for r in rows])
    quota = np.array([[r[1], r[2]] for r in rows], dtype=np.int64)
    used = np.array([[r[3], r[4]] for r in rows], dtype=np.int64)
    filtered = filter_nodes(args, prepared, is_gpu, quota, used)
    scores = crossquota_score_nodes(args, prepared, is_gpu, quota, used)
    for i, (gpu, qc, qm, uc, um) in enumerate(rows):
        q, u = {"cpu": qc, "memory": qm}, {"cpu": uc, "memory": um}
        violation = check_node(args, requests, node_is_gpu=gpu, quota=q, used=u)
        assert message_of(filtered.refusal(i)) == message_of(violation)  # resource and amounts, exactly
        scalar = crossquota_score_node(args, requests, strategy=strategy, node_is_gpu=gpu, quota=q, used=u)
        assert scores[i] == pytest.approx(scalar, rel=1e-9, abs=1e-12)
        assert 0.0 <= scores[i] <= args.plugin_weight + 1e-9


def test_huge_node_annotation_falls_through_instead_of_overflowing() -> None:
    """Semantics 3: "1e29" cores does not fit the int64 node arrays; it used to raise OverflowError
    in node_arrays. It is a malformed annotation: Warning event, next source (argument quota.cpu)."""
    args = args_of(**{"quota.cpu": "16"})
    arrays = node_arrays(args, [GPU_NODE.copy().annotation("volcano.sh/crossquota-cpu", "1e29").info()])
    assert arrays.quota[0].tolist() == [16_000, 128 * GI]
    assert [e.reason for e in arrays.events] == [INVALID_ANNOTATION]
    assert "volcano.sh/crossquota-cpu" in arrays.events[0].message


@pytest.mark.parametrize(
    ("key", "value"), [("crossQuotaWeight", 10**400), ("weight.cpu", "9" * 30), ("weight.memory", 1_000_001)]
)
def test_weight_beyond_the_float_range_is_a_config_error(key: str, value: object) -> None:
    """A weight of 10**400 used to pass and raise OverflowError in the first score."""
    with pytest.raises(ConfigError) as info:
        args_of(**{key: value})
    assert key in str(info.value)


def test_largest_weight_scores() -> None:
    args = args_of(crossQuotaWeight=1_000_000)
    score = crossquota_score_node(
        args,
        {"cpu": 4_000},
        strategy=ScoringStrategy.MOST_ALLOCATED,
        node_is_gpu=True,
        quota={"cpu": 8_000},
        used={},
    )
    assert score == pytest.approx(500_000)


@settings(max_examples=200, deadline=None)
@given(OBJECTS)
def test_fuzz_parse_arguments_raises_only_config_errors(arguments: dict[str, Any]) -> None:
    only_gpuq_errors(CrossQuotaArgs.parse, {**BASE, **arguments})
    only_gpuq_errors(CrossQuotaArgs.parse, arguments)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["cpu", "memory"]), ANNOTATION_VALUES), ANNOTATION_VALUES)
def test_fuzz_node_and_pod_annotations_never_raise(quota: dict[str, str], strategy: str) -> None:
    """Malformed annotations become Warning events in the scheduler and InvalidAnnotation in the webhook."""
    args = args_of()
    annotations = {f"volcano.sh/crossquota-{k}": v for k, v in quota.items()}
    annotations |= {f"volcano.sh/crossquota-percentage-{k}": v for k, v in quota.items()}
    arrays = node_arrays(args, [GPU_NODE.copy().annotations(annotations).info()])
    assert arrays.quota.shape == (1, 2)
    only_gpuq_errors(lambda a: validate_node_annotations(args, a), annotations)
    scheduled = MakePod().req(cpu="1m").annotation(CROSSQUOTA_SCORING_STRATEGY, strategy)
    prepared = prepare_pod(args, scheduled.info())
    assert prepared.strategy in set(ScoringStrategy)


def test_a_pod_with_dra_claims_is_a_gpu_pod() -> None:
    """Issue 26: its accelerators come as DRA devices, which no pattern of extended resources can
    match; crossquota limits only CPU pods on GPU nodes, so a claiming pod is never limited there."""
    args = CrossQuotaArgs.parse({"gpu-resource-names": "nvidia.com/gpu"})
    plain = MakePod().req(cpu="2").info()
    claiming = MakePod().req(cpu="2").resource_claims("gpu").info()
    assert prepare_pod(args, plain).is_cpu_pod
    assert not prepare_pod(args, claiming).is_cpu_pod
