"""Which devices of a node a shared-GPU pod gets, or why none (design.md Semantics 19).

tensor-fusion's GpuAllocator: a device qualifies when its TFLOPS and VRAM left cover the pod's request
(its ResourceFilter); of those, the strategy picks (:class:`Placement`): ``CompactFirst`` the most used
first (packs: whole GPUs stay free for whole-GPU work), ``LowLoadFirst`` the least used first (spreads:
less contention per GPU). "Used" is the TFLOPS and VRAM fractions in use, summed (tensor-fusion's
normalised score with equal weights); ties go to the lower index. A device no share uses yet qualifies
only while the node has a card no whole-card pod holds (:mod:`~common.model.gpu_share.ledger`).

A refusal names each device and what it lacks: ``gpu-0 on node-a: 20 TFLOPS left, 50 asked``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from gpuq_k8s.common.model.gpu_quota.quota import TFLOPS, VRAM, format_amount
from gpuq_k8s.common.model.gpu_share.devices import NodeGPUs
from gpuq_k8s.common.model.gpu_share.ledger import DeviceUse, NodeUse
from gpuq_k8s.common.model.gpu_share.request import ShareRequest

_FREE = DeviceUse()


class Placement(enum.Enum):
    """tensor-fusion's placement modes for the GPUs of one node (``SchedulingConfigTemplate``)."""

    COMPACT_FIRST = "CompactFirst"
    LOW_LOAD_FIRST = "LowLoadFirst"


@dataclass(frozen=True, slots=True)
class Refusal:
    """No room on the node: ``reasons``, one per device (or one for the node); ``short``, what the
    devices lack without naming them (``TFLOPS``, ``VRAM``, ``known capacity``, ``GPUs``: a FitError
    over many nodes groups them by it); ``never``, whether the node could not take the pod even idle
    (preemption cannot help)."""

    reasons: tuple[str, ...]
    short: tuple[str, ...] = ()
    never: bool = False

    @property
    def message(self) -> str:
        return "; ".join(self.reasons)

    @property
    def summary(self) -> str:
        return f"no GPU to share has the {' and '.join(self.short) or 'room'} asked"


def _left(capacity: int | None, used: int) -> int | None:
    return None if capacity is None else capacity - used


def device_reason(gpus: NodeGPUs, index: int, use: DeviceUse, request: ShareRequest) -> str | None:
    """Why device ``index`` cannot take ``request`` on top of ``use``; None when it can."""
    reason, _ = _device_shortage(gpus, index, use, request)
    return reason


def _device_shortage(
    gpus: NodeGPUs, index: int, use: DeviceUse, request: ShareRequest
) -> tuple[str | None, list[str]]:
    where = f"{gpus.name(index)} on {gpus.node}"
    lacks: list[str] = []
    short: list[str] = []
    for asked, capacity, used, sub, label in (
        (request.tflops, gpus.tflops, use.tflops, TFLOPS, "tflops"),
        (request.vram, gpus.vram, use.vram, VRAM, "memory"),
    ):
        if asked <= 0:
            continue
        left = _left(capacity, used)
        name = "TFLOPS" if sub == TFLOPS else "VRAM"
        if left is None:
            lacks.append(f"{name} of {gpus.card} unknown (no {gpus.missing_label(label)} node label)")
            short.append("known capacity")
        elif left < asked:
            lacks.append(f"{format_amount(sub, max(left, 0))} {name} left, {format_amount(sub, asked)} asked")
            short.append(name)
    return (f"{where}: {', '.join(lacks)}" if lacks else None), short


def never_fits(gpus: NodeGPUs, request: ShareRequest) -> bool:
    """The node could not take ``request`` even with every device idle."""
    return request.count > gpus.count or _device_shortage(gpus, 0, _FREE, request)[0] is not None


def _load(gpus: NodeGPUs, use: DeviceUse) -> float:
    load = 0.0
    if gpus.tflops:
        load += use.tflops / gpus.tflops
    if gpus.vram:
        load += use.vram / gpus.vram
    return load


