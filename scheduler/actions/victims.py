"""The node walk preempt and reclaim share (Volcano's ``normalPreempt`` and reclaim loop).

For a pod no node fits: node by node (in node-name order, so a run is deterministic), the running
pods the action may consider (``candidates``) go to the plugins' verdict (``allowed``: Volcano's
``Preemptable`` or ``Reclaimable`` across tiers); the allowed ones are taken lowest priority first
(then the most recently created; the action may order them otherwise, ``order``) until the pod's
request fits the node's free resources and its queue may take it (``queue_ok``: preempt's victims
are of the pod's own queue, so evicting them can lift the queue's own capability, Volcano's
``preemptorFitsOnNode``). The choice is then checked with the real plugins: the victims are taken out
of the cluster state, the queue check, PreFilter and Filter are run, and the victims are put back.
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


QueueOk = Callable[[PodInfo], bool]
Order = Callable[[Sequence[PodInfo]], list[PodInfo]]


def find_victims(
    framework: Framework,
    pod: PodInfo,
    candidates: Candidates,
    allowed: Verdict,
    *,
    queue_ok: QueueOk | None = None,
    order: Order = victim_order,
) -> Choice | None:
    """The first node where evicting some of its allowed pods lets ``pod`` fit, and those pods.

    ``queue_ok`` says whether the pod's queue may take it as the cluster state stands (default: the
    framework's queue check, overused and allocatable); when it may not before any eviction, victims
    are taken until it may as well as until the node has room."""
    cluster = framework.cluster
    need = cluster.pod_vector(pod)
    asked = need > 0
    check = queue_ok if queue_ok is not None else (lambda p: framework.queue_check(p).is_success)
    queue_blocked = not check(pod)
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
        removed: list[PodInfo] = []  # taken out of the cluster state to ask the queue, put back below
        try:
            for victim in order(permitted):
                if np.all(free[asked] >= need[asked]) and (not queue_blocked or check(pod)):
                    break
                free += cluster.pod_vector(victim)
                chosen.append(victim)
                if queue_blocked and cluster.remove_pod(victim.key) is not None:
                    removed.append(victim)
            fits = bool(chosen) and bool(np.all(free[asked] >= need[asked]))
            fits = fits and (not queue_blocked or check(pod))
        finally:
            for victim in removed:
                cluster.add_pod(victim)
        if fits and _fits_without(framework, pod, row, chosen, check):
            return Choice(cluster.names[row], tuple(chosen))
    return None


def _fits_without(
    framework: Framework, pod: PodInfo, row: int, victims: Sequence[PodInfo], queue_ok: QueueOk
) -> bool:
    """Would ``pod`` pass its queue check, PreFilter and Filter on ``row`` with ``victims`` gone? The
    cluster state is restored before returning."""
    cluster = framework.cluster
    removed = [p for p in victims if cluster.remove_pod(p.key) is not None]
    try:
        if not queue_ok(pod):
            return False  # its queue could still not take it
        state = CycleState()
        if not framework.run_pre_filter(state, pod).is_success:
            return False
        return bool(framework.run_filter(state, pod).feasible[row])
    finally:
        for victim in removed:
            cluster.add_pod(victim)
