"""The cross-quota predicate over node rows (crossquota.md "Predicate Function").

A CPU pod fits a GPU node while, for every quota resource, the node's CPU-pod usage plus the pod's
request stays within the node's cross quota (strict ``>`` rejects, so exactly at the quota fits);
a GPU pod, or any pod on a non-GPU node, always fits. The first resource over its quota, in
``quota-resources`` order, explains a rejection: a :class:`~common.model.refusal.Refusal` whose error
reads ``<res> quota exceeded: required=<q> used=<q> quota=<q>`` (design.md), built only when asked; the
scheduler's Filter reasons are these messages, nodes with the same numbers counted together
(:mod:`scheduler.plugins.crossquota`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model.crossquota.args import CrossQuotaArgs
from gpuq_k8s.common.model.crossquota.pod import CrossQuotaPod
from gpuq_k8s.common.model.quantity import format_units
from gpuq_k8s.common.model.quota_exceeded import CrossQuotaExceeded
from gpuq_k8s.common.model.refusal import Refusal


def quota_exceeded(resource: str, required: int, used: int, quota: int) -> Refusal:
    """The refusal of a CPU pod that would take ``resource`` over a GPU node's cross quota."""
    return Refusal(
        CrossQuotaExceeded(
            resource,
            required=format_units(resource, required),
            used=format_units(resource, used),
            quota=format_units(resource, quota),
            available=format_units(resource, max(quota - used, 0)),
        )
    )


@dataclass(frozen=True, slots=True)
class FilterResult:
    """Vectorised predicate result: ``fits[N]``, and the refusal of a rejected node on demand."""

    fits: npt.NDArray[np.bool_]
    _resources: tuple[str, ...]
    _request: npt.NDArray[np.int64]
    _used: npt.NDArray[np.int64]
    _quota: npt.NDArray[np.int64]

    def refusal(self, node_index: int) -> Refusal | None:
        """Why the pod does not fit node ``node_index`` (None if it fits); computed only when asked."""
        if self.fits[node_index]:
            return None
        after = self._used[node_index] + self._request
        over = np.flatnonzero(after > self._quota[node_index])
        j = int(over[0])
        return quota_exceeded(
            self._resources[j],
            int(self._request[j]),
            int(self._used[node_index, j]),
            int(self._quota[node_index, j]),
        )

    def reason(self, node_index: int) -> str | None:
        """The failure message for one node (None if it fits); computed only when asked."""
        refusal = self.refusal(node_index)
        return None if refusal is None else refusal.message


def filter_nodes(
    args: CrossQuotaArgs,
    pod: CrossQuotaPod,
    is_gpu_node: npt.NDArray[np.bool_],
    quota: npt.NDArray[np.int64],
    used: npt.NDArray[np.int64],
) -> FilterResult:
    """Vectorised predicate over N nodes: ``quota`` and ``used`` (CPU-pod usage) are int64[N, R]."""
    if not pod.is_cpu_pod:
        fits = np.ones(is_gpu_node.shape[0], dtype=np.bool_)
    else:
        over = ((used + pod.request) > quota).any(axis=1)
        fits = ~(is_gpu_node & over)
    return FilterResult(fits, args.quota_resources, pod.request, used, quota)


def fits_few(
    pod: CrossQuotaPod,
    is_gpu_node: Sequence[bool] | npt.NDArray[np.bool_],
    quota: Sequence[Sequence[int]] | npt.NDArray[np.int64],
    used: Sequence[Sequence[int]] | npt.NDArray[np.int64],
    rows: Sequence[int],
) -> list[bool]:
    """``filter_nodes(args, pod, is_gpu_node, quota, used).fits[rows]`` for a few rows, with Python
    ints (exact, as the int64 arithmetic is): cheaper than numpy's per-call cost for a handful. The
    inputs are indexed by row: numpy arrays, or the Python lists the scheduler mirrors them in."""
    if not pod.is_cpu_pod:
        return [True] * len(rows)
    request = pod.request.tolist()
    return [
        not is_gpu_node[row]
        or all(u + r <= q for u, r, q in zip(used[row], request, quota[row], strict=True))
        for row in rows
    ]
