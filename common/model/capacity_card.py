"""The capacity-card engine: per-queue quotas per card type (capacity-card.md, DESIGN.md Semantics 1, 3, 7).

Quotas. A Queue's capability is ``spec.capability`` for cpu and memory and the ``volcano.sh/card.quota``
annotation for card types; both default to 0 ("If not set, the default quota is also 0"), every other
resource is unlimited ("Other Resources"). A malformed card quota on a Queue that predates the webhook
is a Warning event and a card quota of 0 (Semantics 3).

Ledger. Per queue, :class:`QueueLedger` keeps, like Volcano's capacity-card plugin:

* ``allocated``: what bound pods are charged (cpu, memory, and cards under their *concrete* card type,
  never ``A|B``: Semantics 1 resolves the type on the node the pod lands on);
* ``inqueue``: what admitted jobs have reserved but not been allocated yet: for each PodGroup that is
  Inqueue (or Running with at least ``minMember`` tasks allocated and a minimum set, upstream's rule),
  ``max(0, min - allocated)`` per resource. A reservation for ``A|B`` keeps the composite key because no
  card type has been chosen yet;
* ``elastic``: Volcano's ``job.allocated - job.min`` (the part above the job's minimum), summed over jobs.

A job's minimum is ``spec.minResources`` (cpu, memory) plus cards: the card requests of its pods once
it has any (bound pods under their concrete type, pending ones under their ``card.name`` key), else its
``volcano.sh/card.request`` annotation (spec: "If Pods have already been created, card.request will not
take effect"). Inqueue is therefore ``max(0, min - allocated)`` for Inqueue jobs too (Volcano's first
release reserved the full minimum there and counted partially allocated jobs twice).

Decisions. :func:`check_enqueue` is the job mode ("Job Enqueueable Check"), :func:`check_task` the task
mode resolved per card type ("Task Allocatable Check" + Semantics 1), :func:`node_order_scores` the
"Node Ordering" score. Decisions return :class:`Decision` values with the upstream event reasons; this
module never emits anything. :class:`CapacityCard` ties them to the cluster state the scheduler
and the simulator keep.

``cardUnlimitedCpuMemory``: a pod (job) that uses cards is neither checked against nor charged to the
queue's cpu and memory (Story 3: "GPU tasks only consume GPU quotas"). Upstream skips the check but
still charges, so card pods would exhaust the cpu quota of the queue's cpu-only pods.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from common.model.annotations import CARD_NAME, CARD_QUOTA, CARD_REQUEST
from common.model.cards import (
    CARD_UNIT,
    CardCatalog,
    NodeCards,
    card_key,
    is_composite,
    key_alternatives,
    parse_card_names,
    parse_card_quota,
    parse_card_request,
)
from common.model.crd import PodGroup, Queue
from common.model.errors import ConfigError, InvalidAnnotation, InvalidValue, QuotaExceeded
from common.model.events import (
    EMPTY_QUEUE_CAPABILITY,
    GET_TASK_REQUEST_RESOURCE_FAILED,
    INSUFFICIENT_CPU_QUOTA,
    INSUFFICIENT_MEMORY_QUOTA,
    INSUFFICIENT_SCALAR_QUOTA,
    INVALID_ANNOTATION,
    EventRecord,
)
from common.model.pods import PodInfo
from common.model.quantity import CPU, MEMORY, format_units
from common.model.queues import podgroup_key_of, queue_of
from common.model.resources import EMPTY, Resources

CPU_MEMORY: Final = (CPU, MEMORY)
# Not one of Volcano's event reasons (upstream only logs it); the scheduler shows it as the reason.
QUEUE_CLOSED: Final = "QueueClosed"
# Upstream's "Node Ordering" base score for the preferred card type.
BASE_SCORE: Final = 100.0
# Job mode enumerates unions of alternative sets (see check_enqueue); past this many distinct sets in
# one queue it checks each requested set alone, as upstream does.
_MAX_EXACT_SETS: Final = 12
# Bounds of CapacityCard's memos: far above the distinct pod classes of a real cluster; a workload
# past them only recomputes.
_MAX_MEMO: Final = 4096
_MAX_NODE_MEMO: Final = 65536

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


# --------------------------------------------------------------------------------------------------
# Arguments


class CapacityCardArgs(BaseModel):
    """The ``capacity-card`` plugin arguments (capacity-card.md "Plugin Configuration")."""

    model_config = ConfigDict(frozen=True)

    card_unlimited_cpu_memory: bool = False
    node_order_weight: float = 1.0

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any] | None) -> CapacityCardArgs:
        """Parse Volcano's argument map; raises :class:`ConfigError` naming the key and value.

        Unknown keys are refused (a misspelt ``nodeOrderWieght`` must not silently mean 1.0), and so
        are values of the wrong type: ``"true"`` or ``1`` is not a boolean.
        """
        arguments = arguments or {}
        if not isinstance(arguments, Mapping):
            raise ConfigError("capacity-card.arguments", arguments, "a mapping of argument name to value")
        unlimited = False
        weight = 1.0
        for key, value in arguments.items():
            if key == "cardUnlimitedCpuMemory":
                if not isinstance(value, bool):
                    raise ConfigError(key, value, "true or false")
                unlimited = value
            elif key == "nodeOrderWeight":
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int | float)
                    or not math.isfinite(value)
                    or value <= 0
                ):
                    raise ConfigError(key, value, "a positive number such as 1.0")
                weight = float(value)
            else:
                raise ConfigError(
                    str(key),
                    value,
                    "one of the capacity-card arguments cardUnlimitedCpuMemory, nodeOrderWeight",
                )
        return cls(card_unlimited_cpu_memory=unlimited, node_order_weight=weight)


# --------------------------------------------------------------------------------------------------
# Decisions


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of a quota check: ``ok``, else an event ``reason`` and a user-facing ``message``.

    ``error`` carries the same refusal as a :class:`QuotaExceeded` (quota refusals) or an
    :class:`InvalidValue` (unparseable requests) for callers that raise, such as the webhook.
    """

    ok: bool
    reason: str = ""
    message: str = ""
    error: Exception | None = field(default=None, compare=False)

    def event(self, obj: str) -> EventRecord | None:
        """The Warning event for ``obj`` (``Pod/ns/p``, ``PodGroup/ns/pg``); None when allowed."""
        return None if self.ok else EventRecord(obj, "Warning", self.reason, self.message)


ALLOW: Final = Decision(True)


def _refuse(reason: str, error: Exception) -> Decision:
    return Decision(False, reason, str(error), error)


def _amount(resource: str, amount: int) -> str:
    # Card keys are not known resource names to quantity.py; cards are milli-unit counts.
    return format_units(resource if resource in CPU_MEMORY else "cards", amount)


def _exceeded(queue: str, resource: str, requested: int, used: int, limit: int) -> QuotaExceeded:
    """``used`` is what counts against the limit *before* this request."""
    return QuotaExceeded(
        resource,
        _amount(resource, requested),
        _amount(resource, max(limit - used, 0)),
        _amount(resource, limit),
        scope=f"Queue//{queue}",
        used=_amount(resource, used),
    )


