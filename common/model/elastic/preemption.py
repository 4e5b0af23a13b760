"""Quota-aware preemption: who may be preempted, and the victims on one node (capacity-scheduling.md,
PostFilter; design.md Semantics 4).

scheduler-plugins' ``PostFilter`` / ``SelectVictimsOnNode``, single-node as the KEP ("cross-node
preemption is not supported"), over the cycle's snapshot of the ledger. Where gpuq deliberately
differs from upstream:

* **Who is a borrower** ("used over min": whether a victim's namespace borrows, whether a preemptor
  is reclaiming its guarantee): every *guaranteed* resource (listed in the ``min`` of at least one
  ElasticQuota), with a quota's own absent ``min`` key counting as 0. Upstream compares cpu, memory,
  ephemeral-storage and pods always, so one quota listing only ``nvidia.com/gpu`` in ``min`` makes
  every namespace "over min" on memory.
* **Namespaces without an ElasticQuota** (as upstream): their pods may only preempt lower-priority
  pods of other such namespaces, and are never victims of a preemptor that has a quota.
* **Gangs.** Upstream knows no PodGroups and may evict one member of a running gang, leaving it
  below minMember with its other members still holding their nodes. gpuq takes from a gang only
  its members beyond minMember (:func:`spare_gang_members`, Volcano's gang preemptable rule).
* **PodDisruptionBudgets** (design.md "Preemption"). Upstream gives back budget-violating victims
  first (kube's reprieve). gpuq first looks for the fewest victims among the pods whose eviction
  violates no budget (a budget's allowance going to its least important pods), and only when those
  cannot make room takes kube's reprieve over every eligible pod, violating ones given back first.
* **Placement rules.** ``fits`` runs the scheduler's real PreFilter and Filter with the victims gone
  (as upstream runs its filters on the node without them): a node where the preemptor would still
  break a rule is no candidate, and no victim set it would break one beside is chosen.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from gpuq_k8s.common.model.disruption_budget import NO_BUDGETS, Budgets
from gpuq_k8s.common.model.elastic.ledger import ElasticQuotaInfos, add_into
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quantity import PODS
from gpuq_k8s.common.model.resources import Resources

PREEMPT_NEVER: Final = "Never"


def _priority(pod: PodInfo) -> int:
    return pod.priority or 0


class VictimScope(enum.Enum):
    """Where a preemptor may take victims from (capacity-scheduling.md, PostFilter)."""

    NONE = "None"  # preemptionPolicy: Never
    BORROWERS = "Borrowers"  # used + request <= min: other namespaces whose used > min, any priority
    SAME_NAMESPACE = "SameNamespace"  # used + request > min: lower-priority pods of its own namespace
    NO_QUOTA = "NoQuota"  # preemptor without quota: lower-priority pods of namespaces without quota


def victim_scope(
    preemptor: PodInfo, infos: ElasticQuotaInfos, request: Mapping[str, int] | None = None
) -> VictimScope:
    """Which pods ``preemptor`` may preempt (KEP PostFilter; Semantics 4).

    ``preemptionPolicy: Never`` never preempts. With a quota, ``used + request <= min`` on every
    guaranteed resource means the preemptor is reclaiming its guarantee, so it may take from
    borrowers in other namespaces whatever their priority; otherwise only lower-priority pods of its
    own namespace ("restricted single-namespace preemption"). A request for no guaranteed resource
    reclaims nothing, so it is restricted to its own namespace too.
    """
    if preemptor.preemption_policy == PREEMPT_NEVER:
        return VictimScope.NONE
    info = infos.get(preemptor.namespace)
    if info is None:
        return VictimScope.NO_QUOTA
    req = {k: v for k, v in (preemptor.requests if request is None else request).items() if k != PODS}
    guaranteed = infos.guaranteed
    # A request that touches no guaranteed resource has no guarantee to reclaim.
    reclaims = any(amount > 0 and key in guaranteed for key, amount in req.items())
    if not reclaims or info.over_min_with(req, guaranteed):
        return VictimScope.SAME_NAMESPACE
    return VictimScope.BORROWERS


def is_eligible_victim(
    scope: VictimScope, preemptor: PodInfo, victim: PodInfo, infos: ElasticQuotaInfos
) -> bool:
    """Whether ``victim`` may be preempted by ``preemptor`` under ``scope`` (see :func:`victim_scope`)."""
    if victim.key == preemptor.key or not victim.holds_resources:
        return False
    victim_info = infos.get(victim.namespace)
    if scope is VictimScope.BORROWERS:
        return (
            victim_info is not None
            and victim.namespace != preemptor.namespace
            and victim_info.over_min(infos.guaranteed)
        )
    if scope is VictimScope.SAME_NAMESPACE:
        return victim.namespace == preemptor.namespace and _priority(victim) < _priority(preemptor)
    if scope is VictimScope.NO_QUOTA:
        return victim_info is None and _priority(victim) < _priority(preemptor)
    return False


@dataclass(frozen=True, slots=True)
class VictimSelection:
    """Victims on one node, least important first; ``ok`` False with a ``reason`` when none work."""

    ok: bool
    victims: tuple[PodInfo, ...] = ()
    reason: str = ""
    violations: int = 0  # victims whose eviction violates a PodDisruptionBudget

    @property
    def highest_priority(self) -> int:
        return max((_priority(p) for p in self.victims), default=-(2**31))


# Upper bound on the subsets the exact "fewest victims" search evaluates before falling back to
# kube-scheduler's greedy reprieve; with 12 candidates every subset fits in it.
DEFAULT_SEARCH_BUDGET: Final = 4096
# Upper bound on the ``fits`` calls (each runs the scheduler's PreFilter and Filter) the exact search
# makes on subsets the node and quota checks accept; beyond it, the reprieve decides.
DEFAULT_FIT_BUDGET: Final = 32


def select_victims_on_node(
    preemptor: PodInfo,
    node_pods: Sequence[PodInfo],
    node_free: Mapping[str, int],
    infos: ElasticQuotaInfos,
    *,
    request: Resources | None = None,
    fits: Callable[[Sequence[PodInfo]], bool] | None = None,
    budgets: Budgets = NO_BUDGETS,
    search_budget: int = DEFAULT_SEARCH_BUDGET,
    fit_budget: int = DEFAULT_FIT_BUDGET,
) -> VictimSelection:
    """Choose the victims on one node so that ``preemptor`` fits it and passes the quota checks.

    ``node_pods`` are the pods running on the node, ``node_free`` the node's allocatable minus what
    they request (include ``pods`` to count pod slots), ``infos`` the cycle's snapshot. ``fits``, if
    given, runs the scheduler's other filters with the given pods removed from the node.

    Upstream ``SelectVictimsOnNode``: take every eligible pod (:func:`is_eligible_victim`); if the
    preemptor does not fit with all of them gone, or the quota checks (own ``max``, total ``min``)
    still fail, the node is no candidate (the KEP's cross-node limitation). Then, as Semantics 4
    asks, the *fewest* victims, ties broken by the lowest highest priority, then the lowest priority
    sum, then least important (newest) first: an exact search up to ``search_budget`` subsets, and
    beyond that kube-scheduler's reprieve (add victims back most important first while the preemptor
    still fits). Feasibility only grows with more victims, so an exact answer needs no reprieve.
    With ``budgets``, that search is over the pods whose eviction violates no PodDisruptionBudget
    when they can make room; otherwise kube's reprieve over all, budget-violating pods given back
    first (the module doc). ``violations`` counts the chosen victims that violate a budget.
    """
    req = preemptor.requests if request is None else request
    scope = victim_scope(preemptor, infos, req)
    if scope is VictimScope.NONE:
        return VictimSelection(
            False, reason=f"{preemptor.ref}: not eligible to preempt (preemptionPolicy=Never)"
        )
    candidates = [p for p in node_pods if is_eligible_victim(scope, preemptor, p, infos)]
    if not candidates:
        return VictimSelection(
            False, reason=f"{preemptor.ref}: no eligible victims on the node ({scope.value})"
        )
    # Least important first: lower priority, then the newer pod (kube-scheduler's MoreImportantPod).
    candidates.sort(key=lambda p: (_priority(p), _neg_time(p.creation_timestamp), p.key))

    quota_req = {k: v for k, v in req.items() if k != PODS}
    node_req = dict(quota_req)
    if PODS in node_free:
        node_req[PODS] = 1
    own = infos.get(preemptor.namespace)
    charges = [_charge_of(p, infos) for p in candidates]

    def cheap(chosen: Sequence[int]) -> bool:
        """The node's room and the quotas (no plugin run)."""
        freed_node: dict[str, int] = {}
        freed_own: dict[str, int] = {}
        freed_quota: dict[str, int] = {}
        for i in chosen:
            victim = candidates[i]
            add_into(freed_node, victim.requests, 1)
            freed_node[PODS] = freed_node.get(PODS, 0) + 1
            charge = charges[i]
            if charge is not None:
                add_into(freed_quota, charge, 1)
                if victim.namespace == preemptor.namespace:
                    add_into(freed_own, charge, 1)
        for key, amount in node_req.items():
            if amount > 0 and node_free.get(key, 0) + freed_node.get(key, 0) < amount:
                return False
        if own is not None:
            for key, amount in quota_req.items():
                if (
                    amount > 0
                    and key in own.max
                    and own.used.amount(key) - freed_own.get(key, 0) + amount > own.max[key]
                ):
                    return False
            if infos.over_total_min(quota_req, freed_quota) is not None:
                return False
        return True

    def placed(chosen: Sequence[int]) -> bool:
        return fits is None or fits([candidates[i] for i in chosen])

    def feasible(chosen: Sequence[int]) -> bool:
        return cheap(chosen) and placed(chosen)

    everyone = range(len(candidates))
    if not cheap(everyone):
        return VictimSelection(
            False,
            reason=(
                f"{preemptor.ref}: preempting every eligible pod on the node ({len(candidates)}) "
                "would not make room within the node and the elastic quotas"
            ),
        )
    if not placed(everyone):
        return VictimSelection(
            False,
            reason=(
                f"{preemptor.ref}: the node would reject it even with every eligible pod on it "
                f"({len(candidates)}) preempted"
            ),
        )
    # The pods whose eviction violates no budget, a budget's allowance going to its least important
    # pods (candidates are least important first); indexes into ``candidates``.
    violating, _ = budgets.split(candidates)
    spared = {id(p) for p in violating}
    within = [i for i, p in enumerate(candidates) if id(p) not in spared]
    best: list[int] | None = None
    if within and feasible(within):
        best = _fewest(candidates, within, cheap, placed, budget=search_budget, fit_budget=fit_budget)
        if best is None:
            best = _reprieve(within, feasible)
    if best is not None:
        return VictimSelection(True, tuple(candidates[i] for i in sorted(best)))
    # No room without violating a budget: kube's reprieve over every eligible pod, most important
    # first, the budget-violating ones (as kube classifies them) given back first.
    order = sorted(everyone, key=lambda i: -i)  # most important first
    important = [candidates[i] for i in order]
    over, _ = budgets.split(important)
    over_ids = {id(p) for p in over}
    tries = [i for i in order if id(candidates[i]) in over_ids] + [
        i for i in order if id(candidates[i]) not in over_ids
    ]
    chosen = _reprieve(list(everyone), feasible, tries)
    violations = sum(1 for i in chosen if id(candidates[i]) in over_ids)
    return VictimSelection(True, tuple(candidates[i] for i in sorted(chosen)), violations=violations)


