"""Resource vectors: a mapping of resource name to an exact integer amount.

The one question every quota asks is "does this request fit in that limit?", and the answer depends
on what an *absent* key means. The specs disagree on purpose: an ElasticQuota ``max`` without a key is
unlimited, a Queue's card quota without a card type is zero. So :meth:`Resources.fits` never guesses;
the caller says which meaning applies with :class:`Absent`.

Explicit zeros are kept (``max: {nvidia.com/gpu: 0}`` forbids GPUs, an absent key may not).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from gpuq_k8s.common.model.errors import InvalidQuantity, InvalidValue
from gpuq_k8s.common.model.quantity import format_units, to_units, units_to_number


class Absent(enum.Enum):
    """What a key missing from a limit means."""

    UNLIMITED = "unlimited"
    ZERO = "zero"


class Resources(Mapping[str, int]):
    """An immutable resource vector in gpuq's integer units (see :mod:`common.model.quantity`)."""

    __slots__ = ("_amounts", "_hash")

    def __init__(self, amounts: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        self._amounts: dict[str, int] = dict(amounts)
        self._hash: int | None = None

    @classmethod
    def parse(
        cls, quantities: Mapping[str, Any] | None, where: str = "", *, non_negative: bool = False
    ) -> Resources:
        """Build from a Kubernetes ResourceList (``{"cpu": "500m", "memory": "1Gi"}``).

        Raises :class:`InvalidValue` (an :class:`InvalidQuantity` for a bad amount) naming ``where``.
        ``non_negative`` refuses negative amounts, as the apiserver does for Pods and Nodes; custom
        resources whose schema allows them (Queue, PodGroup, quotas) are checked by their own rules.
        """
        if quantities is None:
            return EMPTY
        if not isinstance(quantities, Mapping):
            # A list or a bare number where a ResourceList belongs (hand-written manifests).
            raise InvalidValue(where or "resources", quantities, "a map of resource name to quantity")
        if not quantities:
            return EMPTY
        parsed: dict[str, int] = {}
        for name, value in quantities.items():
            field = f"{where}[{name}]" if where else str(name)
            amount = to_units(str(name), value, field)
            if amount < 0 and non_negative:
                # The apiserver refuses negative pod requests/limits and node capacity; a hand-written
                # manifest saying so must not be read as zero (or as free capacity).
                raise InvalidQuantity(field, value, "a non-negative Kubernetes quantity")
            parsed[str(name)] = amount
        return cls(parsed)

    # Mapping protocol: reads of an absent key answer 0 through get(), never KeyError surprises.
    def __getitem__(self, key: str) -> int:
        return self._amounts[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._amounts)

    def __len__(self) -> int:
        return len(self._amounts)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._amounts.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resources):
            return self._amounts == other._amounts
        if isinstance(other, Mapping):
            return self._amounts == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={format_units(k, v)}" for k, v in sorted(self._amounts.items()))
        return f"Resources({inner})"

    def amount(self, key: str) -> int:
        """The amount of ``key``; an absent key is 0."""
        return self._amounts.get(key, 0)

    def __add__(self, other: Mapping[str, int]) -> Resources:
        merged = dict(self._amounts)
        for key, value in other.items():
            merged[key] = merged.get(key, 0) + value
        return Resources(merged)

    def __sub__(self, other: Mapping[str, int]) -> Resources:
        merged = dict(self._amounts)
        for key, value in other.items():
            merged[key] = merged.get(key, 0) - value
        return Resources(merged)

    def scaled(self, factor: int) -> Resources:
        return Resources({k: v * factor for k, v in self._amounts.items()})

    def clamped(self) -> Resources:
        """Negative amounts raised to 0: a release never drives usage below empty."""
        return Resources({k: max(v, 0) for k, v in self._amounts.items()})

    def nonzero(self) -> Resources:
        return Resources({k: v for k, v in self._amounts.items() if v != 0})

    def only(self, keys: Iterable[str]) -> Resources:
        wanted = set(keys)
        return Resources({k: v for k, v in self._amounts.items() if k in wanted})

    def without(self, keys: Iterable[str]) -> Resources:
        unwanted = set(keys)
        return Resources({k: v for k, v in self._amounts.items() if k not in unwanted})

    def is_zero(self) -> bool:
        return all(v == 0 for v in self._amounts.values())

    def exceeded(self, limit: Mapping[str, int], absent: Absent) -> list[str]:
        """Keys whose amount is above ``limit``, sorted; ``absent`` says what a missing limit means.

        A key this vector holds at 0 (or below) never exceeds anything, whatever the limit says.
        """
        over: list[str] = []
        for key, value in self._amounts.items():
            if value <= 0:
                continue
            if key in limit:
                if value > limit[key]:
                    over.append(key)
            elif absent is Absent.ZERO:
                over.append(key)
        return sorted(over)

    def fits(self, limit: Mapping[str, int], absent: Absent) -> bool:
        """Every amount is at most the limit's (``less-or-equal`` under the given absent rule)."""
        return not self.exceeded(limit, absent)

    def to_quantities(self) -> dict[str, str]:
        """As a Kubernetes ResourceList of canonical quantity strings, keys sorted."""
        return {k: format_units(k, v) for k, v in sorted(self._amounts.items())}

    def to_numbers(self) -> dict[str, int | float]:
        """As JSON numbers in each resource's own unit (cores, bytes, cards), keys sorted."""
        return {k: units_to_number(k, v) for k, v in sorted(self._amounts.items())}


EMPTY = Resources()

# Distinct request vectors, one shared object each (bounded; starts over when full).
_INTERNED: dict[Resources, Resources] = {EMPTY: EMPTY}
_MAX_INTERNED = 4096


def interned(resources: Resources) -> Resources:
    """The one shared object equal to ``resources``. Pods of a workload parse to equal but distinct
    vectors; the scheduler memoises per request vector in a dozen places, and a dict lookup whose
    key is the very object stored skips the element-by-element comparison."""
    found = _INTERNED.get(resources)
    if found is None:
        if len(_INTERNED) >= _MAX_INTERNED:
            _INTERNED.clear()
        _INTERNED[resources] = found = resources
    return found