# --------------------------------------------------------------------------------------------------
# Queue quota


@dataclass(frozen=True, slots=True)
class QueueQuota:
    """A Queue as this engine sees it.

    ``capability`` holds cpu, memory and each card type with a quota (milli-units); a key absent from
    it is 0 for cpu, memory and card types. ``configured`` is False when the Queue sets neither a
    cpu/memory capability nor a card quota (``EmptyQueueCapability``). ``guarantee`` and ``deserved``
    (cpu/memory from the spec, cards from the card quota, as upstream) feed the metrics only.
    """

    name: str
    capability: Resources = EMPTY
    open: bool = True
    configured: bool = False
    guarantee: Resources = EMPTY
    deserved: Resources = EMPTY
    events: tuple[EventRecord, ...] = ()

    @property
    def cards(self) -> Resources:
        return self.capability.without(CPU_MEMORY)


def queue_quota(queue: Queue) -> QueueQuota:
    """The quota of a Queue (spec "Queue Annotations for Card Quotas"; DESIGN.md Semantics 3, 7)."""
    events: list[EventRecord] = []
    cards = EMPTY
    text = queue.annotations.get(CARD_QUOTA)
    if text is not None:
        try:
            cards = parse_card_quota(text, queue.ref)
        except InvalidAnnotation as err:
            message = f"{err}; card quota treated as 0 until the annotation is fixed"
            events.append(EventRecord(queue.ref, "Warning", INVALID_ANNOTATION, message))
    cpu_memory = queue.spec.capability.only(CPU_MEMORY)
    return QueueQuota(
        name=queue.name,
        capability=cpu_memory + cards,
        open=queue.open,
        configured=bool(cpu_memory) or bool(cards),
        guarantee=queue.spec.guarantee.resource.only(CPU_MEMORY) + cards,
        deserved=queue.spec.deserved.only(CPU_MEMORY) + cards,
        events=tuple(events),
    )


# --------------------------------------------------------------------------------------------------
# What a pod asks for


@dataclass(frozen=True, slots=True)
class CardDemand:
    """What a pod asks of the card quotas, resolved against the catalog.

    ``groups`` holds one tuple of candidate card types per charge, in preference order: the
    ``card.name`` alternatives the pod requests the resource of, then, for each other card resource
    the pod requests, every card type of that resource (Semantics 1: charged to the node's type).
    On a node, each group is charged to its first candidate the node has (and has quota for).
    ``amounts`` is the milli-unit amount each candidate would be charged. ``pending`` is the
    reservation key of each group while the pod is unbound (``A|B`` -> amount).
    """

    alternatives: tuple[str, ...] = ()
    groups: tuple[tuple[str, ...], ...] = ()
    amounts: Mapping[str, int] = field(default_factory=dict)
    cpu_memory: Resources = EMPTY

    @property
    def uses_cards(self) -> bool:
        return bool(self.groups)

    @property
    def pending(self) -> Resources:
        return Resources({card_key(group): self.amounts[group[0]] for group in self.groups})


def pod_card_demand(pod: PodInfo, catalog: CardCatalog) -> CardDemand:
    """The card demand of a pod; raises :class:`InvalidAnnotation` naming the pod when it has none.

    Refused (upstream's ``GetTaskRequestResourceFailed``): a malformed ``card.name``; a ``card.name``
    none of whose card types any node has; a ``card.name`` whose card types' resources the pod does
    not request (spec "Job Resource Card Requests": the resource must be in ``resources``).
    """
    requested = {r: v for r, v in pod.requests.items() if v > 0 and catalog.is_card_resource(r)}
    groups: list[tuple[str, ...]] = []
    amounts: dict[str, int] = {}
    alternatives: tuple[str, ...] = ()
    covered: set[str] = set()
    text = pod.annotations.get(CARD_NAME)
    if text is not None:
        alternatives = parse_card_names(text, pod.ref)
        known = [(name, catalog.resource_of(name)) for name in alternatives]
        group = tuple(name for name, resource in known if resource is not None and resource in requested)
        if not group:
            resources = sorted({r for _, r in known if r is not None})
            if not resources:
                expected = "card types that some node has (none of these has been discovered on any node)"
            else:
                expected = (
                    f"a pod that requests {' or '.join(resources)} for these card types in its resources"
                )
            raise InvalidAnnotation(CARD_NAME, text, expected, pod.ref)
        for name in group:
            resource = catalog.resource_of(name)
            assert resource is not None
            amounts[name] = requested[resource]
            covered.add(resource)
        groups.append(group)
    for resource in sorted(requested):
        if resource in covered:
            continue
        group = catalog.names_for_resource(resource)
        groups.append(group)
        for name in group:
            amounts[name] = requested[resource]
    return CardDemand(alternatives, tuple(groups), amounts, pod.requests.only(CPU_MEMORY))


def _charged_cpu_memory(demand: CardDemand, args: CapacityCardArgs) -> Resources:
    if args.card_unlimited_cpu_memory and demand.uses_cards:
        return EMPTY
    return demand.cpu_memory


def resolve_charge(
    demand: CardDemand,
    node_cards: NodeCards,
    args: CapacityCardArgs,
    allowed: Mapping[str, bool] | None = None,
) -> Resources:
    """What a pod is charged on a node: cpu, memory and each group's concrete card type (Semantics 1).

    Each group goes to its first candidate the node has and (when ``allowed`` is given, from
    :attr:`TaskCheck.allowed_names`) has quota for; without an allowed one, the first the node has (a
    pod already bound is charged whatever it took). A group the node has no candidate for charges
    nothing: the node cannot run it, or the pod was bound by something that ignored the quota.
    """
    charge = dict(_charged_cpu_memory(demand, args))
    for group in demand.groups:
        present = [name for name in group if node_cards.by_name(name) is not None]
        chosen = next((n for n in present if allowed is None or allowed.get(n, False)), None)
        if chosen is None and present:
            chosen = present[0]
        if chosen is not None:
            charge[chosen] = charge.get(chosen, 0) + demand.amounts[chosen]
    return Resources(charge)


# --------------------------------------------------------------------------------------------------
# Ledger


def split_min(minimum: Mapping[str, int], allocated: Mapping[str, int]) -> tuple[Resources, Resources]:
    """A job's ``(reservation, elastic)``: ``max(0, min - allocated)`` and ``max(0, allocated - min)``.

    Per resource, like Volcano's ``GetInqueueResource`` and ``ExceededPart``, except that a composite
    minimum ``A|B: 4`` is covered by allocations of A and of B (left to right) before any of them
    counts as elastic, so a job asking ``A|B: 4`` that holds ``A: 3, B: 1`` reserves and lends nothing.
    """
    remaining = {k: v for k, v in allocated.items() if v > 0}
    reserve: dict[str, int] = {}
    for key in sorted(minimum, key=is_composite):  # concrete keys first: they can only use their own
        wanted = minimum[key]
        if wanted <= 0:
            continue
        for name in key_alternatives(key) if is_composite(key) else (key,):
            take = min(wanted, remaining.get(name, 0))
            if take:
                remaining[name] -= take
                wanted -= take
        if wanted > 0:
            reserve[key] = wanted
    elastic = {k: v for k, v in remaining.items() if v > 0}
    return Resources(reserve), Resources(elastic)


