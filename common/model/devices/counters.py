"""Partitionable devices (DRAPartitionableDevices, beta and on by default in 1.36): shared counters.

A pool publishes counter sets (``sharedCounters`` in a slice of their own: a GPU's 7 compute slices
and 8 memory slices, say) and each device says what it consumes of them (``consumesCounters``: a
``3g.40gb`` MIG partition takes 3 compute and 4 memory slices). A device can only be allocated while
every counter of the pool stays at or above zero, counting every allocated device of the pool,
wherever it is, plus the devices of the allocation being computed. A device that allows multiple
allocations consumes its counters once, however many shares it has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpuq_k8s.common.model.devices.amounts import format_amount
from gpuq_k8s.common.model.devices.device import Device
from gpuq_k8s.common.model.devices.pools import Pool

CounterSets = dict[str, dict[str, int]]


def remaining(pool: Pool, allocated: Iterable[str]) -> CounterSets:
    """Each counter of ``pool`` less what its ``allocated`` devices (names) consume; may go below zero
    when a driver shrank a counter under existing allocations (then nothing more fits)."""
    left: CounterSets = {name: dict(counters) for name, counters in pool.counter_sets.items()}
    for name in allocated:
        found = pool.devices.get(name)
        if found is not None:
            take(left, found[1], -1)
    return left


def take(left: CounterSets, device: Device, sign: int = -1) -> None:
    """Subtract (``sign`` -1) or give back (+1) ``device``'s consumption, in place."""
    for consumption in device.consumes:
        counters = left.get(consumption.counter_set)
        if counters is None:
            continue
        for name, value in consumption.counters.items():
            if name in counters:
                counters[name] += sign * value


def fits(left: Mapping[str, Mapping[str, int]], device: Device) -> str | None:
    """None when ``device``'s consumption fits in ``left``, else ``counter set/counter: <left> left,
    <needed> needed`` for the first counter that does not."""
    for consumption in device.consumes:
        counters = left.get(consumption.counter_set, {})
        for name, value in consumption.counters.items():
            have = counters.get(name, 0)
            if value > have:
                left_text, needed = format_amount(max(have, 0)), format_amount(value)
                return f"counter {consumption.counter_set}/{name}: {left_text} left, {needed} needed"
    return None
