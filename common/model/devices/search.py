"""The allocation search for one pod on one node (the structured allocator's ``allocateOne``).

Claims are allocated one after the other, each request's devices one after the other; each candidate
that is free, fits what is left of its capacity and counters and keeps the claim's constraints is
taken, and the search goes on; when it gets stuck it gives the last device back and tries the next
(backtracking). Within one request devices are tried in candidate order only (combinations, never
permutations); a ``firstAvailable`` request takes its first subrequest that leads to a full
solution. The first full solution wins: no scoring, as in kube-scheduler 1.36. A claim never gets
more than 32 results (``AllocationResultsMaxSize``): a subrequest that would exceed it is skipped
for the next one.

``allocationMode: All`` takes every candidate of the node (at least one), tainted ones included,
so one untolerated taint or one device in use makes it fail. A device with
``allowMultipleAllocations`` is shared: each allocation consumes part of its capacity
(:mod:`.capacity`) and gets a share ID, and its counters are consumed once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from gpuq_k8s.common.model.devices.capacity import shortfall
from gpuq_k8s.common.model.devices.claims import ALL
from gpuq_k8s.common.model.devices.constraints import ConstraintState
from gpuq_k8s.common.model.devices.counters import CounterSets, fits, remaining, take
from gpuq_k8s.common.model.devices.explain import RequestReason, Unfit, diagnose
from gpuq_k8s.common.model.devices.plan import (
    Alternative,
    Candidate,
    NodeCandidates,
    PodPlan,
    allocated_claim_fits,
)
from gpuq_k8s.common.model.devices.pools import PoolID
from gpuq_k8s.common.model.devices.results import ClaimAllocation, DeviceID, DeviceResult
from gpuq_k8s.common.model.node_selector import NodeSelector, Requirement, only_node
from gpuq_k8s.common.model.nodes import NodeInfo

MAX_RESULTS: Final = 32  # resourceapi.AllocationResultsMaxSize
FROM_CLASS: Final = "FromClass"
FROM_CLAIM: Final = "FromClaim"


class _MaxSize(Exception):
    """Allocating this way would give a claim more than 32 results."""


class ConstraintBroken(Exception):
    """``allocationMode: All`` needs a device the claim's constraints refuse."""


@dataclass(frozen=True, slots=True)
class Allocation:
    """The answer for a node that fits: one :class:`ClaimAllocation` per claim to allocate (in the
    plan's order, keyed by claim key), and the node it is for."""

    node: str
    claims: dict[str, ClaimAllocation] = field(default_factory=dict)
    steps: int = 0  # search steps (upstream's NumAllocateOneInvocations), for tests and benchmarks


@dataclass(slots=True)
class _Picked:
    alternative: Alternative
    candidate: Candidate
    share_id: str | None
    consumed: dict[str, int] | None


