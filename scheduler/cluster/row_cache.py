"""Per-pod-class arrays over node rows, kept current row by row.

Most of a Filter or Score over N nodes depends on two things: a few numbers of the pod (its request
vector, its scoring strategy) and each node's own row (allocatable, requested, per-node quota). Pods
of a workload share those numbers, and between two of them only the rows where a pod was bound or
released changed. So instead of N rows per pod, a :class:`RowCache` keeps the array of each pod class
(``key``) and recomputes only the rows in the cluster's change log since it was last asked: a bind
costs one row per cached class, and a pod of a known class costs the rows bound since its last use.

The compute function must be row-wise: the value of a row depends only on that row's inputs and the
key, so ``compute(key, rows)`` equals ``compute(key, None)[rows]`` (every engine's vectorised form
is; ``tests/unit/test_scheduler_perf_kernels.py`` checks the score kernels). Anything else a result
depends on (a quota ledger, the static node masks) belongs in the key or in ``generation``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Final, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from scheduler.cluster.state import ClusterState

K = TypeVar("K", bound=Hashable)
Rows = npt.NDArray[np.intp]
Array = npt.NDArray[Any]

# Classes remembered per cache; the least recently used one is dropped beyond this. 256 classes of
# 5,000 float64 rows is 10 MB.
DEFAULT_CLASSES: Final = 256


class _Entry:
    __slots__ = ("array", "generation", "n", "position")

    def __init__(self, array: Array, n: int, position: int, generation: int) -> None:
        self.array = array
        self.n = n
        self.position = position
        self.generation = generation


class RowCache(Generic[K]):
    """``get(key)`` = ``compute(key, None)`` over rows ``[:cluster.n]``, recomputing changed rows only.

    ``compute(key, rows)`` returns the values of ``rows`` (all ``[:n]`` rows when ``rows`` is None),
    first axis = rows. ``generation`` (optional) is any int that, when it moves, invalidates every
    entry (a node inventory rebuilt). The returned array is the cache's own: read it, never write it,
    and copy it if it outlives the attempt.
    """

    def __init__(
        self,
        cluster: ClusterState,
        compute: Callable[[K, Rows | None], Array],
        *,
        classes: int = DEFAULT_CLASSES,
        generation: Callable[[], int] | None = None,
    ) -> None:
        self._cluster = cluster
        self._compute = compute
        self._classes = classes
        self._generation = generation
        self._entries: dict[K, _Entry] = {}

    def get(self, key: K) -> Array:
        cluster = self._cluster
        n = cluster.n
        position = cluster.log_position
        generation = self._generation() if self._generation is not None else 0
        entry = self._entries.pop(key, None)
        if entry is not None and entry.n == n and entry.generation == generation:
            rows = cluster.changed_rows(entry.position, max(n >> 3, 16))
            if rows is None:
                entry.array = self._compute(key, None)
            elif rows.size:
                entry.array[rows] = self._compute(key, rows)
            entry.position = position
        else:
            entry = _Entry(self._compute(key, None), n, position, generation)
        self._entries[key] = entry  # most recently used last
        if len(self._entries) > self._classes:
            del self._entries[next(iter(self._entries))]
        return entry.array

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
