"""Per-pod-class arrays over node rows, kept current row by row.

Most of a Filter or Score over N nodes depends on two things: a few numbers of the pod (its request
vector, its scoring strategy) and each node's own row (allocatable, requested, per-node quota). Pods
of a workload share those numbers, and between two of them only the rows where a pod was bound or
released changed. So instead of N rows per pod, a :class:`RowCache` keeps the array of each pod class
(``key``) and recomputes only the rows in the cluster's change log since it was last asked: a bind
costs one row per cached class, and a pod of a known class costs the rows bound since its last use.

The compute function must be row-wise: the value of a row depends only on that row's inputs and the
key, so ``compute(key, rows)`` equals ``compute(key, None)[rows]`` (every engine's vectorised form
is; ``tests/unit/common/model/test_scheduler_perf_kernels.py`` checks the score kernels). Anything
else a result depends on (a quota ledger, the static node masks) belongs in the key or in ``generation``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Final, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from gpuq_k8s.scheduler.cluster.change_log import ChangeLog
from gpuq_k8s.scheduler.cluster.state import ClusterState

K = TypeVar("K", bound=Hashable)
Rows = npt.NDArray[np.intp]
Array = npt.NDArray[Any]

# Classes remembered per cache; the least recently used one is dropped beyond this. 256 classes of
# 5,000 float64 rows is 10 MB.
DEFAULT_CLASSES: Final = 256
# Up to this many changed rows go to ``compute_few`` (plain Python: a handful of rows costs a fraction
# of numpy's per-call overhead), more to ``compute``.
FEW_ROWS: Final = 16


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
    entry (a node inventory rebuilt). ``log`` (optional) replaces the cluster's change log when the
    compute function's inputs change less often: the owner then records every row whose inputs it
    changes. ``compute_few(key, rows)`` (optional) returns the values of a few ``rows`` (a list) as
    Python numbers, the same bits as ``compute``'s. The returned array is the cache's own: read it,
    never write it, and copy it if it outlives the attempt.
    """

    def __init__(
        self,
        cluster: ClusterState,
        compute: Callable[[K, Rows | None], Array],
        *,
        classes: int = DEFAULT_CLASSES,
        generation: Callable[[], int] | None = None,
        log: ChangeLog | None = None,
        compute_few: Callable[[K, list[int]], Sequence[Any]] | None = None,
    ) -> None:
        self._cluster = cluster
        # The rows whose inputs may have changed: the cluster's (every bind) unless the compute
        # function reads inputs of its own that change less often.
        self._log = log if log is not None else cluster.log
        self._compute = compute
        self._compute_few = compute_few
        self._classes = classes
        self._generation = generation
        self._entries: dict[K, _Entry] = {}

    def get(self, key: K) -> Array:
        cluster = self._cluster
        n = cluster.n
        log = self._log
        position = log.position
        generation = self._generation() if self._generation is not None else 0
        entry = self._entries.pop(key, None)
        if entry is not None and entry.n == n and entry.generation == generation:
            rows = log.since(entry.position, max(n >> 3, 16))
            if rows is None:
                entry.array = self._compute(key, None)
            elif rows:
                array = entry.array
                if self._compute_few is not None and len(rows) <= FEW_ROWS:
                    for row, value in zip(rows, self._compute_few(key, rows), strict=True):
                        array[row] = value
                else:
                    index = np.array(rows, dtype=np.intp)
                    array[index] = self._compute(key, index)
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