class _Search:
    def __init__(self, plan: PodPlan, node: NodeInfo) -> None:
        self.plan = plan
        self.node = node
        self.ledger = plan.allocator.ledger
        self.claims = plan.to_allocate
        self.pools = plan.allocator.inventory.node_pools(node.name, node.labels)
        self.cands: dict[tuple[int, int, int], NodeCandidates] = {}
        for c, prepared in enumerate(self.claims):
            for r, alternatives in enumerate(prepared.requests):
                for s, alternative in enumerate(alternatives):
                    self.cands[(c, r, s)] = plan.candidates(alternative, self.pools)
        self.constraints = [[ConstraintState(k) for k in p.claim.spec.constraints] for p in self.claims]
        self.results: list[list[_Picked]] = [[] for _ in self.claims]
        self.selected: dict[tuple[int, int], int] = {}
        self.dedicated: dict[DeviceID, Counter[int]] = {}
        self.capacity: dict[DeviceID, dict[str, int]] = {}
        self.shares: Counter[DeviceID] = Counter()
        self.counters: dict[PoolID, CounterSets] = {}
        self.steps = 0
        self.constraint_error: str | None = None

    # --- state --------------------------------------------------------------------------------------

    def _in_use(self, cand: Candidate) -> bool:
        did = cand.id
        if self.ledger.dedicated(did) or (not cand.device.allow_multiple and self.ledger.shared(did)):
            return True
        return sum(self.dedicated.get(did, Counter()).values()) > 0

    def _take(
        self, c: int, alternative: Alternative, cand: Candidate, must: bool
    ) -> Callable[[], None] | None:
        request = alternative.request
        did = cand.id
        multi = cand.device.allow_multiple
        if request.admin_access:
            if not multi and self.dedicated.get(did, Counter())[c] > 0:
                return None
        elif self._in_use(cand):
            return None
        undo: list[Callable[[], None]] = []

        def rollback() -> None:
            for step in reversed(undo):
                step()

        shared_already = multi and (self.ledger.shared(did) or self.shares[did] > 0)
        if cand.device.consumes and not shared_already:
            pid = cand.pool.id
            left = self.counters.get(pid)
            if left is None:
                left = self.counters[pid] = remaining(cand.pool, self.ledger.allocated_in_pool(pid))
            if fits(left, cand.device) is not None:
                return None
            take(left, cand.device, -1)
            undo.append(lambda: take(left, cand.device, +1))
        if cand.taint is not None:
            rollback()
            return None
        states = self.constraints[c]
        for i, state in enumerate(states):
            if not state.add(alternative.name, cand.device):
                for j in range(i - 1, -1, -1):
                    states[j].remove(alternative.name, cand.device)
                rollback()
                if must:
                    ref = self.claims[c].claim.ref
                    raise ConstraintBroken(
                        f"{ref}, request {alternative.name}: cannot add device {'/'.join(did)} "
                        f"because a claim constraint would not be satisfied ({state.describe()})"
                    )
                return None

        def unconstrain() -> None:
            for state in reversed(states):
                state.remove(alternative.name, cand.device)

        undo.append(unconstrain)
        used = dict(self.ledger.used_capacity(did))
        for name, value in self.capacity.get(did, {}).items():
            used[name] = used.get(name, 0) + value
        if shortfall(cand.taken, cand.device.capacity, used) is not None:
            rollback()
            return None
        share_id = None
        consumed = None
        if multi:
            share_id = self.plan.allocator.share_id()
            consumed = dict(cand.taken)
            mine = self.capacity.setdefault(did, {})
            for name, value in consumed.items():
                mine[name] = mine.get(name, 0) + value
            self.shares[did] += 1

            def unshare() -> None:
                for name, value in consumed.items():
                    mine[name] -= value
                self.shares[did] -= 1

            undo.append(unshare)
        else:
            holders = self.dedicated.setdefault(did, Counter())
            holders[c] += 1
            undo.append(lambda: holders.__setitem__(c, holders[c] - 1))
        picked = self.results[c]
        picked.append(_Picked(alternative, cand, share_id, consumed))

        def unpick() -> None:
            picked.pop()

        undo.append(unpick)
        return rollback

    # --- the recursion ------------------------------------------------------------------------------

    def one(self, c: int, r: int, s: int, d: int, in_sub: bool, start: int) -> bool:  # noqa: PLR0917
        """Upstream ``allocateOne(deviceIndices{c, r, s, d}, allocateSubRequest, startLocation)``."""
        self.steps += 1
        if c >= len(self.claims):
            return True
        requests = self.claims[c].requests
        if r >= len(requests):
            try:
                return self.one(c + 1, 0, 0, 0, False, 0)
            except _MaxSize:
                return False
        alternatives = requests[r]
        if not in_sub and self.claims[c].claim.spec.requests[r].prioritized:
            all_exceeded = True
            for sub in range(len(alternatives)):
                try:
                    ok = self.one(c, r, sub, 0, True, 0)
                except _MaxSize:
                    continue
                all_exceeded = False
                if ok:
                    self.selected[(c, r)] = sub
                    return True
            if all_exceeded:
                raise _MaxSize
            return False
        alternative = alternatives[s]
        cands = self.cands[(c, r, s)].candidates
        all_mode = alternative.request.mode == ALL
        if all_mode and not cands:
            return False
        needed = len(cands) if all_mode else alternative.request.count
        if d >= needed:
            return self.one(c, r + 1, 0, 0, False, 0)
        if len(self.results[c]) + needed - d > MAX_RESULTS:
            raise _MaxSize
        if all_mode:
            rollback = self._take(c, alternative, cands[d], must=True)
            if rollback is None:
                return False
            try:
                if self.one(c, r, s, d + 1, in_sub, 0):
                    return True
            except BaseException:
                rollback()
                raise
            rollback()
            return False
        for position in range(start, len(cands)):
            rollback = self._take(c, alternative, cands[position], must=False)
            if rollback is None:
                continue
            try:
                if self.one(c, r, s, d + 1, in_sub, position + 1):
                    return True
            except BaseException:
                rollback()
                raise
            rollback()
        return False

    # --- the answer ------------------------------------------------------------------------------------

    def allocation(self) -> Allocation:
        claims = {}
        for c, prepared in enumerate(self.claims):
            results = tuple(
                DeviceResult(
                    request=p.alternative.name,
                    driver=p.candidate.id[0],
                    pool=p.candidate.id[1],
                    device=p.candidate.id[2],
                    admin_access=p.alternative.request.admin_access,
                    tolerations=p.alternative.request.tolerations,
                    share_id=p.share_id,
                    consumed_capacity=p.consumed or None,
                    binding_conditions=p.candidate.device.binding_conditions,
                    binding_failure_conditions=p.candidate.device.binding_failure_conditions,
                )
                for p in self.results[c]
            )
            claims[prepared.claim.key] = ClaimAllocation(
                results, self._config(c), node_selector(self.results[c], self.node.name)
            )
        return Allocation(self.node.name, claims, self.steps)

    def _config(self, c: int) -> tuple[dict[str, Any], ...]:
        prepared = self.claims[c]
        config: list[dict[str, Any]] = []
        by_class: dict[str, list[dict[str, Any]]] = {}
        chosen_names = []
        for r, alternatives in enumerate(prepared.requests):
            alternative = alternatives[self.selected.get((c, r), 0)]
            chosen_names.append((prepared.claim.spec.requests[r].name, alternative.name))
            entries = by_class.get(alternative.device_class.name)
            if entries is not None:
                for entry in entries:
                    entry["requests"].append(alternative.name)
                continue
            entries = [
                {"source": FROM_CLASS, "requests": [alternative.name], **dict(item)}
                for item in alternative.device_class.config
            ]
            by_class[alternative.device_class.name] = entries
            config.extend(entries)
        for item in prepared.claim.spec.config:
            scope = list(item.get("requests") or [])
            body = {k: v for k, v in item.items() if k != "requests"}
            if not scope or any(base in scope or chosen in scope for base, chosen in chosen_names):
                config.append(
                    {"source": FROM_CLAIM, "requests": scope, **body}
                    if scope
                    else {"source": FROM_CLAIM, **body}
                )
        return tuple(config)