@dataclass
class _Job:
    """One PodGroup's contribution to its queue's ledger (all amounts in gpuq units)."""

    min_cpu_memory: Resources = EMPTY
    card_request: Resources = EMPTY
    has_min_resources: bool = False
    phase: str = "Pending"
    min_member: int = 0
    pending_cards: Resources = EMPTY
    card_pods: int = 0
    allocated: Resources = EMPTY
    allocated_tasks: int = 0
    inqueue: Resources = EMPTY
    elastic: Resources = EMPTY
    cards_only: bool = False

    @property
    def minimum(self) -> Resources:
        cards = (
            self.pending_cards + self.allocated.without(CPU_MEMORY) if self.card_pods else self.card_request
        )
        cards = cards.nonzero()
        if self.cards_only and cards:
            # cardUnlimitedCpuMemory: a card job neither reserves nor is checked for cpu/memory.
            return cards
        return self.min_cpu_memory + cards

    def contribution(self) -> tuple[Resources, Resources]:
        minimum = self.minimum
        reserve, elastic = split_min(minimum, self.allocated)
        reserving = self.phase == "Inqueue" or (
            self.phase == "Running"
            and (self.has_min_resources or bool(minimum.without(CPU_MEMORY)))
            and self.allocated_tasks >= self.min_member
        )
        return (reserve if reserving else EMPTY), elastic


@dataclass(slots=True)
class _Pod:
    job: str | None
    pending: Resources
    charge: Resources | None = None
    uses_cards: bool = False


class QueueLedger:
    """Per-queue usage: ``allocated``, ``inqueue`` (reserved), ``elastic`` and pending ``requested``.

    Every change is keyed by pod key or PodGroup key and idempotent: :meth:`allocate` twice charges
    once, :meth:`deallocate` of an uncharged pod is a no-op, so replaying bound pods after a restart
    or a re-list never double-counts (DESIGN.md "Data flow"). Totals are kept incrementally; each
    operation costs O(resources of the job), not O(pods in the queue).
    """

    def __init__(self, name: str, *, card_unlimited_cpu_memory: bool = False) -> None:
        self.name = name
        self.card_unlimited_cpu_memory = card_unlimited_cpu_memory
        self._jobs: dict[str, _Job] = {}
        self._pods: dict[str, _Pod] = {}
        self._allocated: dict[str, int] = {}
        self._inqueue: dict[str, int] = {}
        self._elastic: dict[str, int] = {}
        self._pending: dict[str, int] = {}

    # -- totals

    @property
    def allocated(self) -> Resources:
        """Charged to bound pods: cpu, memory, concrete card types."""
        return Resources(self._allocated).nonzero()

    @property
    def allocated_amounts(self) -> Mapping[str, int]:
        """:attr:`allocated` without building a :class:`Resources` (no zero entries; read-only view)."""
        return self._allocated

    @property
    def inqueue(self) -> Resources:
        """Reserved by admitted jobs and not yet allocated (composite keys for ``A|B`` reservations)."""
        return Resources(self._inqueue).nonzero()

    @property
    def elastic(self) -> Resources:
        return Resources(self._elastic).nonzero()

    @property
    def pending(self) -> Resources:
        """Card requests of tracked, unbound pods (composite keys for ``A|B`` pods)."""
        return Resources(self._pending).nonzero()

    def charge_of(self, pod_key: str) -> Resources | None:
        entry = self._pods.get(pod_key)
        return None if entry is None else entry.charge

    def job_minimum(self, job_key: str) -> Resources | None:
        job = self._jobs.get(job_key)
        return None if job is None else job.minimum

    def __contains__(self, pod_key: object) -> bool:
        return pod_key in self._pods

    # -- jobs

    def set_job(
        self,
        job_key: str,
        *,
        min_cpu_memory: Resources,
        card_request: Resources,
        has_min_resources: bool,
        phase: str,
        min_member: int,
    ) -> None:
        """Add or update a PodGroup (its pods may have been tracked before it arrived)."""
        job = self._job(job_key)
        self._update_job(
            job,
            min_cpu_memory=min_cpu_memory,
            card_request=card_request,
            has_min_resources=has_min_resources,
            phase=phase,
            min_member=min_member,
        )

    def set_phase(self, job_key: str, phase: str) -> None:
        """E.g. Pending -> Inqueue once :func:`check_enqueue` admitted the job: its reservation starts."""
        self._update_job(self._job(job_key), phase=phase)

    def remove_job(self, job_key: str) -> None:
        """Forget a PodGroup's minimum and reservation; its pods' charges stay until they go."""
        job = self._jobs.get(job_key)
        if job is None:
            return
        self._update_job(job, min_cpu_memory=EMPTY, card_request=EMPTY, has_min_resources=False, phase="")
        if not any(entry.job == job_key for entry in self._pods.values()):
            del self._jobs[job_key]

    # -- pods

    def track(self, pod_key: str, job_key: str | None, pending: Resources, *, uses_cards: bool) -> None:
        """Record an unbound pod and its card request keys (``CardDemand.pending``)."""
        entry = self._pods.get(pod_key)
        if entry is not None and entry.charge is not None:
            return
        if entry is not None:
            self._remove_entry(pod_key)
        self._add_entry(pod_key, _Pod(job_key, pending, None, uses_cards))

    def allocate(self, pod_key: str, charge: Resources, job_key: str | None = None) -> bool:
        """Charge a pod; False (and nothing changes) if it is already charged."""
        entry = self._pods.get(pod_key)
        if entry is not None and entry.charge is not None:
            return False
        if entry is None:
            entry = _Pod(job_key, EMPTY, None, bool(charge.without(CPU_MEMORY)))
        elif entry.job is None:
            # The Reserve of a tracked jobless pod: move its request from pending to allocated in
            # place (no job totals to update, and no entry to rebuild).
            _add(self._pending, entry.pending, -1)
            entry.charge = charge
            _add(self._allocated, charge, +1)
            return True
        else:
            self._remove_entry(pod_key)
        self._add_entry(pod_key, _Pod(entry.job, entry.pending, charge, entry.uses_cards))
        return True

    def deallocate(self, pod_key: str) -> Resources | None:
        """Release a pod's charge (Unreserve, preemption); it stays tracked as pending. No-op if uncharged."""
        entry = self._pods.get(pod_key)
        if entry is None or entry.charge is None:
            return None
        self._remove_entry(pod_key)
        self._add_entry(pod_key, _Pod(entry.job, entry.pending, None, entry.uses_cards))
        return entry.charge

    def forget(self, pod_key: str) -> Resources | None:
        """A pod is gone or finished: release its charge and its pending request. Returns the charge."""
        entry = self._pods.get(pod_key)
        if entry is None:
            return None
        self._remove_entry(pod_key)
        if entry.job is not None and entry.job in self._jobs:
            job = self._jobs[entry.job]
            if job.phase == "" and not any(e.job == entry.job for e in self._pods.values()):
                self._apply(job, -1)
                del self._jobs[entry.job]
        return entry.charge

    # -- internals

    def _job(self, job_key: str) -> _Job:
        job = self._jobs.get(job_key)
        if job is None:
            job = self._jobs[job_key] = _Job(phase="", cards_only=self.card_unlimited_cpu_memory)
        return job

    def _update_job(self, job: _Job, **changes: Any) -> None:
        self._apply(job, -1)
        for name, value in changes.items():
            setattr(job, name, value)
        job.inqueue, job.elastic = job.contribution()
        self._apply(job, +1)

    def _apply(self, job: _Job, sign: int) -> None:
        _add(self._inqueue, job.inqueue, sign)
        _add(self._elastic, job.elastic, sign)

    def _add_entry(self, pod_key: str, entry: _Pod) -> None:
        self._pods[pod_key] = entry
        self._entry_delta(entry, +1)

    def _remove_entry(self, pod_key: str) -> None:
        entry = self._pods.pop(pod_key)
        self._entry_delta(entry, -1)

    def _entry_delta(self, entry: _Pod, sign: int) -> None:
        if entry.charge is not None:
            _add(self._allocated, entry.charge, sign)
        else:
            _add(self._pending, entry.pending, sign)
        if entry.job is None:
            return
        job = self._job(entry.job)
        self._apply(job, -1)
        if entry.charge is not None:
            job.allocated = _plus(job.allocated, entry.charge, sign)
            job.allocated_tasks += sign
        else:
            job.pending_cards = _plus(job.pending_cards, entry.pending, sign)
        if entry.uses_cards:
            job.card_pods += sign
        job.inqueue, job.elastic = job.contribution()
        self._apply(job, +1)


