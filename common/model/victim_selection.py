"""kube-scheduler's DefaultPreemption, the pure part (design.md "Preemption"): which pods to evict on
one node, and which node's eviction to prefer.

* :func:`select_victims_on_node` (``SelectVictimsOnNode``): take every pod the preemption may evict
  off the node; if the preemptor still does not fit, the node is no candidate. Otherwise give the
  pods back one by one, most important first, the ones whose eviction would violate a
  PodDisruptionBudget before the others, keeping each one the preemptor still fits beside. What is
  left are the victims; how many of them violate a budget is counted.
* :func:`pick_one_node` (``pickOneNodeForPreemption``): the candidate with the fewest budget
  violations, then the lowest highest victim priority, the lowest sum of victim priorities, the
  fewest victims, the latest start among its highest-priority victims; then the first given.
* :func:`more_important_first` (``MoreImportantPod``): higher priority first, then the one running
  longer (earlier ``status.startTime``; a pod not started yet counts as starting now).
* :func:`candidate_count` and :func:`offset` (``GetOffsetAndNumCandidates``): how many candidate
  nodes to find before choosing, and where among the potential nodes to start looking.
* :func:`best_first`: candidates chosen cheaply (the node's room), confirmed with the real filters
  best first, a rejected one chosen again with them and ranked anew: the filters run on a few
  nodes instead of every candidate.

Whether the preemptor "fits" is the caller's: the scheduler runs its real PreFilter and Filter with
the pods taken off the cluster state (``Framework.fits_without``), so every placement rule is
respected without this module knowing any of them.
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from gpuq_k8s.common.model.action_args import CandidateLimits
from gpuq_k8s.common.model.disruption_budget import Budgets
from gpuq_k8s.common.model.pods import PodInfo

# kube-scheduler's DefaultPreemptionArgs defaults (pkg/scheduler/apis/config/v1/defaults.go).
DEFAULT_LIMITS: Final = CandidateLimits()

# "Now" for a pod that has not started (kube's GetPodStartTime): later than any real start.
_NOT_STARTED: Final = datetime.max.replace(tzinfo=UTC)
_INT32_SHIFT: Final = 2**31  # kube adds MaxInt32+1 to each priority before summing

Fits = Callable[[Sequence[PodInfo]], bool]


def priority(pod: PodInfo) -> int:
    return pod.priority or 0


def start_time(pod: PodInfo) -> datetime:
    """``status.startTime``, or "now" (later than any start) for a pod that has not started."""
    text = pod.start_time
    if not text:
        return _NOT_STARTED
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return _NOT_STARTED
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def more_important_first(pods: Sequence[PodInfo]) -> list[PodInfo]:
    """``pods`` sorted by kube's MoreImportantPod: higher priority, then earlier start; equal pods
    (kube leaves their order to its sort) by earlier creation, then by key, so a run is repeatable."""
    ordered = sorted(pods, key=lambda p: p.key)
    ordered.sort(key=lambda p: p.creation_timestamp)
    ordered.sort(key=lambda p: (-priority(p), start_time(p)))
    return ordered


@dataclass(frozen=True, slots=True)
class Victims:
    """The victims on one node, most important first, and how many violate a budget."""

    pods: tuple[PodInfo, ...]
    violations: int = 0


def select_victims_on_node(
    potential: Sequence[PodInfo],
    fits: Fits,
    budgets: Budgets,
    importance: Callable[[Sequence[PodInfo]], list[PodInfo]] = more_important_first,
) -> Victims | None:
    """kube's ``SelectVictimsOnNode`` over ``potential`` (the pods this preemption may evict on the
    node); ``fits(removed)`` tells whether the preemptor fits the node with ``removed`` gone. None
    when there is nothing to evict or the preemptor does not fit even with every one of them gone.
    ``importance`` orders the pods most important first, the order they are given back in (kube's
    ``MoreImportantPod``; Volcano's reclaim gives its victims queue's order reversed)."""
    if not potential or not fits(potential):
        return None
    ordered = importance(potential)
    violating, non_violating = budgets.split(ordered)
    removed = list(ordered)
    victims: list[PodInfo] = []
    violations = 0
    for pod, violates in [(p, True) for p in violating] + [(p, False) for p in non_violating]:
        removed.remove(pod)
        if not fits(removed):
            removed.append(pod)
            victims.append(pod)
            violations += violates
    return Victims(tuple(more_important_first(victims)), violations)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node where preemption makes room, with its victims (most important first)."""

    node: str
    victims: Victims


