"""resource-strategy-fit engine (specs/resource-strategy-fit.md; design.md Semantics 3, 6, 8)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuq_k8s.common.model import strategy_fit as sf
from gpuq_k8s.common.model.annotations import RESOURCE_STRATEGY_SCORING_TYPE, RESOURCE_STRATEGY_WEIGHT
from gpuq_k8s.common.model.errors import ConfigError, InvalidAnnotation
from gpuq_k8s.common.model.events import INVALID_ANNOTATION
from tests.testing.builders import MakePod
from tests.testing.hostile import ANNOTATION_VALUES, OBJECTS, only_gpuq_errors
from tests.testing.reference_scoring import strategy_fit_score_node, strategy_fit_score_nodes

MOST = sf.ScoringType.MOST_ALLOCATED
LEAST = sf.ScoringType.LEAST_ALLOCATED

# spec "Matching Priority", Configuration Example
EXAMPLE = {
    "resources": {
        "nvidia.com/gpu-v100": {"type": "MostAllocated", "weight": 3},
        "nvidia.com/gpu/*": {"type": "MostAllocated", "weight": 2},
        "amd.com/gpu/*": {"type": "LeastAllocated", "weight": 2},
        "cpu": {"type": "LeastAllocated", "weight": 1},
    }
}


def strategy_of(arguments: dict[str, Any], annotations: dict[str, str] | None = None) -> sf.PodStrategy:
    return sf.pod_strategy(
        sf.ResourceStrategyFitArgs.parse(arguments), MakePod().annotations(annotations or {}).info()
    )


# ---------------------------------------------------------------------------------------------- arguments


def test_defaults_follow_upstream() -> None:
    """Upstream calculateWeight: weight 10; no resources -> cpu and memory LeastAllocated weight 1."""
    empty: list[dict[str, Any] | None] = [{}, {"resources": {}}, None]
    for arguments in empty:
        args = sf.ResourceStrategyFitArgs.parse(arguments)
        assert args.plugin_weight == 10
        assert args.resources == {
            "cpu": sf.ResourceStrategy(LEAST, 1),
            "memory": sf.ResourceStrategy(LEAST, 1),
        }


def test_design_example_parses() -> None:
    """spec "Design Details" config (and design.md "Scheduler configuration")."""
    args = sf.ResourceStrategyFitArgs.parse(
        {
            "resourceStrategyFitWeight": 10,
            "resources": {
                "nvidia.com/gpu": {"type": "MostAllocated", "weight": 2},
                "cpu": {"type": "LeastAllocated", "weight": 1},
            },
        }
    )
    assert args.plugin_weight == 10
    assert args.match("nvidia.com/gpu") == sf.ResourceStrategy(MOST, 2)
    assert args.match("cpu") == sf.ResourceStrategy(LEAST, 1)
    assert args.match("memory") is None


def test_entry_defaults() -> None:
    """An entry without type is LeastAllocated, without weight weighs 1 (upstream defaults)."""
    args = sf.ResourceStrategyFitArgs.parse(
        {"resources": {"cpu": {}, "memory": None, "x.io/y": {"weight": "4"}}}
    )
    assert args.resources == {
        "cpu": sf.ResourceStrategy(LEAST, 1),
        "memory": sf.ResourceStrategy(LEAST, 1),
        "x.io/y": sf.ResourceStrategy(LEAST, 4),
    }


@pytest.mark.parametrize(
    "pattern", ["*", "*x", "a*b", "a**", "vendor.*/gpu", "*/gpu", "vendor.com/**", "/*", "-*"]
)
def test_invalid_wildcard_patterns_are_config_errors(pattern: str) -> None:
    """design.md Semantics 6 (spec "Wildcard Syntax Support" lists them as invalid; upstream filters)."""
    with pytest.raises(ConfigError) as err:
        sf.ResourceStrategyFitArgs.parse({"resources": {pattern: {"type": "MostAllocated", "weight": 1}}})
    assert err.value.field == f"resources.{pattern}"
    assert err.value.value == pattern


@pytest.mark.parametrize("pattern", ["nvidia.com/gpu/*", "nvidia.com/*", "cloudml.gpu/*", "nvidia.com/gpu-*"])
def test_valid_wildcard_patterns(pattern: str) -> None:
    assert sf.ResourceStrategyFitArgs.parse({"resources": {pattern: {}}}).resources[pattern].weight == 1


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"resourceStrategyFitWeight": -5}, "resourceStrategyFitWeight"),
        ({"resourceStrategyFitWeight": 2.5}, "resourceStrategyFitWeight"),
        ({"resourceStrategyFitWeight": True}, "resourceStrategyFitWeight"),
        ({"resources": ["cpu"]}, "resources"),
        ({"resources": {"cpu": "LeastAllocated"}}, "resources.cpu"),
        ({"resources": {"cpu": {"type": "Least"}}}, "resources.cpu.type"),  # upstream: silently Least
        ({"resources": {"cpu": {"weight": 0}}}, "resources.cpu.weight"),  # upstream: silently 1
        ({"resources": {"cpu": {"weight": "heavy"}}}, "resources.cpu.weight"),
        ({"resources": {"cpu": {"weigth": 2}}}, "resources.cpu.weigth"),
        ({"resources": {"c pu": {}}}, "resources.c pu"),
        ({"sra": {"enable": True}}, "sra"),
    ],
)
def test_invalid_arguments_are_config_errors(arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        sf.ResourceStrategyFitArgs.parse(arguments)
    assert err.value.field == field


def test_zero_plugin_weight_is_accepted_and_switches_scoring_off() -> None:
    """Semantics 11: resourceStrategyFitWeight 0 switches the plugin's scoring off, as Volcano does."""
    assert sf.ResourceStrategyFitArgs.parse({"resourceStrategyFitWeight": 0}).plugin_weight == 0
    assert sf.ResourceStrategyFitArgs.parse({"resourceStrategyFitWeight": "0"}).plugin_weight == 0