def _add(total: dict[str, int], amounts: Mapping[str, int], sign: int) -> None:
    # Mapping.items() on a Resources goes through __iter__ and __getitem__ per key: read its dict.
    items = amounts._amounts.items() if type(amounts) is Resources else amounts.items()
    for key, value in items:
        new = total.get(key, 0) + sign * value
        if new:
            total[key] = new
        else:
            total.pop(key, None)


def _plus(a: Resources, b: Mapping[str, int], sign: int) -> Resources:
    return (a + b if sign > 0 else a - b).nonzero()


def job_min_from_podgroup(group: PodGroup) -> tuple[Resources, Resources, EventRecord | None]:
    """``(min cpu/memory, card.request)`` of a PodGroup; a malformed card.request is a Warning and 0."""
    min_cpu_memory = (group.spec.minResources or EMPTY).only(CPU_MEMORY)
    text = group.annotations.get(CARD_REQUEST)
    if text is None:
        return min_cpu_memory, EMPTY, None
    try:
        return min_cpu_memory, parse_card_request(text, group.ref), None
    except InvalidAnnotation as err:
        message = f"{err}; card request treated as 0 until the annotation is fixed"
        return min_cpu_memory, EMPTY, EventRecord(group.ref, "Warning", INVALID_ANNOTATION, message)


# --------------------------------------------------------------------------------------------------
# Job mode: the enqueue check


def check_enqueue(
    quota: QueueQuota,
    ledger: QueueLedger,
    minimum: Resources,
    args: CapacityCardArgs,
) -> Decision:
    """May a job with this minimum enter the queue? (spec "Job Enqueueable Check", job mode)

    ``to_be_used = allocated + inqueue + minimum - elastic`` against the capability: cpu and memory
    (unless ``cardUnlimitedCpuMemory`` and the job uses cards), then cards. An ``A|B: n`` request is
    checked against the *sum* of the alternatives (spec "Job Mode": queue A100=5, H100=3, allocated
    2+1, ``A100|H100: 4`` -> 7 <= 8 passes). Generalising that sum to other jobs' ``A|B``
    reservations, which upstream ignores, the check is Hall's condition: for every union T of
    alternative sets involving this job, the demands confined to T fit in T's free quota. With no
    composite reservation in the queue this is exactly upstream's per-key rule.
    """
    if not quota.open:
        return Decision(False, QUEUE_CLOSED, f"Queue//{quota.name} is closed: it admits no new jobs")
    cards = minimum.without(CPU_MEMORY).nonzero()
    if not quota.configured and not minimum.nonzero().is_zero():
        return _empty_capability(quota)
    if not (args.card_unlimited_cpu_memory and cards):
        for resource, reason in ((CPU, INSUFFICIENT_CPU_QUOTA), (MEMORY, INSUFFICIENT_MEMORY_QUOTA)):
            asked = minimum.amount(resource)
            used = ledger.allocated.amount(resource) + ledger.inqueue.amount(resource)
            used -= ledger.elastic.amount(resource)
            limit = quota.capability.amount(resource)
            if asked > 0 and used + asked > limit:
                return _refuse(reason, _exceeded(quota.name, resource, asked, used, limit))
    if cards:
        return _check_cards_job_mode(quota, ledger, cards)
    return ALLOW


def _empty_capability(quota: QueueQuota) -> Decision:
    message = (
        f"Queue//{quota.name} has no capability: set spec.capability (cpu, memory) or the "
        f"{CARD_QUOTA} annotation"
    )
    return Decision(False, EMPTY_QUEUE_CAPABILITY, message)


def _check_cards_job_mode(quota: QueueQuota, ledger: QueueLedger, request: Resources) -> Decision:
    allocated, inqueue, elastic = ledger.allocated, ledger.inqueue, ledger.elastic

    def used(name: str) -> int:
        return allocated.amount(name) + inqueue.amount(name) - elastic.amount(name)

    new = [(frozenset(key_alternatives(k)), k, v) for k, v in sorted(request.items())]
    reserved = [(frozenset(key_alternatives(k)), v) for k, v in sorted(inqueue.items()) if is_composite(k)]
    new_sets = sorted({s for s, _, _ in new}, key=sorted)
    other_sets = sorted({s for s, _ in reserved} - set(new_sets), key=sorted)

    unions: list[frozenset[str]] = []
    if len(new_sets) + len(other_sets) <= _MAX_EXACT_SETS:
        for n in range(1, len(new_sets) + 1):
            for chosen in combinations(new_sets, n):
                core = frozenset().union(*chosen)
                for m in range(len(other_sets) + 1):
                    for extra in combinations(other_sets, m):
                        unions.append(core.union(*extra))
    else:
        unions = list(new_sets)
    seen: set[frozenset[str]] = set()
    # Smallest unions first, so the refusal names the tightest set (usually the requested key itself).
    for union in sorted(unions, key=lambda u: (len(u), sorted(u))):
        if union in seen:
            continue
        seen.add(union)
        asked = sum(v for s, _, v in new if s <= union)
        if asked <= 0:
            continue
        held = sum(v for s, v in reserved if s <= union)
        base = sum(used(name) for name in union) + held
        limit = sum(quota.capability.amount(name) for name in union)
        if base + asked > limit:
            keys = [k for s, k, _ in new if s <= union]
            name = keys[0] if len(keys) == 1 and frozenset(key_alternatives(keys[0])) == union else None
            resource = name or card_key(sorted(union))
            return _refuse(INSUFFICIENT_SCALAR_QUOTA, _exceeded(quota.name, resource, asked, base, limit))
    return ALLOW


