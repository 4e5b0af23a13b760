"""DRA amounts (device capacity, counters, capacity requests) as exact integers of nano-units.

``resource.k8s.io`` writes every amount as a Kubernetes quantity (``80Gi``, ``4``, ``500m``). The
structured allocator adds, subtracts and compares them exactly (``resource.Quantity`` arithmetic), so
gpuq keeps them exact too: an amount is an ``int`` of nano-units (``1`` is 10^9, ``80Gi`` is
80 * 2^30 * 10^9). Nano is the smallest suffix a quantity can be written with (``100n``); a finer
amount (``1e-12``) is rounded up to 1n, as ``resource.Quantity`` rounds what it cannot represent.
Python integers never overflow, so no amount is capped.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Any, Final

from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.quantity import EXPECTED_QUANTITY, parse_quantity

NANO: Final = 10**9
_BINARY: Final = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_FRACTIONAL: Final = (("m", 10**6), ("u", 10**3), ("n", 1))


def parse_amount(value: Any, field: str, where: str = "") -> int:
    """A non-negative quantity (string or YAML number) as nano-units; an :class:`InvalidValue` naming
    ``field`` otherwise."""
    if isinstance(value, str):
        try:
            return _text_amount(value)
        except InvalidValue as err:
            raise InvalidValue(field, value, err.expected, where) from None
    try:
        nano = math.ceil(parse_quantity(value, field) * NANO)
    except InvalidValue as err:
        raise InvalidValue(field, value, err.expected, where) from None
    if nano < 0:
        raise InvalidValue(field, value, f"a non-negative quantity ({EXPECTED_QUANTITY})", where)
    return nano


@lru_cache(maxsize=4096)
def _text_amount(text: str) -> int:
    # A cluster's slices repeat a handful of quantities ("80Gi", "1"); errors are not cached.
    nano = math.ceil(parse_quantity(text, "quantity") * NANO)
    if nano < 0:
        raise InvalidValue("quantity", text, f"a non-negative quantity ({EXPECTED_QUANTITY})")
    return nano


def amount_fraction(nano: int) -> Fraction:
    """The amount in base units, exactly."""
    return Fraction(nano, NANO)


def format_amount(nano: int) -> str:
    """An amount as a canonical quantity string: a binary suffix when it divides exactly (``80Gi``),
    else a plain integer (``4``), else the largest fractional suffix that is exact (``500m``)."""
    if nano % NANO == 0:
        whole = nano // NANO
        for suffix, factor in _BINARY:
            if whole and whole % factor == 0:
                return f"{whole // factor}{suffix}"
        return str(whole)
    for suffix, scale in _FRACTIONAL:
        if nano % scale == 0:
            return f"{nano // scale}{suffix}"
    raise AssertionError("unreachable: nano-units are integers")  # pragma: no cover