def test_weights_accept_yaml_numbers_and_strings() -> None:
    args = sf.ResourceStrategyFitArgs.parse(
        {"resourceStrategyFitWeight": "20", "resources": {"cpu": {"weight": 3.0}}}
    )
    assert (args.plugin_weight, args.resources["cpu"].weight) == (20, 3)


# ---------------------------------------------------------------------------------------------- matching


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        ("nvidia.com/gpu-v100", sf.ResourceStrategy(MOST, 3)),  # exact match wins
        ("nvidia.com/gpu-a100", sf.ResourceStrategy(MOST, 2)),  # covered by nvidia.com/gpu/*
        ("nvidia.com/gpu", sf.ResourceStrategy(MOST, 2)),
        ("amd.com/gpu-mi100", sf.ResourceStrategy(LEAST, 2)),
        ("cpu", sf.ResourceStrategy(LEAST, 1)),
        ("memory", None),
        ("intel.com/gpu", None),
    ],
)
def test_matching_priority_configuration_example(resource: str, expected: sf.ResourceStrategy | None) -> None:
    """spec "Matching Priority": exact first, then wildcard (Configuration Example, Story 2)."""
    args = sf.ResourceStrategyFitArgs.parse(EXAMPLE)
    assert args.match(resource) == expected
    assert args.match(resource) == expected  # memoised answer is the same


@pytest.mark.parametrize(
    ("resource", "weight"),
    [
        ("nvidia.com/gpu-h100", 5),  # nvidia.com/gpu/* is longer than nvidia.com/*
        ("nvidia.com/mig-1g.10gb", 1),
        ("nvidia.com/gpu-a100", 9),  # exact beats any wildcard
    ],
)
def test_longest_wildcard_prefix_wins(resource: str, weight: int) -> None:
    args = sf.ResourceStrategyFitArgs.parse(
        {
            "resources": {
                "nvidia.com/*": {"weight": 1},
                "nvidia.com/gpu/*": {"weight": 5},
                "nvidia.com/gpu-a100": {"weight": 9},
            }
        }
    )
    found = args.match(resource)
    assert found is not None and found.weight == weight


# ---------------------------------------------------------------------------------------------- formula


def _score(
    arguments: dict[str, Any],
    requests: dict[str, int],
    allocatable: dict[str, int],
    used: dict[str, int],
    annotations: dict[str, str] | None = None,
) -> float:
    """Scalar and vectorised score of one node; they must agree."""
    strategy = strategy_of(arguments, annotations)
    scalar = strategy_fit_score_node(strategy, requests, allocatable, used)
    columns = sorted(set(allocatable) | set(used) | {"pods"})
    plan = sf.score_plan(strategy, requests, columns)
    vector = strategy_fit_score_nodes(
        plan,
        np.array([[allocatable.get(c, 0) for c in columns]], dtype=np.int64),
        np.array([[used.get(c, 0) for c in columns]], dtype=np.int64),
    )
    assert vector[0] == pytest.approx(scalar, rel=1e-12, abs=1e-12)
    return scalar


