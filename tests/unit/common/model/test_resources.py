"""Resource vectors with explicit absent-key rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuq_k8s.common.model.errors import InvalidQuantity, InvalidValue
from gpuq_k8s.common.model.resources import EMPTY, Absent, Resources, interned
from tests.testing.builders import MakePod

KEYS = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "pods"])
VECTORS = st.dictionaries(KEYS, st.integers(min_value=-(10**9), max_value=10**9)).map(Resources)


def test_parse_resource_list() -> None:
    r = Resources.parse({"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": 2})
    assert r == {"cpu": 500, "memory": 2**30, "nvidia.com/gpu": 2000}
    assert r.to_quantities() == {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "2"}
    assert r.to_numbers() == {"cpu": 0.5, "memory": 2**30, "nvidia.com/gpu": 2}


def test_parse_error_names_where_and_key() -> None:
    with pytest.raises(InvalidQuantity, match=r"spec.max\[cpu\]: invalid value 'lots'"):
        Resources.parse({"cpu": "lots"}, "spec.max")


def test_add_sub_with_absent_keys() -> None:
    a = Resources({"cpu": 1000, "memory": 10})
    b = Resources({"cpu": 500, "nvidia.com/gpu": 1000})
    assert a + b == {"cpu": 1500, "memory": 10, "nvidia.com/gpu": 1000}
    assert a - b == {"cpu": 500, "memory": 10, "nvidia.com/gpu": -1000}
    assert (a - b).clamped() == {"cpu": 500, "memory": 10, "nvidia.com/gpu": 0}
    assert a.amount("nvidia.com/gpu") == 0


@pytest.mark.parametrize(
    ("request_", "limit", "absent", "exceeded"),
    [
        ({"cpu": 1000}, {"cpu": 1000}, Absent.ZERO, []),
        ({"cpu": 1001}, {"cpu": 1000}, Absent.ZERO, ["cpu"]),
        (
            {"nvidia.com/gpu": 1000},
            {"cpu": 1000},
            Absent.UNLIMITED,
            [],
        ),  # ElasticQuota max: absent = unlimited
        ({"nvidia.com/gpu": 1000}, {"cpu": 1000}, Absent.ZERO, ["nvidia.com/gpu"]),  # card quota: absent = 0
        ({"nvidia.com/gpu": 1000}, {"nvidia.com/gpu": 0}, Absent.UNLIMITED, ["nvidia.com/gpu"]),  # explicit 0
        ({"nvidia.com/gpu": 0}, {}, Absent.ZERO, []),  # asking for nothing never exceeds
        ({"b": 2, "a": 2}, {"a": 1, "b": 1}, Absent.ZERO, ["a", "b"]),  # sorted, deterministic
    ],
)
def test_fits_and_exceeded(
    request_: dict[str, int], limit: dict[str, int], absent: Absent, exceeded: list[str]
) -> None:
    r = Resources(request_)
    assert r.exceeded(limit, absent) == exceeded
    assert r.fits(limit, absent) == (not exceeded)


def test_explicit_zero_is_kept() -> None:
    assert "nvidia.com/gpu" in Resources.parse({"nvidia.com/gpu": "0"})
    assert Resources.parse({"nvidia.com/gpu": "0"}).nonzero() == EMPTY


def test_hash_and_equality() -> None:
    assert hash(Resources({"cpu": 1})) == hash(Resources({"cpu": 1}))
    assert Resources({"cpu": 1}) == {"cpu": 1}
    assert Resources({"cpu": 1}) != Resources({"cpu": 2})


@given(VECTORS, VECTORS)
def test_add_then_sub_restores(a: Resources, b: Resources) -> None:
    assert (a + b - b).nonzero() == a.nonzero()


@given(VECTORS, VECTORS, VECTORS)
def test_addition_is_associative_and_commutative(a: Resources, b: Resources, c: Resources) -> None:
    assert ((a + b) + c).nonzero() == (a + (b + c)).nonzero()
    assert (a + b).nonzero() == (b + a).nonzero()


@pytest.mark.parametrize("value", [["cpu", "1"], "1", 3])
def test_parse_non_mapping_names_where(value: object) -> None:
    with pytest.raises(InvalidValue) as info:
        Resources.parse(value, "status.allocatable")  # type: ignore[arg-type]
    assert "status.allocatable" in str(info.value) and "a map of resource name to quantity" in str(info.value)


def test_pods_with_equal_requests_share_one_interned_vector() -> None:
    """The scheduler's per-request memos then hit by identity; unequal requests stay apart."""

    a, b, c = (
        MakePod(name).req(cpu=cpu, memory="1Gi").info()
        for name, cpu in [("a", "500m"), ("b", "0.5"), ("c", "1")]
    )
    assert a.requests is b.requests and a.requests == Resources({"cpu": 500, "memory": 1024**3})
    assert c.requests is not a.requests and c.requests != a.requests
    assert interned(Resources({"cpu": 500, "memory": 1024**3})) is a.requests
