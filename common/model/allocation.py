"""The weighted Most/LeastAllocated ratio that crossquota and resource-strategy-fit both score with.

crossquota scores a node's CPU-pod usage against the node's cross quota (crossquota.md, "Node
Ordering Function"); resource-strategy-fit scores requested resources against allocatable
(resource-strategy-fit.md, "config description"). The per-resource ratio is the same rule in both:

* MostAllocated ``(used + request) / capacity``, LeastAllocated ``(capacity - used - request) / capacity``;
* a resource whose capacity is 0 scores 0 but keeps its weight;
* a resource that would go over its capacity makes the whole node score 0 (``overflow``).

So it lives here once, in the two forms the scheduler needs, which give the same floats bit for bit:
column by column over all nodes with numpy (the node arrays are column-major, and numpy costs far
more on an [N, k] block with small k than on k contiguous vectors), and plain Python over the few rows
that changed since a pod class was last scored (a handful of rows costs a fraction of numpy's
per-call overhead). Both perform the same IEEE operations in the same order: each int64 operand is
turned to float64 before a subtraction or division, as numpy's float loops do.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt


class Term(NamedTuple):
    """One scored resource: its column in the node arrays, the pod's request, its strategy, its weight."""

    column: int
    request: int
    most_allocated: bool
    weight: float


def weighted_ratios(
    capacity: npt.NDArray[np.int64], used: npt.NDArray[np.int64], terms: Sequence[Term]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Per node: the sum of ``weight * ratio`` over ``terms`` (in order), and whether any would overflow.

    ``terms`` must not be empty; callers decide what an empty or weightless plan scores.
    """
    n = capacity.shape[0]
    total: npt.NDArray[np.float64] | None = None
    overflow: npt.NDArray[np.bool_] | None = None
    for column, request, most, weight in terms:
        cap = capacity[:, column]
        after = used[:, column] + np.int64(request)
        zero = None if np.count_nonzero(cap) == n else cap == 0
        # 1 where the capacity is 0, as np.where(zero, 1, cap), in one pass.
        safe = cap if zero is None else cap + zero
        if most:
            ratio = np.true_divide(after, safe)
        else:
            ratio = np.subtract(cap, after, dtype=np.float64)
            ratio /= safe
        over = after > cap
        if zero is not None:
            np.putmask(ratio, zero, 0.0)
            over &= ~zero
        ratio *= weight
        if total is None or overflow is None:
            total, overflow = ratio, over
        else:
            total += ratio
            overflow |= over
    assert total is not None and overflow is not None, "weighted_ratios needs at least one term"
    return total, overflow


def weighted_ratio_rows(
    terms: Sequence[Term], rows: Iterable[tuple[Sequence[int], Sequence[int]]]
) -> list[tuple[float, bool]]:
    """:func:`weighted_ratios` for a few nodes, given as ``(capacity row, used row)`` pairs of Python
    ints (indexed by column), as ``(total, overflow)`` per node: the same bits."""
    out: list[tuple[float, bool]] = []
    for cap_row, used_row in rows:
        total = 0.0
        first = True
        overflow = False
        for column, request, most, weight in terms:
            cap = cap_row[column]
            after = used_row[column] + request
            if cap == 0:
                ratio = 0.0
            else:
                ratio = float(after) / float(cap) if most else (float(cap) - float(after)) / float(cap)
                overflow = overflow or after > cap
            ratio *= weight
            if first:
                total, first = ratio, False
            else:
                total += ratio
        out.append((total, overflow))
    return out
