"""The node walk preempt and reclaim share (Volcano's ``normalPreempt`` and reclaim loop).

For a pod no node fits: node by node (in node-name order, so a run is deterministic), the running
pods the action may consider (``candidates``) go to the plugins' verdict (``allowed``: Volcano's
``Preemptable`` or ``Reclaimable`` across tiers); the allowed ones are taken lowest priority first
(then the most recently created) until the pod's request fits the node's free resources. The choice
is then checked with the real plugins: the victims are taken out of the cluster state, the pod's
queue check (overused, allocatable), PreFilter and Filter are run, and the victims are put back.
The first node where the pod would then fit wins; nothing is evicted here (the caller evicts).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.runtime import Framework

Candidates = Callable[[PodInfo, Sequence[PodInfo]], list[PodInfo]]
Verdict = Callable[[PodInfo, Sequence[PodInfo]], list[PodInfo]]


@dataclass(frozen=True, slots=True)
class Choice:
    node: str
    victims: tuple[PodInfo, ...]


def victim_order(pods: Sequence[PodInfo]) -> list[PodInfo]:
    """Lowest priority first; among equals the most recently created first (Volcano's task order,
    reversed), then by key."""
    ordered = sorted(pods, key=lambda p: p.key)
    ordered.sort(key=lambda p: p.creation_timestamp, reverse=True)
    ordered.sort(key=lambda p: p.priority or 0)
    return ordered


def find_victims(
    framework: Framework, pod: PodInfo, candidates: Candidates, allowed: Verdict
) -> Choice | None:
    cluster = framework.cluster
    need = cluster.pod_vector(pod)
    asked = need > 0
    for ranked in cluster.rank_order():
        row = int(ranked)
        if row >= cluster.n or not cluster.alive[row]:
            continue
        on_node = candidates(pod, framework.running_on(row))
        if not on_node:
            continue
        permitted = allowed(pod, on_node)
        if not permitted:
            continue
        free = cluster.free[row].copy()
        chosen: list[PodInfo] = []
        for victim in victim_order(permitted):
            if np.all(free[asked] >= need[asked]):
                break
            free += cluster.pod_vector(victim)
            chosen.append(victim)
        if not chosen or not np.all(free[asked] >= need[asked]):
            continue
        if _fits_without(framework, pod, row, chosen):
            return Choice(cluster.names[row], tuple(chosen))
    return None


def _fits_without(framework: Framework, pod: PodInfo, row: int, victims: Sequence[PodInfo]) -> bool:
    """Would ``pod`` pass PreFilter and Filter on ``row`` with ``victims`` gone? The cluster state is
    restored before returning."""
    cluster = framework.cluster
    removed = [p for p in victims if cluster.remove_pod(p.key) is not None]
    try:
        if not framework.queue_check(pod).is_success:
            return False  # the queue would still be overused, or could still not be charged the pod
        state = CycleState()
        if not framework.run_pre_filter(state, pod).is_success:
            return False
        return bool(framework.run_filter(state, pod).feasible[row])
    finally:
        for victim in removed:
            cluster.add_pod(victim)