def spare_gang_members(
    pods: Sequence[PodInfo], gang_of: Callable[[PodInfo], tuple[str, int] | None]
) -> list[PodInfo]:
    """The pods preemption may take without breaking a gang. ``gang_of(pod)`` is None for a pod
    outside a gang (a PodGroup with minMember above 1), else its gang's key and how many members it
    runs beyond minMember. A gang gives up at most that many, its least important first (Volcano's
    gang rule: a job is preemptable only while it keeps minAvailable running); every other pod stays
    eligible. Least important first, as :func:`select_victims_on_node` orders them."""
    spare: dict[str, int] = {}
    out: list[PodInfo] = []
    for pod in sorted(pods, key=lambda p: (_priority(p), _neg_time(p.creation_timestamp), p.key)):
        gang = gang_of(pod)
        if gang is None:
            out.append(pod)
            continue
        key, beyond_min = gang
        left = spare.setdefault(key, beyond_min)
        if left > 0:
            spare[key] = left - 1
            out.append(pod)
    return out


def _neg_time(timestamp: str) -> tuple[int, ...]:
    # RFC 3339 timestamps in UTC sort as strings; negate character codes to put the newest first.
    return tuple(-ord(c) for c in timestamp)


def _charge_of(pod: PodInfo, infos: ElasticQuotaInfos) -> Resources | None:
    if pod.namespace not in infos:
        return None
    charged = infos.reserved(pod.namespace, pod.key)
    return charged if charged is not None else pod.requests


