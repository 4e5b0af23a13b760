"""Task mode: may a pod take a node, as far as its queue's quota goes? (capacity-card.md "Task
Allocatable Check", resolved per card type: design.md Semantics 1).

:func:`check_task` gives a pod a verdict per candidate card type (:class:`TaskCheck`), which
:meth:`TaskCheck.filter_nodes` applies to every node at once; :class:`TaskPlan` memoises it for the
pods of a workload. :func:`task_quota_refusal` is the scalar form the webhook asks: could *some* node
take the pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model.capacity_card.args import CapacityCardArgs
from gpuq_k8s.common.model.capacity_card.demand import CardDemand, charged_cpu_memory
from gpuq_k8s.common.model.capacity_card.ledger import QueueLedger
from gpuq_k8s.common.model.capacity_card.quota import CPU_MEMORY, QueueQuota
from gpuq_k8s.common.model.capacity_card.refusals import (
    NoCardTypeFits,
    cpu_memory_refusal,
    empty_capability,
    exceeded,
    queue_closed,
)
from gpuq_k8s.common.model.cards.catalog import CardCatalog
from gpuq_k8s.common.model.events import INSUFFICIENT_SCALAR_QUOTA
from gpuq_k8s.common.model.outlook import absent_card_outlook, with_outlook
from gpuq_k8s.common.model.quota_exceeded import QuotaExceeded
from gpuq_k8s.common.model.refusal import Refusal
from gpuq_k8s.common.model.resources import EMPTY, Resources
from gpuq_k8s.common.model.wire import object_ref

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class NodeFilter:
    """Per node: ``mask[n]`` passes; else ``reasons[reason_index[n]]`` says why (index -1 = passes)."""

    mask: BoolArray
    reason_index: npt.NDArray[np.int32]
    reasons: tuple[str, ...]

    def reason(self, node_row: int) -> str | None:
        index = int(self.reason_index[node_row])
        return None if index < 0 else self.reasons[index]


@dataclass(frozen=True, slots=True)
class TaskCheck:
    """A pod's quota verdict per card type (spec "Task Allocatable Check", resolved per node: Semantics 1).

    ``failure`` refuses every node (closed queue, cpu/memory, unparseable request). Otherwise
    ``allowed[c]`` says whether card type id ``c`` (``card_names`` = catalog order) has quota left for
    the pod and ``messages[c]`` why not; ``groups`` are the demand's candidate ids per charge, and
    ``refusals`` maps each candidate card type (first-seen order) to its refusal, None when it has
    quota left. :meth:`filter_nodes` applies it to all nodes at once. A pod without cards has no
    groups and passes every node once cpu and memory passed.

    A candidate no node offers (``autoscaledCardTypes``: it may come with a new node) has no id; its
    quota verdict is in ``refusals`` all the same. ``none_reasons`` is, per group, why a node that has
    none of the group's candidates is refused: with an absent candidate that has quota, the pod waits
    for a node offering it (design.md Semantics 16).
    """

    queue: str
    demand: CardDemand
    card_names: tuple[str, ...] = ()
    groups: tuple[npt.NDArray[np.intp], ...] = ()
    allowed: BoolArray = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))
    messages: tuple[str, ...] = ()
    refusals: Mapping[str, Refusal | None] = field(default_factory=dict)
    failure: Refusal | None = None
    none_reasons: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Some node could take the pod as far as quota goes (the webhook's question)."""
        if self.failure is not None:
            return False
        return all(bool(self.allowed[ids].any()) for ids in self.groups)

    def unoffered(self) -> str | None:
        """Why no current node can take the pod when one of its groups has only candidates no node
        offers (a node autoscaler may add one): it waits for a node offering one that has quota, or,
        when the quota holds none of them, it cannot fit however many nodes come; None otherwise."""
        for group in self.demand.groups:
            if any(name in self.card_names for name in group):
                continue
            names = "|".join(group)
            awaited = [name for name in group if self.refusals.get(name) is None]
            if awaited:
                offering = "|".join(awaited)
                queue = object_ref("Queue", "", self.queue)
                outlook = absent_card_outlook(offering)
                return f"{queue} has quota for {offering}, which no node offers yet ({outlook})"
            refused = [r.message for name in group if (r := self.refusals.get(name)) is not None]
            return f"no node offers {names} yet, nor could one take the pod: " + "; ".join(refused)
        return None

    @property
    def awaited(self) -> tuple[str, ...]:
        """The candidates no node offers that have quota for the pod: what it waits for."""
        return tuple(
            name for name, refusal in self.refusals.items() if refusal is None and name not in self.card_names
        )

    @property
    def allowed_names(self) -> dict[str, bool]:
        """Card type name -> has quota left, for every candidate of the pod."""
        return {name: refusal is None for name, refusal in self.refusals.items()}

    def filter_nodes(self, has: BoolArray) -> NodeFilter:
        """Vectorised Filter over ``has`` (``CardCatalog.node_matrix``, shape (N, C)).

        A node passes when, for each group of the pod's demand, it has a candidate card type with
        quota left. A refused node's reason is the first candidate it has (why that type has no
        quota left) or that it has none of the candidates.
        """
        rows = has.shape[0]
        if self.failure is not None:
            message = self.failure.message
            return NodeFilter(np.zeros(rows, np.bool_), np.zeros(rows, np.int32), (message,))
        mask = np.ones(rows, dtype=np.bool_)
        reason_index = np.full(rows, -1, dtype=np.int32)
        reasons = list(self.messages)
        for g, ids in enumerate(self.groups):
            present = has[:, ids]
            passes = (present & self.allowed[ids]).any(axis=1)
            failing = mask & ~passes
            if failing.any():
                none_code = len(reasons)
                if g < len(self.none_reasons):
                    reasons.append(self.none_reasons[g])
                else:
                    names = "|".join(self.card_names[int(i)] for i in ids)
                    reasons.append(f"node has none of the card types {names} the pod asks for")
                any_present: BoolArray = np.asarray(present.any(axis=1), dtype=np.bool_)
                if ids.size:
                    first = ids[present.argmax(axis=1)].astype(np.int32)
                else:
                    first = np.zeros(rows, dtype=np.int32)
                reason_index[failing] = np.where(any_present[failing], first[failing], none_code)
                mask &= passes
        return NodeFilter(mask, reason_index, tuple(reasons))


