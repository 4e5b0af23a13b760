"""Which node rows changed since a given moment: the log behind incremental per-class results.

:class:`~scheduler.cluster.state.ClusterState` keeps one for every change (a pod bound or released, a
node set or removed). A plugin whose per-node inputs change less often than that (crossquota's
per-node quota and CPU-pod usage change only when a CPU pod lands on a GPU node) keeps its own, so
its :class:`~scheduler.cluster.row_cache.RowCache` recomputes only the rows that can differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

# The log keeps at most this many entries beyond the node count before dropping its head; a cache
# older than the head recomputes everything, which it would do anyway past N/8 changes.
_LOG_SLACK: Final = 4096


class ChangeLog:
    """Rows changed, oldest first; entry i has the absolute position ``base + i``."""

    __slots__ = ("_base", "_log")

    def __init__(self) -> None:
        self._log: list[int] = []
        self._base = 0

    @property
    def position(self) -> int:
        """The position the next change will take: remember it to ask what changed since."""
        return self._base + len(self._log)

    def record(self, row: int, n: int) -> None:
        """``row`` changed; ``n`` (the rows in use) bounds how much history is worth keeping."""
        self._log.append(row)
        if len(self._log) > n + _LOG_SLACK:
            self._trim()

    def record_all(self, rows: Sequence[int], n: int) -> None:
        """:meth:`record` of each of ``rows`` in order."""
        self._log.extend(rows)
        if len(self._log) > n + _LOG_SLACK:
            self._trim()

    def _trim(self) -> None:
        """Drop the older half (the length check stays inline: this is on every bind's path)."""
        drop = len(self._log) // 2
        del self._log[:drop]
        self._base += drop

    def since(self, position: int, limit: int) -> list[int] | None:
        """Distinct rows changed at or after ``position``; None when more than ``limit`` entries (or
        already dropped): recomputing every row is then as cheap."""
        start = position - self._base
        if start < 0:
            return None
        count = len(self._log) - start
        if count > limit:
            return None
        if count <= 1:
            return self._log[start:]
        return list(set(self._log[start:]))
