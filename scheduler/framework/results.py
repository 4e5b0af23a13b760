"""What Filter and PostFilter answer (kube-scheduler's framework types, vectorised): a Filter plugin's
:class:`FilterResult` over every node row, the attempt's :class:`FilterOutcome`, a preemption's
:class:`PostFilterResult`; and the numpy array types of node rows.

Reasons are lazy: computing a message per rejected node costs Python time, so a :class:`FilterResult`
only builds them when the pod turned out unschedulable or an explanation was asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.status import Status

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

ReasonMasks = Sequence[tuple[BoolArray, str]]


@dataclass(slots=True)  # not frozen: a frozen init costs 3x, and every Filter makes one per pod
class FilterResult:
    """One Filter plugin's verdict over all node rows (read-only once made).

    ``reasons`` returns (mask of rejected rows, message) pairs, one per distinct message; a rejected
    row may appear under several messages (``Insufficient cpu`` and ``Insufficient memory``).
    ``unresolvable`` marks rows that preemption cannot fix (kube's UnschedulableAndUnresolvable).
    ``detail`` adds, for ``gpuq simulate --explain`` and ``gpuq explain``, a rejected row's finer reason
    to its message (the fit error's grouped messages stay kube-scheduler's).
    """

    passed: BoolArray
    reasons: Callable[[], ReasonMasks] = lambda: ()
    unresolvable: BoolArray | None = None
    # For explanations only: the finer reason a rejected row has beyond its message (DynamicResources:
    # device by device), or None.
    detail: Callable[[int], str | None] | None = None

    @staticmethod
    def all_pass(n: int) -> FilterResult:
        return FilterResult(np.ones(n, dtype=np.bool_))


@dataclass(frozen=True, slots=True)
class PostFilterResult:
    """A preemption outcome: the node the pod is nominated to, and the pods to evict for it."""

    status: Status
    nominated_node: str = ""
    victims: tuple[PodInfo, ...] = ()
    message: str = ""


class FilterOutcome:
    """What Filter decided for one attempt, for PostFilter and explanations.

    ``results`` is, per plugin in order, its result and the rows it was the first to reject. A
    scheduled pod never needs those (one more pass over N rows per plugin), so the framework may hand
    over the plugins' verdicts instead (``pending``: the rows alive before Filter, then each plugin's
    result) and ``results`` is worked out from them when first read. The verdicts are the plugins'
    arrays: they are only valid until the next Filter runs, so the framework reads ``results`` at
    once when the outcome must outlive the attempt (explanations kept, no feasible node).
    """

    __slots__ = ("_feasible_count", "_pending", "_results", "feasible", "prefilter")

    def __init__(
        self,
        feasible: BoolArray,
        results: tuple[tuple[str, FilterResult, BoolArray], ...] = (),
        prefilter: Status | None = None,
        *,
        pending: tuple[BoolArray, tuple[tuple[str, FilterResult], ...]] | None = None,
        feasible_count: int | None = None,
    ) -> None:
        self.feasible = feasible
        self._feasible_count = feasible_count
        self.prefilter = prefilter if prefilter is not None else Status.success()
        self._results: tuple[tuple[str, FilterResult, BoolArray], ...] | None = (
            results if pending is None else None
        )
        self._pending = pending

    @property
    def feasible_count(self) -> int:
        if self._feasible_count is None:
            self._feasible_count = int(np.count_nonzero(self.feasible))
        return self._feasible_count

    @property
    def results(self) -> tuple[tuple[str, FilterResult, BoolArray], ...]:
        if self._results is None:
            assert self._pending is not None
            alive, verdicts = self._pending
            left = alive.copy()
            out: list[tuple[str, FilterResult, BoolArray]] = []
            for name, result in verdicts:
                first: BoolArray = np.greater(left, result.passed)  # left & ~passed, in one pass
                left &= result.passed
                out.append((name, result, first))
            self._results, self._pending = tuple(out), None
        return self._results