def _queue_refusal(quota: QueueQuota, demand: CardDemand, charged: Resources) -> Refusal | None:
    """The refusals that read no usage: a closed queue, or a queue without capability asked for
    something."""
    if not quota.open:
        return queue_closed(quota.name, "it takes no new pods")
    if not quota.configured and (demand.uses_cards or not charged.nonzero().is_zero()):
        return empty_capability(quota)
    return None


def check_task(
    quota: QueueQuota,
    ledger: QueueLedger,
    demand: CardDemand,
    catalog: CardCatalog,
    args: CapacityCardArgs,
) -> TaskCheck:
    """Task mode, per card type: ``allocated[type] + request <= quota[type]`` for each candidate.

    Upstream passes an ``A|B`` task when *any* alternative has quota and may then place it on a node
    of an exhausted one; here every candidate gets its own verdict and the node filter only keeps
    nodes whose card type passed (design.md Semantics 1). cpu and memory are checked first
    (``allocated + request <= capability``) unless ``cardUnlimitedCpuMemory`` and the pod uses cards.
    """
    count = len(catalog.names)
    charged = charged_cpu_memory(demand, args)
    allocated = ledger.allocated_amounts
    failure = _queue_refusal(quota, demand, charged) or cpu_memory_refusal(quota, charged, allocated)
    if failure is not None:
        return with_failure(TaskCheck(quota.name, demand, catalog.names), failure)
    allowed = np.zeros(count, dtype=np.bool_)
    messages = [""] * count
    refusals: dict[str, Refusal | None] = {}
    groups: list[npt.NDArray[np.intp]] = []
    for group in demand.groups:
        ids = []
        for name in group:
            index = catalog.id_of(name)
            asked = demand.amounts[name]
            used = allocated.get(name, 0)
            limit = quota.capability.amount(name)
            refusal = None
            if used + asked > limit:
                refusal = Refusal(exceeded(quota.name, name, asked, used, limit), INSUFFICIENT_SCALAR_QUOTA)
            refusals.setdefault(name, refusal)
            if index is None:
                continue  # no node offers it (yet): its verdict is in refusals, its nodes to come
            ids.append(index)
            if refusal is None:
                allowed[index] = True
            else:
                messages[index] = refusal.message
        groups.append(np.array(ids, dtype=np.intp))
    none_reasons = tuple(none_reason(group, refusals, catalog) for group in demand.groups)
    return TaskCheck(
        quota.name,
        demand,
        catalog.names,
        tuple(groups),
        allowed,
        tuple(messages),
        refusals,
        None,
        none_reasons,
    )


def none_reason(group: tuple[str, ...], refusals: Mapping[str, Refusal | None], catalog: CardCatalog) -> str:
    """Why a node that has none of ``group``'s card types cannot take the pod: it has none of them;
    when a candidate no node offers has quota for the pod, a node autoscaler may add one, and the pod
    waits for it (design.md Semantics 16); when every such candidate is refused by quota, that refusal
    (a node offering it would not help)."""
    names = "|".join(group)
    text = f"node has none of the card types {names} the pod asks for"
    absent = [name for name in group if catalog.id_of(name) is None]
    awaited = [name for name in absent if refusals.get(name) is None]
    if awaited:
        return with_outlook(text, absent_card_outlook("|".join(awaited)))
    refused = [r for name in absent if (r := refusals.get(name)) is not None]
    present = [name for name in group if catalog.id_of(name) is not None]
    if refused and not present:
        return f"{text}: {'; '.join(r.message for r in refused)}"
    return text


