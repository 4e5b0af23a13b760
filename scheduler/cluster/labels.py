"""Node labels as columns: one int32 code per node per key, so a selector is a vectorised compare.

A dense bool mask per (key, value) would cost N bytes per distinct pair, and ``kubernetes.io/hostname``
alone has N distinct values; codes cost 4 bytes per node per *key* instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping

import numpy as np
import numpy.typing as npt

ABSENT = -1

BoolArray = npt.NDArray[np.bool_]


class _LabelColumn:
    __slots__ = ("codes", "numeric", "value_codes", "values")

    def __init__(self, capacity: int) -> None:
        self.codes = np.full(capacity, ABSENT, dtype=np.int32)
        self.value_codes: dict[str, int] = {}
        self.values: list[str] = []
        # Gt/Lt operands, parsed lazily and dropped on any change of this key.
        self.numeric: npt.NDArray[np.float64] | None = None

    def code(self, value: str) -> int:
        code = self.value_codes.get(value)
        if code is None:
            code = len(self.values)
            self.value_codes[value] = code
            self.values.append(value)
        return code


class LabelIndex:
    """key -> per-node value codes; rows are the node rows of :class:`ClusterState`."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._columns: dict[str, _LabelColumn] = {}
        self._node_keys: list[tuple[str, ...]] = [() for _ in range(capacity)]

    def grow(self, capacity: int) -> None:
        for column in self._columns.values():
            codes = np.full(capacity, ABSENT, dtype=np.int32)
            codes[: self._capacity] = column.codes
            column.codes = codes
            column.numeric = None
        self._node_keys.extend(() for _ in range(capacity - self._capacity))
        self._capacity = capacity

    def set_node(self, row: int, labels: Mapping[str, str]) -> None:
        self.clear_node(row)
        for key, value in labels.items():
            column = self._columns.get(key)
            if column is None:
                column = self._columns[key] = _LabelColumn(self._capacity)
            column.codes[row] = column.code(str(value))
            column.numeric = None
        self._node_keys[row] = tuple(labels)

    def clear_node(self, row: int) -> None:
        for key in self._node_keys[row]:
            column = self._columns[key]
            column.codes[row] = ABSENT
            column.numeric = None
        self._node_keys[row] = ()

    def equals(self, key: str, value: str, n: int) -> BoolArray:
        column = self._columns.get(key)
        if column is None:
            return np.zeros(n, dtype=np.bool_)
        code = column.value_codes.get(value)
        if code is None:
            return np.zeros(n, dtype=np.bool_)
        mask: BoolArray = column.codes[:n] == code
        return mask

    def one_of(self, key: str, values: Iterable[str], n: int) -> BoolArray:
        column = self._columns.get(key)
        if column is None:
            return np.zeros(n, dtype=np.bool_)
        codes = [column.value_codes[v] for v in values if v in column.value_codes]
        if not codes:
            return np.zeros(n, dtype=np.bool_)
        if len(codes) == 1:
            single: BoolArray = column.codes[:n] == codes[0]
            return single
        return np.isin(column.codes[:n], codes)

    def exists(self, key: str, n: int) -> BoolArray:
        column = self._columns.get(key)
        if column is None:
            return np.zeros(n, dtype=np.bool_)
        present: BoolArray = column.codes[:n] != ABSENT
        return present

    def numeric(self, key: str, n: int) -> npt.NDArray[np.float64]:
        """The label as a number per node; NaN where absent or not an integer (Gt/Lt then fail)."""
        column = self._columns.get(key)
        if column is None:
            return np.full(n, np.nan)
        if column.numeric is None:
            table = np.full(len(column.values) + 1, np.nan)
            for code, text in enumerate(column.values):
                with contextlib.suppress(ValueError):
                    table[code] = int(text)
            # ABSENT (-1) indexes the trailing NaN.
            column.numeric = table[column.codes]
        return column.numeric[:n]

    def codes(self, key: str, n: int) -> tuple[npt.NDArray[np.int32], int] | None:
        """The value code of every row (``ABSENT``: no such label) and how many codes the key has
        (the topology domains of ``key``: codes are ``0 .. count-1``); None when no node has it.
        Read-only: the index's own array."""
        column = self._columns.get(key)
        if column is None:
            return None
        return column.codes[:n], len(column.values)

    def value_name(self, key: str, code: int) -> str:
        """The label value a code of :meth:`codes` stands for."""
        return self._columns[key].values[code]

    def value(self, key: str, row: int) -> str | None:
        column = self._columns.get(key)
        if column is None:
            return None
        code = int(column.codes[row])
        return None if code == ABSENT else column.values[code]