# --------------------------------------------------------------------------------------------------
# Task mode: the per-node quota filter


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
    the pod and ``messages[c]`` why not; ``groups`` are the demand's candidate ids per charge.
    :meth:`filter_nodes` applies it to all nodes at once. A pod without cards has no groups and
    passes every node once cpu and memory passed.
    """

    queue: str
    demand: CardDemand
    card_names: tuple[str, ...] = ()
    groups: tuple[npt.NDArray[np.intp], ...] = ()
    allowed: BoolArray = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))
    messages: tuple[str, ...] = ()
    decisions: Mapping[str, Decision] = field(default_factory=dict)
    failure: Decision | None = None

    @property
    def ok(self) -> bool:
        """Some node could take the pod as far as quota goes (the webhook's question)."""
        if self.failure is not None:
            return False
        return all(bool(self.allowed[ids].any()) for ids in self.groups)

    @property
    def allowed_names(self) -> dict[str, bool]:
        """Card type name -> has quota left, for every candidate of the pod."""
        return {name: decision.ok for name, decision in self.decisions.items()}

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
        for ids in self.groups:
            present = has[:, ids]
            passes = (present & self.allowed[ids]).any(axis=1)
            failing = mask & ~passes
            if failing.any():
                none_code = len(reasons)
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
    nodes whose card type passed (DESIGN.md Semantics 1). cpu and memory are checked first
    (``allocated + request <= capability``) unless ``cardUnlimitedCpuMemory`` and the pod uses cards.
    """
    count = len(catalog.names)
    base = TaskCheck(quota.name, demand, catalog.names)
    if not quota.open:
        message = f"Queue//{quota.name} is closed: it takes no new pods"
        return _with_failure(base, Decision(False, QUEUE_CLOSED, message))
    charged = _charged_cpu_memory(demand, args)
    if not quota.configured and (demand.uses_cards or not charged.nonzero().is_zero()):
        return _with_failure(base, _empty_capability(quota))
    for resource, reason in ((CPU, INSUFFICIENT_CPU_QUOTA), (MEMORY, INSUFFICIENT_MEMORY_QUOTA)):
        asked = charged.amount(resource)
        used = ledger.allocated_amounts.get(resource, 0)
        limit = quota.capability.amount(resource)
        if asked > 0 and used + asked > limit:
            return _with_failure(base, _refuse(reason, _exceeded(quota.name, resource, asked, used, limit)))
    allowed = np.zeros(count, dtype=np.bool_)
    messages = [""] * count
    decisions: dict[str, Decision] = {}
    groups: list[npt.NDArray[np.intp]] = []
    allocated = ledger.allocated_amounts
    for group in demand.groups:
        ids = []
        for name in group:
            index = catalog.id_of(name)
            if index is None:
                continue
            ids.append(index)
            asked = demand.amounts[name]
            used = allocated.get(name, 0)
            limit = quota.capability.amount(name)
            if used + asked <= limit:
                decision = ALLOW
                allowed[index] = True
            else:
                decision = _refuse(INSUFFICIENT_SCALAR_QUOTA, _exceeded(quota.name, name, asked, used, limit))
                messages[index] = decision.message
            decisions[name] = decision
        groups.append(np.array(ids, dtype=np.intp))
    return TaskCheck(quota.name, demand, catalog.names, tuple(groups), allowed, tuple(messages), decisions)


def _with_failure(check: TaskCheck, failure: Decision) -> TaskCheck:
    return TaskCheck(check.queue, check.demand, check.card_names, failure=failure)


def unrestricted_check(queue: str, demand: CardDemand = CardDemand()) -> TaskCheck:
    """For a pod whose queue does not exist (Semantics 7: not subject to queue quotas)."""
    return TaskCheck(queue, demand)


def task_quota_refusal(
    quota: QueueQuota,
    demand: CardDemand,
    catalog: CardCatalog,
    args: CapacityCardArgs,
    allocated: Mapping[str, int] = EMPTY,
) -> Decision | None:
    """Scalar :func:`check_task` for admission: None exactly when ``check_task(...).ok``, else why not.

    Same rules (spec "Task Allocatable Check", DESIGN.md Semantics 1) without the per-node arrays the
    scheduler needs: the webhook asks one question per review, whether *some* node could take the pod
    as far as quota goes. A refusal is the closed-queue, empty-capability or cpu/memory decision
    :func:`check_task` reports as ``failure``, else an ``InsufficientScalarQuota`` decision naming the
    candidates and why each refused candidate has no quota left.
    """
    if not quota.open:
        return Decision(False, QUEUE_CLOSED, f"Queue//{quota.name} is closed: it takes no new pods")
    charged = _charged_cpu_memory(demand, args)
    if not quota.configured and (demand.uses_cards or not charged.nonzero().is_zero()):
        return _empty_capability(quota)
    capability = quota.capability
    for resource, reason in ((CPU, INSUFFICIENT_CPU_QUOTA), (MEMORY, INSUFFICIENT_MEMORY_QUOTA)):
        asked = charged.amount(resource)
        used = allocated.get(resource, 0)
        limit = capability.amount(resource)
        if asked > 0 and used + asked > limit:
            return _refuse(reason, _exceeded(quota.name, resource, asked, used, limit))
    ok = True
    judged: dict[str, Decision] = {}  # in first-seen order, as check_task's decisions
    for group in demand.groups:
        passes = False
        for name in group:
            if catalog.id_of(name) is None:
                continue
            asked = demand.amounts[name]
            used = allocated.get(name, 0)
            limit = capability.amount(name)
            if used + asked <= limit:
                passes = True
                judged.setdefault(name, ALLOW)
            elif name not in judged:
                error = _exceeded(quota.name, name, asked, used, limit)
                judged[name] = _refuse(INSUFFICIENT_SCALAR_QUOTA, error)
        ok = ok and passes
    if ok:
        return None
    refused = [d for d in judged.values() if not d.ok]
    candidates = "|".join(demand.alternatives or tuple(judged))
    message = f"no card type among {candidates} has quota for the pod: " + "; ".join(
        d.message for d in refused
    )
    return Decision(False, INSUFFICIENT_SCALAR_QUOTA, message, refused[0].error if refused else None)


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
        charged = _charged_cpu_memory(demand, args)
        capability = quota.capability
        self._fixed: TaskCheck | None = None
        if not quota.open or (
            not quota.configured and (demand.uses_cards or not charged.nonzero().is_zero())
        ):
            # Refused before any usage is read: the same check whatever the ledger holds.
            self._fixed = check_task(quota, QueueLedger(quota.name), demand, catalog, args)
        self._limits = tuple(
            (resource, charged.amount(resource), capability.amount(resource))
            for resource in CPU_MEMORY
            if charged.amount(resource) > 0
        )
        self.candidates = tuple(
            (name, demand.amounts[name], capability.amount(name))
            for group in demand.groups
            for name in group
            if catalog.id_of(name) is not None
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


# --------------------------------------------------------------------------------------------------
# Node ordering


def card_type_scores(alternatives: Sequence[str], catalog: CardCatalog, weight: float) -> FloatArray:
    """Per card type id: ``100 * 0.5**i * nodeOrderWeight`` for the i-th alternative, else 0.

    spec "Node Ordering": only multi-card requests (two or more alternatives) score; ``i`` counts
    every alternative as written, including ones no node has.
    """
    scores = np.zeros(len(catalog.names), dtype=np.float64)
    if len(alternatives) < 2:
        return scores
    for i, name in reversed(list(enumerate(alternatives))):
        index = catalog.id_of(name)
        if index is not None:
            scores[index] = BASE_SCORE * 0.5**i * weight
    return scores


def node_order_scores(
    alternatives: Sequence[str], catalog: CardCatalog, has: BoolArray, weight: float
) -> FloatArray:
    """The "Node Ordering" score of every node: its most preferred alternative's score, else 0."""
    per_card = card_type_scores(alternatives, catalog, weight)
    if not per_card.any() or has.shape[0] == 0:
        return np.zeros(has.shape[0], dtype=np.float64)
    result: FloatArray = (has * per_card).max(axis=1)
    return result


def node_order_score(alternatives: Sequence[str], node_cards: NodeCards, weight: float) -> float:
    """Scalar form of :func:`node_order_scores` for one node (200/100/50 with weight 2.0)."""
    if len(alternatives) < 2:
        return 0.0
    for i, name in enumerate(alternatives):
        if node_cards.by_name(name) is not None:
            return BASE_SCORE * 0.5**i * weight
    return 0.0


# --------------------------------------------------------------------------------------------------
# Metrics and share


@dataclass(frozen=True, slots=True)
class QueueCardMetric:
    """One ``volcano_queue_card_*{queue_name, card_name}`` sample set, in cards (not milli)."""

    queue: str
    card: str
    capacity: float
    allocated: float
    request: float
    deserved: float


def deserved_cards(quotas: Iterable[QueueQuota]) -> dict[str, Resources]:
    """Per queue: the card types it deserves, which is its card quota.

    Upstream puts the card quota in a queue's capability, guarantee *and* deserved, so
    ``deserved = min(realCapability, max(guarantee, deserved))`` with ``realCapability =
    max(0, cluster - all guarantees) + guarantee >= quota`` always comes out as the quota. Kept as a
    function so the metric has one definition should hierarchical queues change it (spec "Future Work").
    """
    return {quota.name: quota.cards for quota in quotas}


def queue_share(ledger: QueueLedger, deserved: Mapping[str, int]) -> float:
    """``max(allocated / deserved)`` over the card types the queue deserves (spec "Resource Tracking").

    As Volcano's ``helpers.Share``: a deserved 0 with something allocated counts as 1.
    """
    share = 0.0
    allocated = ledger.allocated
    for name, amount in deserved.items():
        used = allocated.amount(name)
        share = max(share, used / amount if amount > 0 else (1.0 if used > 0 else 0.0))
    return share


def queue_card_metrics(
    quota: QueueQuota, ledger: QueueLedger, deserved: Mapping[str, int]
) -> list[QueueCardMetric]:
    """The card metrics of one queue, sorted by card name.

    capacity = the card quota; allocated = charged to bound pods; request = allocated + the card
    requests of unbound pods (upstream's ``request``: allocated and pending tasks; an unbound ``A|B``
    pod appears under ``A|B``); deserved = :func:`deserved_cards`.
    """
    cards = quota.cards
    allocated = ledger.allocated.without(CPU_MEMORY)
    request = allocated + ledger.pending
    names = sorted(set(cards) | set(allocated) | set(request))
    return [
        QueueCardMetric(
            quota.name,
            name,
            cards.amount(name) / CARD_UNIT,
            allocated.amount(name) / CARD_UNIT,
            request.amount(name) / CARD_UNIT,
            deserved.get(name, 0) / CARD_UNIT,
        )
        for name in names
    ]


# --------------------------------------------------------------------------------------------------
# The engine over cluster state


@dataclass(slots=True)
class _PodState:
    pod: PodInfo
    queue: str
    job: str | None
    demand: CardDemand | None
    error: InvalidValue | None


class CapacityCard:
    """The capacity-card plugin's state: catalog, queue quotas, ledgers, and the decisions over them.

    The scheduler (and ``gpuq simulate``) feeds it informer events (:meth:`set_nodes`,
    :meth:`set_queue`, :meth:`set_podgroup`, :meth:`set_pod` and the removals) and asks it for
    :meth:`enqueue`, :meth:`task_check`, :meth:`node_order_scores`; Reserve / Unreserve call
    :meth:`allocate` / :meth:`deallocate`. Usage is derived from pods only, so :meth:`rebuild` after a
    restart or re-list reproduces the same ledgers. Warning events for malformed objects accumulate
    in :meth:`take_events`.
    """

    def __init__(self, args: CapacityCardArgs | None = None) -> None:
        self.args = args or CapacityCardArgs()
        self.catalog = CardCatalog()
        self.nodes: dict[str, NodeCards] = {}
        self.quotas: dict[str, QueueQuota] = {}
        self.ledgers: dict[str, QueueLedger] = {}
        self.podgroups: dict[str, PodGroup] = {}
        self._pods: dict[str, _PodState] = {}
        self._events: list[EventRecord] = []
        # Memos over the current catalog (cleared by set_nodes). Demands are shared by pods of the same
        # requests and card.name, so plans and charges can be keyed by the demand's identity; each
        # entry holds its key objects, and a hit compares them with ``is``, so a recycled id never
        # matches.
        self._demands: dict[tuple[Resources, str | None], CardDemand] = {}
        self._plans: dict[tuple[int, int], TaskPlan] = {}
        self._node_names: dict[str, frozenset[str]] = {}
        self._name_sets: dict[frozenset[str], frozenset[str]] = {}
        self._charges: dict[
            tuple[int, int, frozenset[str]], tuple[CardDemand, TaskCheck | None, Resources]
        ] = {}

    @classmethod
    def rebuild(
        cls,
        args: CapacityCardArgs,
        nodes_cards: Iterable[NodeCards],
        queues: Iterable[Queue],
        podgroups: Iterable[PodGroup],
        pods: Iterable[PodInfo],
    ) -> CapacityCard:
        """Derive all state from a full listing (start-up, re-list)."""
        engine = cls(args)
        engine.set_nodes(nodes_cards)
        for group in podgroups:
            engine.podgroups[group.key] = group
        for queue in queues:
            engine.set_queue(queue)
        for pod in pods:
            engine.set_pod(pod)
        return engine

    # -- events

    def take_events(self) -> list[EventRecord]:
        events, self._events = self._events, []
        return events

    # -- informer updates

    def set_nodes(self, nodes_cards: Iterable[NodeCards]) -> None:
        """Replace the node card inventory; replays every pod (demands and charges depend on it).

        Call it when a node's cards change (labels, allocatable of a card resource), not on every
        status heartbeat; :class:`NodeCards` compares by value for that.
        """
        self.nodes = {n.node: n for n in nodes_cards}
        catalog = CardCatalog.build(self.nodes.values())
        for node_cards in self.nodes.values():
            self._events.extend(node_cards.events())
        self._events.extend(
            EventRecord(p.where or "Node//", "Warning", INVALID_ANNOTATION, str(p)) for p in catalog.problems
        )
        self.catalog = catalog
        self._demands.clear()
        self._plans.clear()
        self._node_names.clear()
        self._name_sets.clear()
        self._charges.clear()
        self._replay()

    def set_queue(self, queue: Queue) -> None:
        quota = queue_quota(queue)
        previous = self.quotas.get(queue.name)
        if previous is not None and previous == quota:
            # A status write or an unrelated edit: keep the object, whose identity keys the task plans.
            quota = previous
        self.quotas[queue.name] = quota
        if previous is None or previous.events != quota.events:
            self._events.extend(quota.events)
        if queue.name not in self.ledgers:
            self._replay_queue(queue.name)

    def remove_queue(self, name: str) -> None:
        self.quotas.pop(name, None)
        self.ledgers.pop(name, None)

    def set_podgroup(self, group: PodGroup) -> None:
        previous = self.podgroups.get(group.key)
        self.podgroups[group.key] = group
        ledger = self.ledgers.get(group.queue)
        if ledger is not None:
            self._set_job(ledger, group)
        if previous is None or previous.queue != group.queue:
            # Its pods were accounted before the group existed (jobless) or in its old queue.
            if previous is not None and previous.queue in self.ledgers:
                self.ledgers[previous.queue].remove_job(group.key)
            self._reroute(group.key)

    def remove_podgroup(self, key: str) -> None:
        group = self.podgroups.pop(key, None)
        if group is not None and group.queue in self.ledgers:
            self.ledgers[group.queue].remove_job(key)
        if group is not None:
            self._reroute(key)

    def set_pod(self, pod: PodInfo) -> None:
        """Add or update a pod: pending pods are tracked, bound ones charged, finished ones forgotten.

        An update still showing a pod unbound after :meth:`allocate` (binding in flight) keeps the
        charge: only :meth:`deallocate` (Unreserve) or the pod's end releases it.
        """
        key = pod.key
        old = self._pods.get(key)
        if pod.terminal:
            self.remove_pod(pod)
            return
        queue = queue_of(pod, self.podgroups)
        if old is not None and old.pod.node_name and not pod.node_name and old.queue == queue:
            return
        if old is not None and (old.queue != queue or old.pod.node_name != pod.node_name):
            self.remove_pod(old.pod)
        state = self._pod_state(pod, queue)
        self._pods[key] = state
        ledger = self.ledgers.get(queue)
        if ledger is not None:
            self._account(ledger, state)

    def remove_pod(self, pod: PodInfo) -> None:
        state = self._pods.pop(pod.key, None)
        if state is not None and state.queue in self.ledgers:
            self.ledgers[state.queue].forget(pod.key)

    # -- decisions

    def enqueue(self, group: PodGroup) -> Decision:
        """Job mode check for a Pending PodGroup; the caller then records the phase with :meth:`admit`.

        A PodGroup whose Queue does not exist is allowed (Semantics 7); one whose pods' requests cannot
        be read is refused with ``GetTaskRequestResourceFailed``.
        """
        quota = self.quotas.get(group.queue)
        ledger = self.ledgers.get(group.queue)
        if quota is None or ledger is None:
            return ALLOW
        for state in self._pods.values():
            if state.job == group.key and state.error is not None:
                return _refuse(GET_TASK_REQUEST_RESOURCE_FAILED, state.error)
        minimum = ledger.job_minimum(group.key)
        if minimum is None:
            min_cpu_memory, card_request, _ = job_min_from_podgroup(group)
            minimum = min_cpu_memory + card_request
        return check_enqueue(quota, ledger, minimum, self.args)

    def admit(self, group: PodGroup) -> None:
        """The PodGroup went Pending -> Inqueue: reserve its minimum in its queue."""
        admitted = group.model_copy(update={"status": group.status.model_copy(update={"phase": "Inqueue"})})
        self.set_podgroup(admitted)

    def task_check(self, pod: PodInfo) -> TaskCheck:
        """Task mode verdicts for a pending pod (tracked or not)."""
        state = self._pods.get(pod.key)
        if state is not None and state.pod is pod:
            queue = state.queue
        else:
            queue = queue_of(pod, self.podgroups)
            state = self._known_pod_state(pod, queue)
        quota = self.quotas.get(queue)
        ledger = self.ledgers.get(queue)
        if quota is None or ledger is None:
            return unrestricted_check(queue, state.demand or CardDemand())
        if state.error is not None or state.demand is None:
            error = state.error or InvalidValue("pod", pod.ref, "a readable card request", pod.ref)
            check = TaskCheck(queue, CardDemand(), self.catalog.names)
            return _with_failure(check, _refuse(GET_TASK_REQUEST_RESOURCE_FAILED, error))
        return self._plan(quota, state.demand).check(ledger)

    def queue_of(self, pod: PodInfo) -> str:
        """:func:`~common.model.queues.queue_of` against the known PodGroups; for the tracked pod
        object itself, the queue its state holds, which is the same: :meth:`set_podgroup` and
        :meth:`remove_podgroup` re-route the pods of a group whenever its queue could change."""
        state = self._pods.get(pod.key)
        if state is not None and state.pod is pod:
            return state.queue
        return queue_of(pod, self.podgroups)

    def _plan(self, quota: QueueQuota, demand: CardDemand) -> TaskPlan:
        key = (id(quota), id(demand))
        plan = self._plans.get(key)
        if plan is None or plan.quota is not quota or plan.demand is not demand:
            if len(self._plans) >= _MAX_MEMO:
                self._plans.clear()
            plan = self._plans[key] = TaskPlan(quota, demand, self.catalog, self.args)
        return plan

    def node_order_scores(self, pod: PodInfo, has: BoolArray) -> FloatArray:
        text = pod.annotations.get(CARD_NAME)
        if text is None:
            return np.zeros(has.shape[0], dtype=np.float64)
        try:
            alternatives = parse_card_names(text, pod.ref)
        except InvalidAnnotation:
            return np.zeros(has.shape[0], dtype=np.float64)
        return node_order_scores(alternatives, self.catalog, has, self.args.node_order_weight)

    def allocate(self, pod: PodInfo, node_name: str, check: TaskCheck | None = None) -> Resources:
        """Reserve: charge the pod in its queue for the card type of ``node_name``. Idempotent."""
        bound = pod.with_node_name(node_name)
        old = self._pods.get(pod.key)
        if (
            old is not None
            and old.pod.annotations is bound.annotations
            and old.pod.requests is bound.requests
            and old.pod.uid == bound.uid
        ):
            # The tracked pod, bound (Reserve): its queue, job and demand read only the annotations
            # and requests, and the tracked state keeps them current (see queue_of).
            queue = old.queue
            state = _PodState(bound, queue, old.job, old.demand, old.error)
        else:
            queue = queue_of(bound, self.podgroups)
            state = self._known_pod_state(bound, queue)
        self._pods[pod.key] = state
        ledger = self.ledgers.get(queue)
        if ledger is None or state.demand is None:
            return EMPTY
        charge = self._charge(state.demand, node_name, check)
        if not ledger.allocate(pod.key, charge, state.job):
            return ledger.charge_of(pod.key) or EMPTY
        return charge

    def deallocate(self, pod: PodInfo) -> Resources | None:
        """Unreserve / preemption: release the pod's charge (no-op if it holds none); it stays pending."""
        state = self._pods.get(pod.key)
        if state is None or state.queue not in self.ledgers:
            return None
        released = self.ledgers[state.queue].deallocate(pod.key)
        unbound = state.pod.with_node_name("")
        self._pods[pod.key] = _PodState(unbound, state.queue, state.job, state.demand, state.error)
        return released

    def charged_card_type(self, pod: PodInfo) -> str | None:
        """The concrete card type a pod is charged to (the simulator's ``cardType``)."""
        state = self._pods.get(pod.key)
        ledger = self.ledgers.get(state.queue) if state is not None else None
        charge = ledger.charge_of(pod.key) if ledger is not None else None
        if not charge:
            return None
        return next((name for name in sorted(charge) if name not in CPU_MEMORY), None)

    # -- metrics

    def metrics(self) -> list[QueueCardMetric]:
        deserved = deserved_cards(self.quotas.values())
        samples: list[QueueCardMetric] = []
        for name in sorted(self.quotas):
            samples.extend(queue_card_metrics(self.quotas[name], self.ledgers[name], deserved[name]))
        return samples

    def shares(self) -> dict[str, float]:
        deserved = deserved_cards(self.quotas.values())
        return {name: queue_share(self.ledgers[name], deserved[name]) for name in sorted(self.quotas)}

    # -- internals

    def _charge(self, demand: CardDemand, node_name: str, check: TaskCheck | None) -> Resources:
        """``resolve_charge`` on ``node_name`` with ``check``'s verdicts, memoised: it reads only the
        demand, the verdicts and which card types the node has."""
        names = self._node_names.get(node_name)
        if names is None:
            node = self.nodes.get(node_name)
            names = frozenset(node.names) if node is not None else frozenset()
            # One object per distinct set, so the memo key below compares by identity.
            names = self._name_sets.setdefault(names, names)
            if len(self._node_names) >= _MAX_NODE_MEMO:
                self._node_names.clear()
            self._node_names[node_name] = names
        key = (id(demand), id(check), names)
        memo = self._charges.get(key)
        if memo is not None and memo[0] is demand and memo[1] is check:
            return memo[2]
        allowed = check.allowed_names if check is not None else None
        charge = resolve_charge(demand, self.nodes.get(node_name, NodeCards(node_name)), self.args, allowed)
        if len(self._charges) >= _MAX_MEMO:
            self._charges.clear()
        self._charges[key] = (demand, check, charge)
        return charge

    def _demand(self, pod: PodInfo) -> CardDemand:
        """``pod_card_demand``, shared by pods with the same requests and ``card.name``: it reads
        nothing else of the pod but its name, and that only in the error it raises (never memoised)."""
        key = (pod.requests, pod.annotations.get(CARD_NAME))
        demand = self._demands.get(key)
        if demand is None:
            demand = pod_card_demand(pod, self.catalog)
            if len(self._demands) >= _MAX_MEMO:
                self._demands.clear()
            self._demands[key] = demand
        return demand

    def _pod_state(self, pod: PodInfo, queue: str) -> _PodState:
        try:
            demand: CardDemand | None = self._demand(pod)
            error = None
        except InvalidValue as err:
            demand, error = None, err
        job = podgroup_key_of(pod)
        if job is not None and job not in self.podgroups:
            job = None
        return _PodState(pod, queue, job, demand, error)

    def _known_pod_state(self, pod: PodInfo, queue: str) -> _PodState:
        """:meth:`_pod_state`, reusing the tracked state's card demand when the pod's inputs to it
        (requests, ``card.name``) are unchanged: every tracked state is derived from the current
        catalog (:meth:`set_nodes` replays them all), so the demand would come out the same."""
        old = self._pods.get(pod.key)
        if old is None:
            return self._pod_state(pod, queue)
        before = old.pod
        if before is not pod and (
            before.uid != pod.uid
            or (before.requests is not pod.requests and before.requests != pod.requests)
            or before.annotations.get(CARD_NAME) != pod.annotations.get(CARD_NAME)
        ):
            return self._pod_state(pod, queue)
        job = podgroup_key_of(pod)
        if job is not None and job not in self.podgroups:
            job = None
        return _PodState(pod, queue, job, old.demand, old.error)

    def _account(self, ledger: QueueLedger, state: _PodState) -> None:
        demand = state.demand or CardDemand()
        if state.pod.node_name:
            node = self.nodes.get(state.pod.node_name, NodeCards(state.pod.node_name))
            charge = resolve_charge(demand, node, self.args)
            ledger.track(state.pod.key, state.job, demand.pending, uses_cards=demand.uses_cards)
            ledger.allocate(state.pod.key, charge, state.job)
        else:
            ledger.track(state.pod.key, state.job, demand.pending, uses_cards=demand.uses_cards)

    def _set_job(self, ledger: QueueLedger, group: PodGroup) -> None:
        min_cpu_memory, card_request, event = job_min_from_podgroup(group)
        if event is not None:
            self._events.append(event)
        ledger.set_job(
            group.key,
            min_cpu_memory=min_cpu_memory,
            card_request=card_request,
            has_min_resources=group.spec.minResources is not None,
            phase=group.phase,
            min_member=group.spec.minMember,
        )

    def _reroute(self, job_key: str) -> None:
        for key in [k for k, state in self._pods.items() if podgroup_key_of(state.pod) == job_key]:
            pod = self._pods[key].pod
            self.remove_pod(pod)
            self.set_pod(pod)

    def _replay(self) -> None:
        pods = [state.pod for state in self._pods.values()]
        self._pods = {}
        self.ledgers = {}
        for pod in pods:
            self._pods[pod.key] = self._pod_state(pod, queue_of(pod, self.podgroups))
        for name in self.quotas:
            self._replay_queue(name)

    def _replay_queue(self, name: str) -> None:
        ledger = QueueLedger(name, card_unlimited_cpu_memory=self.args.card_unlimited_cpu_memory)
        self.ledgers[name] = ledger
        for group in sorted(self.podgroups.values(), key=lambda g: g.key):
            if group.queue == name:
                self._set_job(ledger, group)
        for key in sorted(self._pods):
            state = self._pods[key]
            if state.queue == name:
                self._account(ledger, state)