def _earliest_start_of_highest(victims: Sequence[PodInfo]) -> datetime:
    """kube's ``GetEarliestPodStartTime``: the earliest start among the highest-priority victims."""
    top = max(priority(p) for p in victims)
    return min(start_time(p) for p in victims if priority(p) == top)


def rank(candidate: Candidate) -> tuple[int, int, int, int, float]:
    """``pickOneNodeForPreemption``'s criteria as one key, smaller preferred: budget violations, the
    highest victim priority, the sum of victim priorities (each plus 2^31), the number of victims,
    then the latest start among the highest-priority victims. No victims at all ranks first."""
    pods = candidate.victims.pods
    if not pods:
        return (candidate.victims.violations, -_INT32_SHIFT, 0, 0, float("-inf"))
    return (
        candidate.victims.violations,
        max(priority(p) for p in pods),
        sum(priority(p) + _INT32_SHIFT for p in pods),
        len(pods),
        -_earliest_start_of_highest(pods).timestamp(),
    )


def pick_one_node(candidates: Sequence[Candidate]) -> Candidate | None:
    """kube's ``pickOneNodeForPreemption`` (see :func:`rank`); among full ties the first given."""
    return min(candidates, key=rank) if candidates else None  # min keeps the first of equal keys


def best_first(
    candidates: Sequence[Candidate], verify: Callable[[Candidate], Candidate | None]
) -> Candidate | None:
    """The best candidate (by :func:`rank`, full ties to the first given) that ``verify`` confirms.

    ``candidates`` are chosen cheaply (the node's room and quotas, no placement rule); ``verify(c)``
    runs the real filters: it returns ``c`` itself when ``c``'s victims make the pod fit, else the
    node's candidate chosen with the real filters (fewer pods given back, so it ranks no better),
    or None when no eviction there makes the pod fit. Re-ranked candidates are confirmed as found.
    So the filters run on a few nodes instead of every candidate, and the answer is
    ``pick_one_node`` of the verified candidates whenever a node's real choice ranks no better than
    its cheap one (always, for rules more pods only make harder to keep)."""
    heap = [(rank(c), i, c, False) for i, c in enumerate(candidates)]
    heapq.heapify(heap)
    while heap:
        _, i, candidate, verified = heapq.heappop(heap)
        if verified:
            return candidate
        exact = verify(candidate)
        if exact is None:
            continue
        if exact is candidate:
            return candidate
        heapq.heappush(heap, (rank(exact), i, exact, True))
    return None


def candidate_count(nodes: int, limits: CandidateLimits = DEFAULT_LIMITS) -> int:
    """kube's ``calculateNumCandidates`` (with Volcano's ``maxCandidateNodesAbsolute``): ``percentage``
    of the potential nodes, at least ``minimum``, at most ``maximum``, and never more than there are."""
    count = max(nodes * limits.percentage // 100, limits.minimum)
    if limits.maximum is not None:
        count = min(count, limits.maximum)
    return min(count, nodes)


def offset(preemptor: PodInfo, nodes: int) -> int:
    """Where among ``nodes`` potential nodes the search starts. kube draws it at random, so that
    preemptions spread over the cluster; gpuq derives it from the preemptor's name, so a run is
    repeatable and still spread."""
    return zlib.crc32(preemptor.key.encode()) % nodes if nodes else 0