def with_failure(check: TaskCheck, failure: Refusal) -> TaskCheck:
    """``check`` refusing every node for ``failure`` (no per-card-type verdicts)."""
    return TaskCheck(check.queue, check.demand, check.card_names, failure=failure)


def unrestricted_check(queue: str, demand: CardDemand) -> TaskCheck:
    """For a pod whose queue does not exist (Semantics 7: not subject to queue quotas)."""
    return TaskCheck(queue, demand)


def task_quota_refusal(
    quota: QueueQuota,
    demand: CardDemand,
    catalog: CardCatalog,
    args: CapacityCardArgs,
    allocated: Mapping[str, int] = EMPTY,
) -> Refusal | None:
    """Scalar :func:`check_task` for admission: None exactly when ``check_task(...).ok``, else why not.

    Same rules (spec "Task Allocatable Check", design.md Semantics 1) without the per-node arrays the
    scheduler needs: the webhook asks one question per review, whether *some* node could take the pod
    as far as quota goes. A refusal is the closed-queue, empty-capability or cpu/memory refusal
    :func:`check_task` reports as ``failure``, else an ``InsufficientScalarQuota`` refusal
    (:class:`~common.model.capacity_card.refusals.NoCardTypeFits`) naming the candidates and why each
    refused candidate has no quota left.
    """
    charged = charged_cpu_memory(demand, args)
    refusal = _queue_refusal(quota, demand, charged) or cpu_memory_refusal(quota, charged, allocated)
    if refusal is not None:
        return refusal
    capability = quota.capability
    ok = True
    judged: dict[str, QuotaExceeded | None] = {}  # in first-seen order, as check_task's refusals
    for group in demand.groups:
        passes = False
        for name in group:
            # A candidate no node offers is in a group only with autoscaledCardTypes: its quota
            # decides, as a node offering it may still come.
            asked = demand.amounts[name]
            used = allocated.get(name, 0)
            limit = capability.amount(name)
            if used + asked <= limit:
                passes = True
                judged.setdefault(name, None)
            elif name not in judged:
                judged[name] = exceeded(quota.name, name, asked, used, limit)
        ok = ok and passes
    if ok:
        return None
    shortfalls = [error for error in judged.values() if error is not None]
    candidates = "|".join(demand.alternatives or tuple(judged))
    return Refusal(NoCardTypeFits(candidates, shortfalls), INSUFFICIENT_SCALAR_QUOTA)


class TaskPlan:
    """:func:`check_task` for one ``(quota, demand)`` under one catalog and arguments, memoised.

    The scheduler asks the same question for every pod of a workload, and the answer depends on the
    ledger only through a few numbers: whether cpu and memory fit, and per candidate card type
    whether it fits and, when it does not, its usage (the refusal message names it). :meth:`check`
    reads those from the ledger's plain dict and returns the :class:`TaskCheck` computed for the same
    numbers before, so the shared checks are read-only. A cpu/memory refusal (its message names the
    usage too) takes the reference path every time: it is rare and stops the pod anyway.
    """

    __slots__ = ("_checks", "_fixed", "_limits", "args", "candidates", "catalog", "demand", "quota")

    _MAX_CHECKS: Final = 64

    def __init__(
        self, quota: QueueQuota, demand: CardDemand, catalog: CardCatalog, args: CapacityCardArgs
    ) -> None:
        self.quota = quota
        self.demand = demand
        self.catalog = catalog
        self.args = args
        charged = charged_cpu_memory(demand, args)
        capability = quota.capability
        self._fixed: TaskCheck | None = None
        if _queue_refusal(quota, demand, charged) is not None:
            # Refused before any usage is read: the same check whatever the ledger holds.
            self._fixed = check_task(quota, QueueLedger(quota.name), demand, catalog, args)
        self._limits = tuple(
            (resource, charged.amount(resource), capability.amount(resource))
            for resource in CPU_MEMORY
            if charged.amount(resource) > 0
        )
        self.candidates = tuple(
            (name, demand.amounts[name], capability.amount(name)) for group in demand.groups for name in group
        )
        self._checks: dict[tuple[int | None, ...], TaskCheck] = {}

    def check(self, ledger: QueueLedger) -> TaskCheck:
        """``check_task(quota, ledger, demand, catalog, args)``."""
        if self._fixed is not None:
            return self._fixed
        used = ledger.allocated_amounts
        for resource, asked, limit in self._limits:
            if used.get(resource, 0) + asked > limit:
                return check_task(self.quota, ledger, self.demand, self.catalog, self.args)
        # None for a candidate that fits (its verdict does not depend on how much is used), else its
        # usage, which the refusal message quotes.
        parts: list[int | None] = []
        for name, asked, limit in self.candidates:
            amount = used.get(name, 0)
            parts.append(None if amount + asked <= limit else amount)
        key = tuple(parts)
        check = self._checks.get(key)
        if check is None:
            if len(self._checks) >= self._MAX_CHECKS:
                self._checks.clear()
            check = self._checks[key] = check_task(self.quota, ledger, self.demand, self.catalog, self.args)
        return check