def _two(cpu: tuple[str, int], memory: tuple[str, int]) -> dict[str, Any]:
    return {
        "resourceStrategyFitWeight": 10,
        "resources": {
            "cpu": {"type": cpu[0], "weight": cpu[1]},
            "memory": {"type": memory[0], "weight": memory[1]},
        },
    }


REQ = {"cpu": 100, "memory": 100}
USED = {"cpu": 200, "memory": 200}


@pytest.mark.parametrize(
    ("arguments", "allocatable", "expected"),
    [
        # (500-300)/500 = 0.4 for both -> 0.4 * 100 * 10
        (_two(("LeastAllocated", 1), ("LeastAllocated", 1)), {"cpu": 500, "memory": 500}, 400.0),
        (_two(("LeastAllocated", 1), ("LeastAllocated", 1)), {"cpu": 400, "memory": 400}, 250.0),
        # 300/500 = 0.6
        (_two(("MostAllocated", 1), ("MostAllocated", 1)), {"cpu": 500, "memory": 500}, 600.0),
        (_two(("MostAllocated", 1), ("MostAllocated", 1)), {"cpu": 400, "memory": 400}, 750.0),
        # (0.4*2 + 0.6*1) / 3
        (_two(("LeastAllocated", 2), ("MostAllocated", 1)), {"cpu": 500, "memory": 500}, 1400 / 3),
        (_two(("LeastAllocated", 1), ("MostAllocated", 2)), {"cpu": 500, "memory": 500}, 1600 / 3),
        # node without cpu: cpu scores 0 and keeps its weight -> (0 + 0.75*2) / 3
        (_two(("LeastAllocated", 1), ("MostAllocated", 2)), {"memory": 400}, 500.0),
    ],
)
def test_formula_by_hand(arguments: dict[str, Any], allocatable: dict[str, int], expected: float) -> None:
    """spec "config description" table and node score (the cases of upstream's TestScore)."""
    assert _score(arguments, REQ, allocatable, USED) == pytest.approx(expected)


def test_design_config_gpu_pod_example() -> None:
    """design.md config: gpu MostAllocated w2, cpu LeastAllocated w1; gpu 4/8 and cpu 20/32 free."""
    arguments = {
        "resourceStrategyFitWeight": 10,
        "resources": {
            "nvidia.com/gpu": {"type": "MostAllocated", "weight": 2},
            "cpu": {"type": "LeastAllocated", "weight": 1},
        },
    }
    score = _score(
        arguments,
        {"nvidia.com/gpu": 1000, "cpu": 2000, "memory": 2**30},
        {"nvidia.com/gpu": 8000, "cpu": 32_000, "memory": 2**36},
        {"nvidia.com/gpu": 3000, "cpu": 10_000},
    )
    assert score == pytest.approx((0.5 * 2 + 0.625 * 1) / 3 * 100 * 10)


def test_over_allocatable_scores_the_node_zero() -> None:
    """Upstream: "node resources are not enough" makes the whole node score 0."""
    assert (
        _score(_two(("LeastAllocated", 1), ("MostAllocated", 1)), REQ, {"cpu": 250, "memory": 500}, USED) == 0
    )


def test_zero_requests_carry_no_weight() -> None:
    """design.md Semantics 8: a resource with request 0 contributes neither score nor weight."""
    arguments = _two(("LeastAllocated", 1), ("MostAllocated", 1))
    score = _score(arguments, {"cpu": 0, "memory": 100}, {"cpu": 500, "memory": 400}, USED)
    # memory alone: 300/400; counting cpu (request 0) would give (0.6 + 0.75) / 2
    assert score == pytest.approx(750.0)


def test_pod_requesting_nothing_configured_scores_zero() -> None:
    assert (
        _score(_two(("MostAllocated", 1), ("MostAllocated", 1)), {"x.io/y": 1000}, {"x.io/y": 4000}, {}) == 0
    )


def test_requested_resource_absent_from_columns_counts_as_zero_capacity() -> None:
    strategy = strategy_of({"resources": {"cpu": {"weight": 1}, "x.io/fpga": {"weight": 1}}})
    plan = sf.score_plan(strategy, {"cpu": 100, "x.io/fpga": 1000}, ["cpu", "memory"])
    assert plan.columns.tolist() == [0] and plan.missing_weight == 1
    scores = strategy_fit_score_nodes(
        plan, np.array([[500, 0]], dtype=np.int64), np.array([[200, 0]], dtype=np.int64)
    )
    expected = strategy_fit_score_node(strategy, {"cpu": 100, "x.io/fpga": 1000}, {"cpu": 500}, {"cpu": 200})
    assert scores[0] == pytest.approx(expected) == pytest.approx(0.4 / 2 * 1000)


