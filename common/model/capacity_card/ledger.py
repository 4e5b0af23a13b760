"""A queue's card ledger: what its pods are charged and its admitted jobs reserve (capacity-card.md
"Resource Tracking"; design.md "Data flow", Semantics 1).

Per queue, :class:`QueueLedger` keeps, like Volcano's capacity-card plugin:

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

The pod vocabulary: :meth:`QueueLedger.track` records a pending pod, :meth:`~QueueLedger.reserve`
charges it (Reserve, or a bound pod replayed), :meth:`~QueueLedger.unreserve` returns it to pending
(Unreserve, preemption) and :meth:`~QueueLedger.untrack` drops it (the pod is gone or finished).
A job's ``inqueue`` reservation is upstream's word for what an admitted PodGroup holds before its pods
are charged; it follows from the job's phase and its pods, and no pod operation sets it directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuq_k8s.common.model.capacity_card.quota import CPU_MEMORY
from gpuq_k8s.common.model.cards.names import is_composite, key_alternatives
from gpuq_k8s.common.model.resources import EMPTY, Resources


def split_min(minimum: Mapping[str, int], allocated: Mapping[str, int]) -> tuple[Resources, Resources]:
    """A job's ``(reservation, elastic)``: ``max(0, min - allocated)`` and ``max(0, allocated - min)``.

    Per resource, like Volcano's ``GetInqueueResource`` and ``ExceededPart``, except that a composite
    minimum ``A|B: 4`` is covered by allocations of A and of B (left to right) before any of them
    counts as elastic, so a job asking ``A|B: 4`` that holds ``A: 3, B: 1`` reserves and lends nothing.
    """
    remaining = {k: v for k, v in allocated.items() if v > 0}
    reservation: dict[str, int] = {}
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
            reservation[key] = wanted
    elastic = {k: v for k, v in remaining.items() if v > 0}
    return Resources(reservation), Resources(elastic)


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
        reservation, elastic = split_min(minimum, self.allocated)
        reserving = self.phase == "Inqueue" or (
            self.phase == "Running"
            and (self.has_min_resources or bool(minimum.without(CPU_MEMORY)))
            and self.allocated_tasks >= self.min_member
        )
        return (reservation if reserving else EMPTY), elastic


@dataclass(slots=True)
class _Pod:
    job: str | None
    pending: Resources
    charge: Resources | None = None
    uses_cards: bool = False


class QueueLedger:
    """Per-queue usage: ``allocated``, ``inqueue`` (reserved), ``elastic`` and pending ``requested``.

    Every change is keyed by pod key or PodGroup key and idempotent: :meth:`reserve` twice charges
    once, :meth:`unreserve` of an uncharged pod is a no-op, so replaying bound pods after a restart
    or a re-list never double-counts (design.md "Data flow"). Totals are kept incrementally; each
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
        """E.g. Pending -> Inqueue once the enqueue check admitted the job: its reservation starts."""
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

    def reserve(self, pod_key: str, charge: Resources, job_key: str | None = None) -> bool:
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

    def unreserve(self, pod_key: str) -> Resources | None:
        """Release a pod's charge (Unreserve, preemption); it stays tracked as pending. No-op if uncharged."""
        entry = self._pods.get(pod_key)
        if entry is None or entry.charge is None:
            return None
        self._remove_entry(pod_key)
        self._add_entry(pod_key, _Pod(entry.job, entry.pending, None, entry.uses_cards))
        return entry.charge

    def untrack(self, pod_key: str) -> Resources | None:
        """A pod is gone or finished: release its charge *and* its pending request. Returns the charge.

        Unlike :meth:`unreserve`, which returns a charged pod to pending (it will be scheduled
        again), nothing of the pod stays: it no longer counts towards its job's minimum either, and
        a job already removed goes with its last pod.
        """
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
