"""Volcano's ``backfill`` action: pods without requests are placed after the others.

Volcano's allocate skips BestEffort pods (no request at all) and its backfill action, after
allocate, places them with the predicates and node order. gpuq's cycle takes one pod at a time from
a queue: with ``backfill`` configured, a pod without requests sorts after every pod with requests,
so it is tried only once no pod with requests is ready (after allocate), with the same plugins and
gang rule. Without ``backfill``, gpuq keeps placing such pods in allocate, in priority order (as it
always did; Volcano would leave them pending).
"""

from __future__ import annotations

from gpuq_k8s.common.model.pods import PodInfo


def best_effort(pod: PodInfo) -> bool:
    """No request for any resource (Volcano's ``Resreq.IsEmpty()``)."""
    return not any(amount > 0 for amount in pod.requests.values())
