"""Claim constraints across the devices of several requests.

``matchAttribute``: every device allocated for the constrained requests (all requests when the list
is empty; a subrequest counts under its own name and its parent's) has the attribute, with the same
type and value; the first device fixes the value. ``distinctAttribute``: every such device has the
attribute and no two share a value. An attribute is looked up fully qualified, and under its short
name when the domain is the device's driver's. Versions compare as strings (semver's canonical
form makes equal versions equal strings), as the structured allocator compares them.

Both are monotonic (a device refused now is refused with more devices in the set), which lets the
search stop early; :meth:`add` and :meth:`remove` are exact inverses for backtracking. gpuq's
``distinctAttribute`` keeps every value of the set; the structured allocator keeps one per request
name, so two devices of one request can share a value with a third there (docs/design.md).
"""

from __future__ import annotations

from collections import Counter

from gpuq_k8s.common.model.devices.cel_env import VersionText
from gpuq_k8s.common.model.devices.claims import Constraint
from gpuq_k8s.common.model.devices.device import AttributeValue, Device

AttributeKey = tuple[str, AttributeValue]


def attribute_key(value: AttributeValue) -> AttributeKey:
    """Type and value: ``True`` is not ``1``, a version is not the same string."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    return ("version", str(value)) if isinstance(value, VersionText) else ("string", value)


class ConstraintState:
    """One constraint during one allocation attempt."""

    __slots__ = ("_values", "constraint", "scope")

    def __init__(self, constraint: Constraint) -> None:
        self.constraint = constraint
        self.scope = frozenset(constraint.requests)
        self._values: Counter[AttributeKey] = Counter()

    def applies(self, request: str) -> bool:
        """``request`` is ``name`` or ``name/sub``."""
        if not self.scope:
            return True
        return request in self.scope or request.partition("/")[0] in self.scope

    def add(self, request: str, device: Device) -> bool:
        if not self.applies(request):
            return True
        value = device.attribute(self.constraint.attribute)
        if value is None:
            return False
        key = attribute_key(value)
        if self._values:
            if self.constraint.distinct:
                if key in self._values:
                    return False
            elif key not in self._values:
                return False
        self._values[key] += 1
        return True

    def remove(self, request: str, device: Device) -> None:
        if not self.applies(request):
            return
        value = device.attribute(self.constraint.attribute)
        if value is None:
            return
        key = attribute_key(value)
        self._values[key] -= 1
        if self._values[key] <= 0:
            del self._values[key]

    def describe(self) -> str:
        kind = "distinctAttribute" if self.constraint.distinct else "matchAttribute"
        scope = ", ".join(self.constraint.requests) or "all requests"
        return f"{kind} {self.constraint.attribute} ({scope})"