# ---------------------------------------------------------------------------------------------- pod override


def test_scoring_type_override_applies_to_every_configured_resource() -> None:
    strategy = strategy_of(EXAMPLE, {RESOURCE_STRATEGY_SCORING_TYPE: "LeastAllocated"})
    assert strategy.strategy_for("nvidia.com/gpu-v100") == sf.ResourceStrategy(LEAST, 3)
    assert strategy.strategy_for("cpu") == sf.ResourceStrategy(LEAST, 1)
    assert strategy.strategy_for("memory") is None


def test_weight_override_scores_only_the_listed_resources() -> None:
    """Upstream PR #4641: a GPU pod scored only by GPU resources; types from the configuration."""
    strategy = strategy_of(EXAMPLE, {RESOURCE_STRATEGY_WEIGHT: '{"nvidia.com/gpu-a100": 5, "memory": 2}'})
    assert strategy.strategy_for("nvidia.com/gpu-a100") == sf.ResourceStrategy(MOST, 5)
    assert strategy.strategy_for("memory") == sf.ResourceStrategy(LEAST, 2)  # not configured -> Least
    assert strategy.strategy_for("cpu") is None


def test_both_overrides() -> None:
    annotations = {
        RESOURCE_STRATEGY_SCORING_TYPE: "MostAllocated",
        RESOURCE_STRATEGY_WEIGHT: '{"cpu": 3, "nvidia.com/*": 1}',
    }
    strategy = strategy_of(EXAMPLE, annotations)
    assert strategy.strategy_for("cpu") == sf.ResourceStrategy(MOST, 3)
    assert strategy.strategy_for("nvidia.com/gpu-v100") == sf.ResourceStrategy(MOST, 1)
    # and the score uses them: cpu MostAllocated (300/500) w3 only
    score = _score(EXAMPLE, {"cpu": 100, "memory": 100}, {"cpu": 500, "memory": 500}, USED, annotations)
    assert score == pytest.approx(0.6 * 100 * 10)


@pytest.mark.parametrize(
    ("annotations", "field"),
    [
        ({RESOURCE_STRATEGY_SCORING_TYPE: "most-allocated"}, RESOURCE_STRATEGY_SCORING_TYPE),
        ({RESOURCE_STRATEGY_WEIGHT: "cpu=2"}, RESOURCE_STRATEGY_WEIGHT),
        ({RESOURCE_STRATEGY_WEIGHT: "[1, 2]"}, RESOURCE_STRATEGY_WEIGHT),
        ({RESOURCE_STRATEGY_WEIGHT: "{}"}, RESOURCE_STRATEGY_WEIGHT),
        ({RESOURCE_STRATEGY_WEIGHT: '{"cpu": 0}'}, RESOURCE_STRATEGY_WEIGHT),
        ({RESOURCE_STRATEGY_WEIGHT: '{"cpu": 1.5}'}, RESOURCE_STRATEGY_WEIGHT),
        ({RESOURCE_STRATEGY_WEIGHT: '{"cpu": true}'}, RESOURCE_STRATEGY_WEIGHT),
        ({RESOURCE_STRATEGY_WEIGHT: '{"*": 1}'}, RESOURCE_STRATEGY_WEIGHT),
    ],
)
def test_malformed_override(annotations: dict[str, str], field: str) -> None:
    """Webhook denies (InvalidAnnotation); the scheduler warns and uses the configuration (Semantics 3)."""
    with pytest.raises(InvalidAnnotation) as err:
        sf.parse_pod_override(annotations, "Pod/ns/p")
    assert err.value.field == field and err.value.where == "Pod/ns/p"

    args = sf.ResourceStrategyFitArgs.parse(EXAMPLE)
    strategy = sf.pod_strategy(args, MakePod().annotations(annotations).info())
    assert strategy.override is None
    assert strategy.strategy_for("cpu") == sf.ResourceStrategy(LEAST, 1)
    (event,) = strategy.events
    assert (event.obj, event.type, event.reason) == ("Pod/ns/p", "Warning", INVALID_ANNOTATION)
    assert field in event.message


def test_no_override() -> None:
    assert sf.parse_pod_override({"other": "x"}) is None
    assert strategy_of(EXAMPLE).events == ()


