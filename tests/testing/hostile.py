"""Hostile user input for the parsers' fuzz tests: JSON/YAML-shaped values of the wrong shape.

Every parser of user input must answer malformed input with a :class:`GpuqError` that names the
problem, never with a stray ``AttributeError``/``TypeError``/``OverflowError`` (design.md, "One
error hierarchy"). The fuzz tests feed these values in and call :func:`only_gpuq_errors`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from gpuq_k8s.common.model.errors import GpuqError

# Field names the parsers look for, so generated maps reach deep into the code paths.
KEYS = st.sampled_from(
    [
        "metadata", "spec", "status", "name", "namespace", "labels", "annotations", "containers",
        "initContainers", "resources", "requests", "limits", "overhead", "priority", "nodeSelector",
        "tolerations", "affinity", "capacity", "allocatable", "taints", "conditions", "type", "key",
        "min", "max", "used", "total", "single", "maxWorkers", "maxGPUCount", "maxRequests",
        "defaultRequests", "alertThresholdPercent", "tflops", "vram", "cpu", "memory", "nvidia.com/gpu",
        "workers", "requests.tflops", "requests.vram",
    ]
)  # fmt: skip
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["1", "500m", "64Gi", "-1", "1e29", "1e40", "nan", "Always", "True"]),
)
JSON_VALUES = st.recursive(
    LEAVES,
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(KEYS, children, max_size=5)),
    max_leaves=25,
)
OBJECTS = st.dictionaries(KEYS, JSON_VALUES, max_size=4)
# Annotation values are strings (the apiserver enforces it); these are the nasty ones.
ANNOTATION_VALUES = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "1e29",
            "1e40",
            "-1",
            "nan",
            "[" * 5000,
            '{"cpu": 1e400}',
            '{"cpu": ' + "9" * 40 + "}",
            '{"a*b": 1}',
            "{}",
        ]
    ),
)


def only_gpuq_errors(parse: Callable[[Any], object], value: Any) -> None:
    """Call ``parse(value)``; a :class:`GpuqError` is a fine answer, anything else fails the test."""
    try:
        parse(value)
    except GpuqError as err:
        assert str(err) and "\n" not in str(err)