def node_selector(picked: list[_Picked], node: str) -> NodeSelector | None:
    """Where the claim can be used (structured allocator ``createNodeSelector``)."""
    fields: list[Requirement] = []
    expressions: list[Requirement] = []
    for p in picked:
        s, device = p.candidate.slice, p.candidate.device
        name, selector = (
            (device.node_name, device.node_selector) if s.per_device else (s.node_name, s.node_selector)
        )
        if name or device.binds_to_node:
            return only_node(node)
        if selector is not None and len(selector.terms) == 1:
            for requirement in selector.terms[0]:
                target = fields if requirement.field else expressions
                if not any(_same(requirement, other) for other in target):
                    target.append(requirement)
    if not fields and not expressions:
        return None
    return NodeSelector((tuple(expressions) + tuple(fields),))


def _same(a: Requirement, b: Requirement) -> bool:
    return a.key == b.key and a.operator == b.operator and set(a.values) == set(b.values)


def allocate_on_node(plan: PodPlan, node: NodeInfo) -> Allocation | Unfit:
    """Allocate every claim of ``plan`` that needs it on ``node`` (see the module doc). A plan that
    waits (a claim in use or in flight) fits no node; an allocated claim only the nodes its node
    selector matches ("resourceclaim not available on the node")."""
    if plan.waiting is not None:
        return Unfit(node.name, (RequestReason("", "", plan.waiting),))
    for claim in plan.allocated:
        if not allocated_claim_fits(claim, node):
            reason = f"allocated to devices not reachable from node {node.name}"
            return Unfit(node.name, (RequestReason(claim.ref, "", reason),))
    search = _Search(plan, node)
    try:
        done = search.one(0, 0, 0, 0, False, 0)
    except _MaxSize:
        done = False
    except ConstraintBroken as err:
        return diagnose(
            search.plan, node, search.pools, search.cands, constraint=str(err), steps=search.steps
        )
    if done:
        return search.allocation()
    return diagnose(search.plan, node, search.pools, search.cands, steps=search.steps)
