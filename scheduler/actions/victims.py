"""The node walk preempt and reclaim share: kube-scheduler's DryRunPreemption and SelectCandidate
(as Volcano's topology-aware preempt follows them), with Volcano's verdicts on who may be evicted.

For a pod no node fits, the potential nodes are the live ones Filter did not find unresolvable for
it (kube's ``nodesWherePreemptionMightHelp``), walked in node-name order from an offset derived from
the pod (:func:`common.model.victim_selection.offset`). On each, the running pods the action may
consider (``candidates``) go to the plugins' verdict (``allowed``: Volcano's ``Preemptable`` or
``Reclaimable`` across tiers), and kube's ``SelectVictimsOnNode`` chooses victims among them on the
node's room (victims given back most important first, PodDisruptionBudget-violating ones before the
others, while the pod still fits); a node where evicting all of them would not free the request is
no candidate. The walk stops once it has :func:`~common.model.victim_selection.candidate_count`
candidates, one of them violating no budget (kube's stopping rule). Then the candidates are taken
best first by kube's ``pickOneNodeForPreemption`` (:func:`~common.model.victim_selection.best_first`)
and each is checked with the real queue check, PreFilter and Filter with its victims taken off the
cluster state (``Framework.fits_without``); one they reject has its victims chosen again with them
(``SelectVictimsOnNode`` asking the real filters) and is ranked anew. So a node where the pod would
still break any placement rule is never chosen, and the filters run on a few nodes, not on every
candidate. Nothing is evicted here (the caller evicts).

The action may say how its queue judges the pod (``queue_ok``: preempt's victims are of the pod's own
queue, so evicting them can lift the queue's own capability, Volcano's ``preemptorFitsOnNode``; the
default is the framework's queue check) and in which order victims are given back (``order``, least
important first: reclaim's is Volcano's victims queue; the default is kube's ``MoreImportantPod``
reversed). Nominated pods counted on a node hold room, they do not run: never victims
(``Framework.running_on``).
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
    best_first,
    candidate_count,
    more_important_first,
    offset,
    select_victims_on_node,
)
from gpuq_k8s.scheduler.framework.results import BoolArray, FilterOutcome
from gpuq_k8s.scheduler.framework.runtime import Framework
from gpuq_k8s.scheduler.plugins.resource_fit import dra_served_columns

Candidates = Callable[[PodInfo, Sequence[PodInfo]], list[PodInfo]]
Verdict = Callable[[PodInfo, Sequence[PodInfo]], list[PodInfo]]
QueueOk = Callable[[PodInfo], bool]
Order = Callable[[Sequence[PodInfo]], list[PodInfo]]


def victim_order(pods: Sequence[PodInfo]) -> list[PodInfo]:
    """Lowest priority first; among equals the most recently created first (Volcano's task order,
    reversed), then by key."""
    ordered = sorted(pods, key=lambda p: p.key)
    ordered.sort(key=lambda p: p.creation_timestamp, reverse=True)
    ordered.sort(key=lambda p: p.priority or 0)
    return ordered


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
    queue_ok: QueueOk | None = None,
    order: Order | None = None,
) -> Choice | None:
    """The node where evicting the fewest and least important of its allowed pods lets ``pod`` fit,
    and those pods (see the module docstring); None when there is none."""
    cluster = framework.cluster
    importance = more_important_first if order is None else (lambda pods: order(pods)[::-1])
    vector = cluster.pod_vector(pod)
    columns = np.flatnonzero(vector > 0)
    need = [int(vector[c]) for c in columns]
    # An extended resource a DeviceClass serves is DRA's on a node with none of it allocatable: no
    # node room there, for the preemptor nor its victims (whether the devices fit is
    # DynamicResources', whose rejection preemption does not try: unresolvable, as upstream's).
    served = dra_served_columns(framework, columns.tolist())
    delegated = [i for i, c in enumerate(columns) if int(c) in served]
    # What each pod frees on the asked columns, as Python ints: the cheap walk asks many small sums.
    frees: dict[str, tuple[int, ...]] = {}
    rows = potential_rows(framework, outcome)
    if not rows:
        return None
    start = offset(pod, len(rows))
    wanted = candidate_count(len(rows), limits)
    budgets = framework.disruption_budgets()
    found: list[Candidate] = []
    where: dict[str, tuple[int, list[PodInfo]]] = {}  # node -> its row and the pods it may evict
    clean = 0
    for row in rows[start:] + rows[:start]:
        on_node = candidates(pod, framework.running_on(row))
        if not on_node:
            continue
        permitted = allowed(pod, on_node)
        if not permitted:
            continue
        free = [int(cluster.free[row, c]) for c in columns]
        for i in delegated:
            if cluster.allocatable[row, columns[i]] <= 0:
                free[i] = need[i]  # DRA's there: never short, whatever is evicted
        for victim in permitted:
            if victim.key not in frees:
                victim_vector = cluster.pod_vector(victim)
                frees[victim.key] = tuple(int(victim_vector[c]) for c in columns)

        def room(removed: Sequence[PodInfo], free: list[int] = free) -> bool:
            """The node's room alone (NodeResourcesFit, which every chain has): the cheap choice."""
            left = list(free)
            for victim in removed:
                for i, amount in enumerate(frees[victim.key]):
                    left[i] += amount
            return all(have >= want for have, want in zip(left, need, strict=True))

        victims = select_victims_on_node(permitted, room, budgets, importance)
        if victims is None:
            continue  # evicting all of them would not free the request: no filter can pass
        node = cluster.names[row]
        found.append(Candidate(node, victims))
        where[node] = (row, permitted)
        clean += victims.violations == 0
        if clean and len(found) >= wanted:
            break

    def verify(candidate: Candidate) -> Candidate | None:
        """The real queue check, PreFilter and Filter with the victims gone; if they say no, the
        node's victims chosen with them (kube's SelectVictimsOnNode)."""
        row, permitted = where[candidate.node]
        if candidate.victims.pods and framework.fits_without(pod, row, candidate.victims.pods, queue_ok):
            return candidate

        def fits(removed: Sequence[PodInfo]) -> bool:
            return framework.fits_without(pod, row, removed, queue_ok)

        exact = select_victims_on_node(permitted, fits, budgets, importance)
        if exact is None or not exact.pods:
            return None  # the pod does not fit even then, or fits without evicting anyone
        return Candidate(candidate.node, exact)

    best = best_first(sorted(found, key=lambda c: c.node), verify)  # full ties: the first name
    if best is None:
        return None
    return Choice(best.node, best.victims.pods, best.victims.violations)
