"""Volcano's ``proportion``: a queue's deserved share of the cluster from its weight, capability and
guarantee, and the verdicts that follow from it (volcano-sh/volcano ``pkg/scheduler/plugins/proportion``).

Pure: amounts are ``{resource: int}`` in gpuq's units (:mod:`common.model.quantity`); deserved
amounts are floats, as Volcano's are.

- **deserved** (water-filling): the cluster total minus every queue's guarantee is shared out by
  weight, round after round, among the queues not yet satisfied; each queue's deserved is capped by
  its real capability (its ``capability``, at most what the cluster can give it) and by what it
  requests (allocated + pending), and never below its guarantee. A queue is satisfied once its
  deserved covers its request, or when a round gives it nothing more.
- **queue order**: the higher ``spec.priority`` first, then the lower share, where **share** is
  ``max(allocated / deserved)`` over the resources (1 where deserved is 0 and something is allocated)
  (Volcano's queueOrderFn compares the priorities before the shares since 2024).
- **overused**: deserved <= allocated in every resource: the queue gets nothing new.
- **allocatable**: allocated + the pod's request stays within the real capability, in the resources
  the pod requests.
- **enqueueable**: a PodGroup's minResources + allocated + inqueue stay within the real capability,
  in the resources the PodGroup asks.
- **reclaimable**: running pods of queues above their deserved share, taken while their queue stays
  above it, whatever the reclaimer asks (Volcano dropped, in 2025, the rule that skipped a queue
  holding less than the reclaimer's request: the node's idle resources count towards it too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

Amounts = Mapping[str, float]
_EPSILON: Final = 1e-9
_MAX_ROUNDS: Final = 1000


@dataclass(slots=True)
class QueueAttr:
    """One queue as proportion sees it."""

    name: str
    weight: int = 1
    priority: int = 0  # spec.priority: a higher one orders first
    capability: Mapping[str, int] = field(default_factory=dict)  # empty: unlimited
    guarantee: Mapping[str, int] = field(default_factory=dict)
    allocated: dict[str, int] = field(default_factory=dict)
    request: dict[str, int] = field(default_factory=dict)  # allocated + pending
    inqueue: dict[str, int] = field(default_factory=dict)
    reclaimable: bool = True
    deserved: dict[str, float] = field(default_factory=dict)
    real_capability: dict[str, float] = field(default_factory=dict)
    share: float = 0.0


def _add(total: dict[str, int], amounts: Mapping[str, int], sign: int = 1) -> None:
    for name, amount in amounts.items():
        total[name] = total.get(name, 0) + sign * amount


def add(total: dict[str, int], amounts: Mapping[str, int]) -> None:
    _add(total, amounts)


def sub(total: dict[str, int], amounts: Mapping[str, int]) -> None:
    _add(total, amounts, -1)


def less_equal(left: Amounts, right: Amounts, names: Iterable[str] | None = None) -> bool:
    """``left <= right`` in ``names`` (default: every resource either names; absent is 0)."""
    keys = set(left) | set(right) if names is None else names
    return all(left.get(k, 0) <= right.get(k, 0) + _EPSILON for k in keys)


def share_of(allocated: Amounts, deserved: Amounts) -> float:
    share = 0.0
    for name in set(allocated) | set(deserved):
        used, amount = allocated.get(name, 0), deserved.get(name, 0.0)
        share = max(share, used / amount if amount > _EPSILON else (1.0 if used > 0 else 0.0))
    return share


def deserve(queues: Sequence[QueueAttr], total: Mapping[str, int]) -> None:
    """Fill every queue's ``deserved``, ``real_capability`` and ``share`` (Volcano's OnSessionOpen)."""
    guaranteed: dict[str, int] = {}
    for queue in queues:
        add(guaranteed, queue.guarantee)
    names = set(total)
    for queue in queues:
        real = {
            k: float(max(total.get(k, 0) - guaranteed.get(k, 0), 0) + queue.guarantee.get(k, 0))
            for k in names
        }
        for k, cap in queue.capability.items():
            real[k] = min(real.get(k, float(cap)), float(cap))
        queue.real_capability = real
        queue.deserved = {}
    remaining: dict[str, float] = {k: float(max(total.get(k, 0) - guaranteed.get(k, 0), 0)) for k in names}
    met: set[str] = set()
    for _ in range(_MAX_ROUNDS):
        weight = sum(q.weight for q in queues if q.name not in met)
        if weight == 0:
            break
        before = dict(remaining)
        increased: dict[str, float] = {}
        decreased: dict[str, float] = {}
        for queue in queues:
            if queue.name in met:
                continue
            old = dict(queue.deserved)
            deserved = {k: old.get(k, 0.0) + remaining.get(k, 0.0) * queue.weight / weight for k in names}
            deserved = {k: min(v, queue.real_capability.get(k, v)) for k, v in deserved.items()}
            deserved = {k: min(v, float(queue.request.get(k, 0))) for k, v in deserved.items()}
            for k, amount in queue.guarantee.items():
                deserved[k] = max(deserved.get(k, 0.0), float(amount))
            queue.deserved = deserved
            if less_equal(queue.request, deserved) or _same(old, deserved):
                met.add(queue.name)
            for k in names | set(deserved):
                delta = deserved.get(k, 0.0) - old.get(k, 0.0)
                if delta > 0:
                    increased[k] = increased.get(k, 0.0) + delta
                elif delta < 0:
                    decreased[k] = decreased.get(k, 0.0) - delta
        for k in names:
            remaining[k] = remaining.get(k, 0.0) - increased.get(k, 0.0) + decreased.get(k, 0.0)
        if all(v <= _EPSILON for v in remaining.values()) or _same(before, remaining):
            break
    for queue in queues:
        queue.share = share_of(queue.allocated, queue.deserved)


def _same(left: Amounts, right: Amounts) -> bool:
    return all(abs(left.get(k, 0.0) - right.get(k, 0.0)) <= _EPSILON for k in set(left) | set(right))


def compare_queues(left: QueueAttr, right: QueueAttr) -> int:
    """Volcano's queue order: the higher priority first, then the lower share; equal queues have no
    opinion."""
    if left.priority != right.priority:
        return -1 if left.priority > right.priority else 1
    if abs(left.share - right.share) <= _EPSILON:
        return 0
    return -1 if left.share < right.share else 1


def overused(queue: QueueAttr) -> bool:
    return less_equal(queue.deserved, queue.allocated)


def allocatable(queue: QueueAttr, request: Mapping[str, int]) -> bool:
    future = dict(queue.allocated)
    add(future, request)
    requested = [k for k, v in request.items() if v > 0]
    return less_equal(future, queue.real_capability, requested)


def enqueueable(queue: QueueAttr, min_resources: Mapping[str, int]) -> bool:
    future = dict(queue.allocated)
    add(future, queue.inqueue)
    add(future, min_resources)
    asked = [k for k, v in min_resources.items() if v > 0]
    return less_equal(future, queue.real_capability, asked)


def reclaimable(
    candidates: Sequence[tuple[str, Mapping[str, int]]], queues: Mapping[str, QueueAttr]
) -> list[int]:
    """Indexes of ``candidates`` ((queue, request) of running pods) proportion lets a reclaimer take:
    a queue gives pods up while it is above its deserved share, whatever the reclaimer asks (Volcano's
    reclaimableFn)."""
    allocations: dict[str, dict[str, int]] = {}
    victims: list[int] = []
    for i, (name, request) in enumerate(candidates):
        queue = queues.get(name)
        if queue is None:
            continue
        allocated = allocations.setdefault(name, dict(queue.allocated))
        if not less_equal(allocated, queue.deserved):
            sub(allocated, request)
            victims.append(i)
    return victims
