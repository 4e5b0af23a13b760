"""Consumable capacity (DRAConsumableCapacity, beta and on by default in 1.36): how much of a device's
capacity one allocation consumes, and whether it still fits.

A device with ``allowMultipleAllocations: true`` can be shared by several allocations, each
consuming part of its capacity (``consumedCapacity`` in the result, with a ``shareID``). For each
capacity of the device, :func:`consumed` is what one allocation takes (structured allocator
``calculateConsumedCapacity``):

* no request for it: the policy's ``default``, else the whole capacity;
* a request without a ``requestPolicy``: the request;
* ``validRange``: below ``min`` is ``min``; with a ``step``, rounded up to ``min + k*step``
  (amounts as whole units, as ``Quantity.Value()`` rounds them);
* ``validValues``: the smallest valid value at least the request, else the request itself.

The result then must not violate the policy (:func:`violates`: over ``max``, off the ``step`` grid,
not one of ``validValues``; the ``default`` always passes) and must fit in what is left: the
consumed capacity of existing allocations plus this one at most the capacity. A request naming a
capacity the device does not have never fits. A device without ``allowMultipleAllocations`` is
checked the same way (the request must fit its capacity) but is then taken whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuq_k8s.common.model.devices.amounts import NANO, format_amount
from gpuq_k8s.common.model.devices.device import DeviceCapacity, RequestPolicy, ValidRange


def _whole(nano: int) -> int:
    # Quantity.Value(): rounded up to an integer, away from zero.
    return -((-nano) // NANO)


def _round_up_range(request: int, valid: ValidRange) -> int:
    if request < valid.min:
        return valid.min
    if valid.step is None:
        return request
    value, step, low = _whole(request), _whole(valid.step), _whole(valid.min)
    n, mod = divmod(value - low, step)
    return (low + step * (n + (mod != 0))) * NANO


def consumed(request: int | None, capacity: DeviceCapacity) -> int:
    """What one allocation consumes of ``capacity`` when it asks ``request`` (None: not asked)."""
    policy = capacity.policy
    if request is None:
        return policy.default if policy is not None and policy.default is not None else capacity.value
    if policy is None:
        return request
    if policy.valid_range is not None:
        return _round_up_range(request, policy.valid_range)
    for value in policy.valid_values:
        if request <= value:
            return value
    return request


def violates(value: int, policy: RequestPolicy | None) -> bool:
    """Whether consuming ``value`` breaks the request policy."""
    if policy is None or (policy.default is not None and value == policy.default):
        return False
    if policy.valid_range is not None:
        valid = policy.valid_range
        if valid.max is not None and value > valid.max:
            return True
        return valid.step is not None and (_whole(value) - _whole(valid.min)) % _whole(valid.step) != 0
    if policy.valid_values:
        return value not in policy.valid_values
    return False


@dataclass(frozen=True, slots=True)
class CapacityShortfall:
    """Why a capacity request does not fit one device, for the reasons explain prints."""

    capacity: str
    message: str


def consumption(
    requests: Mapping[str, int] | None, capacity: Mapping[str, DeviceCapacity]
) -> dict[str, int] | CapacityShortfall:
    """What one allocation of a request consumes of every capacity of the device, or why the request
    can never be served by it (a capacity it lacks, a policy it violates). Static per device."""
    for name in requests or ():
        if name not in capacity:
            return CapacityShortfall(name, f"has no capacity {name}")
    taken: dict[str, int] = {}
    for name, cap in capacity.items():
        value = consumed((requests or {}).get(name), cap)
        if violates(value, cap.policy):
            return CapacityShortfall(
                name, f"{name} request {format_amount(value)} violates the device's request policy"
            )
        if value > cap.value:
            return CapacityShortfall(
                name, f"{format_amount(cap.value)} of {name}, {format_amount(value)} asked"
            )
        taken[name] = value
    return taken


def shortfall(
    taken: Mapping[str, int], capacity: Mapping[str, DeviceCapacity], used: Mapping[str, int]
) -> CapacityShortfall | None:
    """None when ``taken`` fits beside ``used`` (what existing allocations consume), else the first
    capacity it does not fit, worded ``10Gi of memory left, 40Gi asked``."""
    for name, value in taken.items():
        left = capacity[name].value - used.get(name, 0)
        if value > left:
            return CapacityShortfall(
                name, f"{format_amount(max(left, 0))} of {name} left, {format_amount(value)} asked"
            )
    return None
