"""Kubernetes quantities as exact integers (design.md Semantics, "Units")."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuq_k8s.common.model.errors import InvalidQuantity
from gpuq_k8s.common.model.quantity import (
    MAX_UNITS,
    format_units,
    parse_quantity,
    to_units,
    unit_of,
    units_to_number,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Fraction(0)),
        ("1", Fraction(1)),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        ("0.1", Fraction(1, 10)),
        (".5", Fraction(1, 2)),
        ("2.", Fraction(2)),
        ("64Gi", Fraction(64 * 2**30)),
        ("1Ki", Fraction(1024)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("5e-3", Fraction(5, 1000)),
        ("1k", Fraction(1000)),
        ("1M", Fraction(10**6)),
        ("100u", Fraction(100, 10**6)),
        ("3n", Fraction(3, 10**9)),
        ("+2", Fraction(2)),
        ("-2", Fraction(-2)),
        (" 4 ", Fraction(4)),
    ],
)
def test_parse_valid(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text", ["", " ", "abc", "1.2.3", "1 Gi", "1gi", "1KiB", "Gi", "1e", "m", "--1", "1e99999", "0x10", "."]
)
def test_parse_invalid_names_field_and_value(text: str) -> None:
    with pytest.raises(InvalidQuantity) as info:
        parse_quantity(text, field="spec.capability.cpu")
    message = str(info.value)
    assert "spec.capability.cpu" in message
    assert repr(text) in message


@pytest.mark.parametrize("value", [True, None, float("nan"), float("inf"), [1]])
def test_parse_rejects_non_quantities(value: object) -> None:
    with pytest.raises(InvalidQuantity):
        parse_quantity(value)  # type: ignore[arg-type]


def test_yaml_numbers_are_exact() -> None:
    assert parse_quantity(2) == 2
    assert parse_quantity(0.1) == Fraction(1, 10)
    assert to_units("cpu", 0.1) == 100


@pytest.mark.parametrize(
    ("resource", "text", "units"),
    [
        ("cpu", "500m", 500),
        ("cpu", "2", 2000),
        ("cpu", "1e3", 1_000_000),
        ("cpu", "0.0001", 1),  # rounds up, like MilliValue(): a request is never under-counted
        ("memory", "64Gi", 64 * 2**30),
        ("memory", "1.5", 2),
        ("memory", "1M", 10**6),
        ("ephemeral-storage", "1Ki", 1024),
        ("hugepages-2Mi", "4Mi", 4 * 2**20),
        ("nvidia.com/gpu", "2", 2000),
        ("nvidia.com/gpu", "500m", 500),
        ("pods", "110", 110),
        ("vram", "16Gi", 16 * 2**30),
    ],
)
def test_to_units(resource: str, text: str, units: int) -> None:
    assert to_units(resource, text) == units


@pytest.mark.parametrize(
    ("resource", "units", "text", "number"),
    [
        ("cpu", 500, "500m", 0.5),
        ("cpu", 4000, "4", 4),
        ("memory", 64 * 2**30, "64Gi", 64 * 2**30),
        ("memory", 1000, "1000", 1000),
        ("memory", 0, "0", 0),
        ("nvidia.com/gpu", 3000, "3", 3),
        ("pods", 7, "7", 7),
    ],
)
def test_format_and_json_number(resource: str, units: int, text: str, number: float) -> None:
    assert format_units(resource, units) == text
    assert units_to_number(resource, units) == number
    assert isinstance(units_to_number(resource, units), int) == float(number).is_integer()


@given(
    st.integers(min_value=0, max_value=10**15), st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "pods"])
)
def test_format_round_trips(units: int, resource: str) -> None:
    assert to_units(resource, format_units(resource, units)) == units


def test_units_by_resource() -> None:
    assert [unit_of(r) for r in ("cpu", "memory", "hugepages-1Gi", "pods", "example.com/foo")] == [
        "milli",
        "bytes",
        "bytes",
        "count",
        "milli",
    ]


def test_amounts_beyond_int64_are_refused() -> None:
    """The scheduler keeps amounts in int64 arrays: a larger one must be an InvalidQuantity here,
    not an OverflowError there (a "1e29" node annotation used to crash crossquota's node arrays)."""
    assert to_units("memory", str(MAX_UNITS)) == MAX_UNITS
    assert to_units("cpu", "9223372036854775") == 9223372036854775000
    for resource, value in (("cpu", "1e29"), ("memory", 10**19), ("nvidia.com/gpu", "1e17")):
        with pytest.raises(InvalidQuantity) as info:
            to_units(resource, value, "spec.max[x]")
        assert "spec.max[x]" in str(info.value) and str(MAX_UNITS) in str(info.value)