# ---------------------------------------------------------------------------------------------- properties

RESOURCE_NAMES = ["cpu", "memory", "nvidia.com/gpu-a100", "amd.com/gpu-mi100", "x.io/other"]
_amount = st.integers(min_value=0, max_value=2**40)


@settings(max_examples=200, deadline=None)
@given(
    requests=st.dictionaries(st.sampled_from(RESOURCE_NAMES), _amount, max_size=5),
    rows=st.lists(
        st.tuples(st.lists(_amount, min_size=5, max_size=5), st.lists(_amount, min_size=5, max_size=5))
    ),
    scoring_type=st.sampled_from([None, "MostAllocated", "LeastAllocated"]),
)
def test_vectorised_equals_scalar(
    requests: dict[str, int],
    rows: list[tuple[list[int], list[int]]],
    scoring_type: str | None,
) -> None:
    annotations = {RESOURCE_STRATEGY_SCORING_TYPE: scoring_type} if scoring_type else {}
    strategy = strategy_of({**EXAMPLE, "resourceStrategyFitWeight": 3}, annotations)
    columns = RESOURCE_NAMES[:4]  # x.io/other is requested but never a column
    plan = sf.score_plan(strategy, requests, columns)
    allocatable = np.array([r[0][:4] for r in rows], dtype=np.int64).reshape(len(rows), 4)
    used = np.array([r[1][:4] for r in rows], dtype=np.int64).reshape(len(rows), 4)
    scores = strategy_fit_score_nodes(plan, allocatable, used)
    assert scores.shape == (len(rows),)
    for i in range(len(rows)):
        alloc_i = dict(zip(columns, allocatable[i].tolist(), strict=True))
        used_i = dict(zip(columns, used[i].tolist(), strict=True))
        scalar = strategy_fit_score_node(strategy, requests, alloc_i, used_i)
        assert scores[i] == pytest.approx(scalar, rel=1e-9, abs=1e-9)
        assert 0.0 <= scores[i] <= 100 * 3 + 1e-9


@pytest.mark.parametrize(
    "arguments",
    [
        {"resourceStrategyFitWeight": 10**400},
        {"resourceStrategyFitWeight": "9" * 30},
        {"resources": {"cpu": {"weight": 1_000_001}}},
    ],
)
def test_weight_beyond_the_float_range_is_a_config_error(arguments: dict[str, Any]) -> None:
    """Such weights used to pass, then raise OverflowError ("int too large to convert to float")."""
    with pytest.raises(ConfigError) as info:
        sf.ResourceStrategyFitArgs.parse(arguments)
    assert "1000000" in str(info.value)


@pytest.mark.parametrize("raw", ['{"cpu": ' + "9" * 40 + "}", '{"cpu": 1000001}', "[" * 100_000])
def test_hostile_pod_weights_are_invalid_annotations(raw: str) -> None:
    """A huge weight used to overflow in score_plan; a deeply nested array raised RecursionError."""
    with pytest.raises(InvalidAnnotation) as info:
        sf.parse_pod_override({RESOURCE_STRATEGY_WEIGHT: raw}, "Pod/ns/p")
    assert str(info.value).startswith("Pod/ns/p: volcano.sh/resource-strategy-weight")


@settings(max_examples=200, deadline=None)
@given(OBJECTS)
def test_fuzz_parse_arguments_raises_only_config_errors(resources: dict[str, Any]) -> None:
    only_gpuq_errors(sf.ResourceStrategyFitArgs.parse, {"resources": resources})
    only_gpuq_errors(sf.ResourceStrategyFitArgs.parse, resources)


@settings(max_examples=200, deadline=None)
@given(ANNOTATION_VALUES, ANNOTATION_VALUES)
def test_fuzz_pod_override(scoring_type: str, weights: str) -> None:
    annotations = {RESOURCE_STRATEGY_SCORING_TYPE: scoring_type, RESOURCE_STRATEGY_WEIGHT: weights}
    only_gpuq_errors(sf.parse_pod_override, annotations)
    # The scheduler never raises: a bad override is a Warning event and the plugin configuration.
    strategy = sf.pod_strategy(
        sf.ResourceStrategyFitArgs.parse(None), MakePod().annotations(annotations).info()
    )
    plan = sf.score_plan(strategy, {"cpu": 1_000}, ["cpu"])
    assert strategy_fit_score_nodes(plan, np.array([[4_000]]), np.array([[0]])).shape == (1,)
