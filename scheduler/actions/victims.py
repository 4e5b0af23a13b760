"""The node walk preempt and reclaim share: kube-scheduler's DryRunPreemption and SelectCandidate
(as Volcano's topology-aware preempt follows them), with Volcano's verdicts on who may be evicted.

For a pod no node fits, the potential nodes are the live ones Filter did not find unresolvable for
it (kube's ``nodesWherePreemptionMightHelp``), walked in node-name order from an offset derived from
the pod (:func:`common.model.victim_selection.offset`). On each, the running pods the action may
consider (``candidates``) go to the plugins' verdict (``allowed``: Volcano's ``Preemptable`` or
``Reclaimable`` across tiers); a node where evicting every allowed pod would not free the pod's
request is passed over at once. Otherwise kube's ``SelectVictimsOnNode`` chooses the victims, asking
the real queue check, PreFilter and Filter with the pods taken off the cluster state
(``Framework.fits_without``): a node where the pod would still break any placement rule is never a
candidate, and victims are given back, PodDisruptionBudget-violating ones first, while the pod still
fits. The walk stops once it has :func:`~common.model.victim_selection.candidate_count` candidates,
one of them violating no budget (kube's stopping rule), and the candidate kube's
``pickOneNodeForPreemption`` prefers wins. Nothing is evicted here (the caller evicts).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpuq_k8s.common.model.action_args import CandidateLimits
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.victim_selection import (
    DEFAULT_LIMITS,
    Candidate,
    candidate_count,
    offset,
    pick_one_node,
    select_victims_on_node,
)
from gpuq_k8s.scheduler.framework.interfaces import BoolArray, FilterOutcome
from gpuq_k8s.scheduler.framework.runtime import Framework

Candidates = Callable[[PodInfo, Sequence[PodInfo]], list[PodInfo]]
Verdict = Callable[[PodInfo, Sequence[PodInfo]], list[PodInfo]]


@dataclass(frozen=True, slots=True)
class Choice:
    node: str
    victims: tuple[PodInfo, ...]
    violations: int = 0  # victims whose eviction violates a PodDisruptionBudget


def potential_rows(framework: Framework, outcome: FilterOutcome | None) -> list[int]:
    """Live node rows in node-name order, without those Filter found unresolvable for the pod."""
    cluster = framework.cluster
    n = cluster.n
    usable: BoolArray = cluster.alive[:n].copy()
    if outcome is not None:
        for _, result, _first in outcome.results:
            if result.unresolvable is not None:
                usable &= ~result.unresolvable[:n]
    return [int(row) for row in cluster.rank_order() if row < n and usable[row]]


def find_victims(
    framework: Framework,
    pod: PodInfo,
    candidates: Candidates,
    allowed: Verdict,
    outcome: FilterOutcome | None = None,
    *,
    limits: CandidateLimits = DEFAULT_LIMITS,
) -> Choice | None:
    cluster = framework.cluster
    need = cluster.pod_vector(pod)
    asked = need > 0
    rows = potential_rows(framework, outcome)
    if not rows:
        return None
    start = offset(pod, len(rows))
    wanted = candidate_count(len(rows), limits)
    budgets = framework.disruption_budgets()
    found: list[Candidate] = []
    clean = 0
    for row in rows[start:] + rows[:start]:
        on_node = candidates(pod, tuple(cluster.pods_on[row].values()))
        if not on_node:
            continue
        permitted = allowed(pod, on_node)
        if not permitted:
            continue
        freeable = cluster.free[row].copy()
        for victim in permitted:
            freeable += cluster.pod_vector(victim)
        if not np.all(freeable[asked] >= need[asked]):
            continue  # evicting all of them would not free the request: no filter can pass

        def fits(removed: Sequence[PodInfo], row: int = row) -> bool:
            return framework.fits_without(pod, row, removed)

        victims = select_victims_on_node(permitted, fits, budgets)
        if victims is None or not victims.pods:
            continue  # the pod does not fit even then, or fits without evicting anyone
        node = cluster.names[row]
        found.append(Candidate(node, victims))
        clean += victims.violations == 0
        if clean and len(found) >= wanted:
            break
    best = pick_one_node(sorted(found, key=lambda c: c.node))  # full ties: the first name
    if best is None:
        return None
    return Choice(best.node, best.victims.pods, best.victims.violations)