def candidates(gpus: NodeGPUs, use: NodeUse) -> list[tuple[int, DeviceUse]]:
    """The devices a share may go on: those carrying shares, and as many of the others (lowest index
    first) as the node has cards no whole-card pod holds."""
    fresh = max(gpus.count - use.whole - use.shared, 0)
    out: list[tuple[int, DeviceUse]] = []
    for index in range(gpus.count):
        device = use.devices.get(index)
        if device is not None:
            out.append((index, device))
        elif fresh > 0:
            fresh -= 1
            out.append((index, _FREE))
    return out


def choose(
    gpus: NodeGPUs, use: NodeUse, request: ShareRequest, placement: Placement
) -> tuple[int, ...] | Refusal:
    """The ``request.count`` devices ``placement`` picks for the pod, or why the node has none."""
    if request.count > gpus.count:
        too_few = f"{gpus.node}: {gpus.count} GPU(s) of {gpus.card}, {request.count} asked"
        return Refusal((too_few,), ("GPUs",), never=True)
    fitting: list[tuple[float, int]] = []
    reasons: list[str] = []
    short: list[str] = []
    open_devices = candidates(gpus, use)
    for index, device in open_devices:
        reason, lacking = _device_shortage(gpus, index, device, request)
        if reason is None:
            fitting.append((_load(gpus, device), index))
        else:
            reasons.append(reason)
            short.extend(s for s in lacking if s not in short)
    if len(fitting) >= request.count:
        pack = placement is Placement.COMPACT_FIRST
        fitting.sort(key=lambda item: (-item[0] if pack else item[0], item[1]))
        return tuple(sorted(index for _, index in fitting[: request.count]))
    held = gpus.count - len(open_devices)
    if held > 0:
        reasons.append(f"{held} GPU(s) on {gpus.node} held by whole-GPU pods")
    if fitting or held > 0:
        short.append("GPUs")
    if fitting:
        reasons.append(f"{gpus.node}: {len(fitting)} GPU(s) with room, {request.count} asked")
    return Refusal(tuple(reasons), tuple(short), never_fits(gpus, request))


def least_used(gpus: NodeGPUs, use: NodeUse, count: int) -> tuple[int, ...]:
    """The ``count`` least used devices, room or not: where a pod already running (bound by another
    hand, without its ``gpu-ids``) is counted."""
    loads = sorted((_load(gpus, use.devices.get(i) or _FREE), i) for i in range(gpus.count))
    return tuple(sorted(i for _, i in loads[:count]))


def node_score(
    gpus: NodeGPUs, use: NodeUse, devices: Sequence[int], request: ShareRequest, placement: Placement
) -> float:
    """The node's score (0-100) for a pod given ``devices`` there: ``CompactFirst`` prefers the node
    whose devices end up the most used (tensor-fusion scores a node by its GPUs' use), ``LowLoadFirst``
    the least used."""
    if not devices:
        return 0.0
    total = 0.0
    for index in devices:
        old = use.devices.get(index) or _FREE
        after = DeviceUse(old.tflops + request.tflops, old.vram + request.vram, old.pods + 1)
        total += _load(gpus, after) / 2
    load = min(total / len(devices), 1.0)
    return 100.0 * (load if placement is Placement.COMPACT_FIRST else 1.0 - load)


def whole_refusal(gpus: NodeGPUs, use: NodeUse, cards: int) -> str | None:
    """Why a whole-card pod asking ``cards`` of the shared card cannot go on the node; None when it can
    (resource fit has checked the cards whole pods hold; this adds the devices shares hold)."""
    if use.whole + use.shared + cards <= gpus.count:
        return None
    return (
        f"{gpus.node}: {use.shared} of {gpus.count} GPU(s) shared by tensor-fusion pods, "
        f"{use.whole} held whole, {cards} asked whole"
    )


def chosen_ids(gpus: NodeGPUs, devices: Sequence[int]) -> str:
    """The ``tensor-fusion.ai/gpu-ids`` value for ``devices``."""
    return ",".join(gpus.gpu_id(index) for index in devices)