def _fewest(
    candidates: Sequence[PodInfo],
    pool: Sequence[int],
    cheap: Callable[[Sequence[int]], bool],
    placed: Callable[[Sequence[int]], bool],
    *,
    budget: int,
    fit_budget: int,
) -> list[int] | None:
    """The best feasible subset of ``pool`` of minimum size (ties: the lowest highest priority, then
    the lowest sum, then the least important); ``None`` when a search budget runs out. ``cheap``
    (room and quotas) is asked of every subset of a size, ``placed`` (the scheduler's filters) of
    those it accepts, best first, until one passes."""
    spent = 0
    fitted = 0
    for size in range(len(pool) + 1):
        accepted: list[tuple[tuple[int, int, tuple[int, ...]], tuple[int, ...]]] = []
        for combo in itertools.combinations(pool, size):
            spent += 1
            if spent > budget:
                return None
            if cheap(combo):
                prios = [_priority(candidates[i]) for i in combo]
                accepted.append(((max(prios, default=0), sum(prios), combo), combo))
        for _, combo in sorted(accepted):
            fitted += 1
            if fitted > fit_budget:
                return None
            if placed(combo):
                return list(combo)
    return None


def _reprieve(
    pool: Sequence[int], feasible: Callable[[Sequence[int]], bool], order: Sequence[int] | None = None
) -> list[int]:
    """kube-scheduler's reprieve: start from all of ``pool``, give back each pod in ``order`` (by
    default the most important first) while the rest stays feasible."""
    victims = list(pool)
    for i in order if order is not None else sorted(pool, reverse=True):
        trial = [v for v in victims if v != i]
        if feasible(trial):
            victims = trial
    return victims
