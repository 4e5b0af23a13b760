"""Per-attempt scratch space shared by the plugins of one scheduling cycle (kube-scheduler's CycleState).

PreFilter computes once what Filter, Score and Reserve need; it lives here, keyed by plugin name, and
is thrown away with the attempt so nothing leaks between pods.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

T = TypeVar("T")


class CycleState:
    __slots__ = ("_data", "feasible", "skip_filter", "skip_score")

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        # Plugins whose PreFilter/PreScore returned Skip: the runtime does not call them again.
        self.skip_filter: set[str] = set()
        self.skip_score: set[str] = set()
        # During Filter: the rows no plugin has rejected yet (the runtime's own array, narrowed after
        # each plugin); a costly per-row Filter (DynamicResources) decides only those.
        self.feasible: npt.NDArray[np.bool_] | None = None

    def write(self, key: str, value: object) -> None:
        self._data[key] = value

    def read(self, key: str, kind: type[T]) -> T | None:
        value = self._data.get(key)
        if value is None:
            return None
        if not isinstance(value, kind):
            raise TypeError(f"cycle state {key!r} holds {type(value).__name__}, not {kind.__name__}")
        return value

    def __contains__(self, key: str) -> bool:
        return key in self._data
