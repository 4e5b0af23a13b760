"""Kubernetes quantities as exact integers.

Kubernetes writes amounts as quantity strings (``500m``, ``1.5``, ``64Gi``, ``1e3``). gpuq keeps every
amount as an exact integer in a fixed unit per resource, as kube-scheduler and Volcano do internally:

* ``cpu``: millicores;
* ``memory``, ``ephemeral-storage``, ``storage``, ``hugepages-*`` and GPU memory (``vram``): bytes;
* ``pods``: a plain count;
* everything else (cards, extended resources, TFLOPS): milli-units (x1000), so ``nvidia.com/gpu: 2``
  is 2000 and a fractional share stays exact.

Parsing goes through :class:`fractions.Fraction` so ``0.1`` is exactly a tenth, then rounds *up* to the
unit, like ``resource.Quantity.MilliValue()`` and ``Value()``: a request is never under-counted.
Numbers are bounded (:mod:`common.model.limits`: at most 64 digits, exponents within +-30), so any
string, however long, is an amount or an :class:`InvalidQuantity`.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction
from typing import Final

from gpuq_k8s.common.model.errors import InvalidQuantity
from gpuq_k8s.common.model.limits import MAX_DIGITS, MAX_EXPONENT

_BINARY_SUFFIX: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIX: Final = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# The apiserver's grammar: a signed decimal number, then a binary suffix, a decimal suffix or an
# exponent. A bare "." or a leading "." without digits is rejected there too.
_QUANTITY_RE: Final = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<dec>[numkMGTPE]?))$"
)

EXPECTED_QUANTITY: Final = "a Kubernetes quantity such as 500m, 2, 1.5, 64Gi or 1e3"
# The largest amount in gpuq's units, as for kube-scheduler's int64 MilliValue()/Value(). The
# scheduler keeps amounts in int64 numpy arrays, so a larger one ("1e29" in a node annotation, or
# a 30-digit YAML integer) must be refused here rather than overflow there (8 EiB of memory and
# 9 quadrillion cores are still representable).
MAX_UNITS: Final = 2**63 - 1

CPU: Final = "cpu"
MEMORY: Final = "memory"
PODS: Final = "pods"
_BYTE_RESOURCES: Final = frozenset({MEMORY, "ephemeral-storage", "storage", "vram"})
_COUNT_RESOURCES: Final = frozenset({PODS})


def parse_quantity(value: str | int | float, field: str = "quantity") -> Fraction:
    """Parse a quantity string (or a YAML number) into an exact fraction of the base unit.

    Raises :class:`InvalidQuantity` naming ``field`` for anything the apiserver would refuse.
    """
    if isinstance(value, bool):
        raise InvalidQuantity(field, value, EXPECTED_QUANTITY)
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidQuantity(field, value, EXPECTED_QUANTITY)
        # repr() is the shortest string that round-trips, so 0.1 parses as exactly 1/10.
        value = repr(value)
    if not isinstance(value, str):
        raise InvalidQuantity(field, value, EXPECTED_QUANTITY)
    text = value.strip()
    match = _QUANTITY_RE.match(text)
    if match is None:
        raise InvalidQuantity(field, value, EXPECTED_QUANTITY)
    digits = match.group("num")
    if len(digits) - (digits[0] in "+-") - ("." in digits) > MAX_DIGITS:
        # Python refuses int() of more than 4,300 digits (a ValueError), and no amount needs 64.
        raise InvalidQuantity(field, value, f"a number of at most {MAX_DIGITS} digits ({EXPECTED_QUANTITY})")
    number = Fraction(digits)
    if match.group("bin"):
        return number * _BINARY_SUFFIX[match.group("bin")]
    if match.group("exp"):
        # Larger exponents are legal syntax but no real resource needs them; refusing them keeps a
        # hostile "1e999999999" from allocating a huge integer inside the webhook.
        exponent_text = match.group("exp")[1:]
        magnitude = exponent_text.lstrip("+-").lstrip("0") or "0"
        if len(magnitude) > len(str(MAX_EXPONENT)) or int(magnitude) > MAX_EXPONENT:
            raise InvalidQuantity(field, value, f"an exponent within +-{MAX_EXPONENT}")
        exponent = -int(magnitude) if exponent_text.startswith("-") else int(magnitude)
        return number * Fraction(10) ** exponent
    return number * _DECIMAL_SUFFIX[match.group("dec") or ""]


def unit_of(resource: str) -> str:
    """The integer unit gpuq stores ``resource`` in: ``milli``, ``bytes`` or ``count``."""
    if resource in _BYTE_RESOURCES or resource.startswith("hugepages-"):
        return "bytes"
    if resource in _COUNT_RESOURCES:
        return "count"
    return "milli"


def to_units(resource: str, value: str | int | float, field: str | None = None) -> int:
    """Parse ``value`` as an amount of ``resource`` in gpuq's integer unit, rounding up.

    Raises :class:`InvalidQuantity` for a malformed value or one beyond :data:`MAX_UNITS`.
    """
    unit = unit_of(resource)
    if isinstance(value, str):
        # Clusters repeat a handful of quantity strings ("1", "500m", "64Gi") millions of times, and
        # the exact Fraction path costs microseconds: memoise valid strings per unit. Errors are not
        # cached (lru_cache does not cache exceptions) and are re-raised naming this call's field.
        try:
            return _text_units(value, unit == "milli")
        except InvalidQuantity as err:
            raise InvalidQuantity(field or resource, value, err.expected) from None
    return _units(parse_quantity(value, field or resource), unit == "milli", value, field or resource)


@functools.lru_cache(maxsize=4096)
def _text_units(text: str, milli: bool) -> int:
    return _units(parse_quantity(text), milli, text, "quantity")


def _units(quantity: Fraction, milli: bool, value: object, field: str) -> int:
    amount = math.ceil(quantity * 1000) if milli else math.ceil(quantity)
    if abs(amount) > MAX_UNITS:
        unit = "milli" if milli else "base"
        raise InvalidQuantity(
            field, value, f"an amount of at most {MAX_UNITS} {unit} units ({EXPECTED_QUANTITY})"
        )
    return amount


def units_to_number(resource: str, amount: int) -> int | float:
    """An integer amount as a JSON number in the resource's own unit (cores, bytes, cards)."""
    if unit_of(resource) != "milli":
        return amount
    whole, rest = divmod(amount, 1000)
    return whole if rest == 0 else amount / 1000


def format_units(resource: str, amount: int) -> str:
    """An integer amount as a canonical Kubernetes quantity string (``500m``, ``2``, ``64Gi``)."""
    if unit_of(resource) == "milli":
        whole, rest = divmod(amount, 1000)
        return str(whole) if rest == 0 else f"{amount}m"
    return format_bytes(amount) if unit_of(resource) == "bytes" else str(amount)


def format_bytes(amount: int) -> str:
    """Bytes with the largest binary suffix that divides exactly (``64Gi``), else a plain integer."""
    if amount == 0:
        return "0"
    for suffix, factor in reversed(_BINARY_SUFFIX.items()):
        if amount % factor == 0:
            return f"{amount // factor}{suffix}"
    return str(amount)
