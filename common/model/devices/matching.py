"""Which devices a selector picks, evaluated once per (expression, slice) and kept.

Selecting is independent of what is allocated, so the result of one compiled selector over one
slice's devices is a constant until the slice changes: a bit mask (bit *i* set when device *i*
matches) and the runtime errors met (device index -> message). Slices are keyed by their parse
serial (:attr:`~.slices.ResourceSlice.serial`), so a republished slice is evaluated afresh and
:meth:`SelectorCache.prune` drops what belongs to slices that are gone. A claim template's pods all
carry the same expressions, so a burst of them pays for CEL once per slice, not once per pod and node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from gpuq_k8s.common.model.devices.cel_env import CompiledSelector
from gpuq_k8s.common.model.devices.slices import ResourceSlice

_NO_ERRORS: Final[Mapping[int, str]] = {}


class SelectorCache:
    """Per selector expression, per slice serial: (mask, errors)."""

    __slots__ = ("_results", "evaluations")

    def __init__(self) -> None:
        self._results: dict[str, dict[int, tuple[int, Mapping[int, str]]]] = {}
        self.evaluations = 0  # CEL evaluations run, for benchmarks and tests

    def one(self, selector: CompiledSelector, s: ResourceSlice) -> tuple[int, Mapping[int, str]]:
        per_slice = self._results.setdefault(selector.expression, {})
        found = per_slice.get(s.serial)
        if found is not None:
            return found
        mask = 0
        errors: dict[int, str] = {}
        for i, device in enumerate(s.devices):
            result = selector.evaluate(device.cel_data())
            if result.matches:
                mask |= 1 << i
            elif result.error is not None:
                errors[i] = result.error
        self.evaluations += len(s.devices)
        found = (mask, errors or _NO_ERRORS)
        per_slice[s.serial] = found
        return found

    def prune(self, live: Iterable[ResourceSlice]) -> None:
        """Forget the results of slices not in ``live``."""
        keep = {s.serial for s in live}
        for per_slice in self._results.values():
            for serial in [k for k in per_slice if k not in keep]:
                del per_slice[serial]
