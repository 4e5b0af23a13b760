"""The cache debugger: the scheduler's state compared with its informers' caches, on demand.

kube-scheduler's ``pkg/scheduler/backend/cache/debugger``: on SIGUSR2 its ``CacheComparer`` compares
the nodes and pods of its cache and scheduling queue with the informers' listers and logs what one
has and the other lacks, and its ``CacheDumper`` logs the cache's nodes and the queue's pods. gpuq
does the same on the same signal (scheduler/service.py), and also audits the quota ledgers a plugin
keeps from the pods (:class:`LedgerAudit`): a pod charged and no longer bound is a quota that stays
spent, which no comparison of pods alone shows.

What :func:`compare` reports, each line a ``Mismatch`` naming the object:

* **nodes**: in the informer and not a live row of the scheduler (missed), or the other way round
  (redundant);
* **bound pods** holding resources: missed, redundant, or counted on another node. Pods of ours
  assumed on a node whose bind the watch has not shown yet are not mismatches;
* **pending pods** of this scheduler (not finished, not being deleted): missed (the informer has it
  pending, the scheduler neither pending nor bound) or redundant (pending in the scheduler, bound or
  gone in the informer), or never tried: in no queue pool and not held, or held for the enqueue of
  a PodGroup that is not Pending (the enqueue action admits only Pending groups);
* **ledgers**: whatever each :class:`LedgerAudit` plugin reports against the scheduler's bound pods.

Both sides are read in one synchronous step of the event loop (:func:`snapshot`: references to the
informers' objects, which are replaced, never changed, and copies of the scheduler's indexes and
queue, the plugins' ledgers), in which the informers' handlers also run (each change is applied to
the cache and delivered to the scheduler before the next): a difference is not a race of the
comparison, it is state the scheduler lost or kept. The comparison and the dump then work on the
snapshot in steps (:class:`CacheDebugger`, on SIGUSR2: the pods parsed and the lines written
``CHUNK`` at a time, the event loop run between them), so that at 150,000 pods the Lease is still
renewed and the watches read meanwhile (tests/bench/bench_cache_debugger.py measures the longest
stall); :func:`compare` and :func:`dump` run the same steps on a snapshot at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar, runtime_checkable

from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.podgroup_status import PENDING
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cycle import Scheduler

T = TypeVar("T")

# Pods parsed, mismatches or lines written between two turns of the event loop (each turn a few
# milliseconds at most: tests/bench/bench_cache_debugger.py).
CHUNK: Final = 1000


# A ledger's audit against the scheduler's bound pods, in steps (a pause every ``chunk`` pods); its
# result: one line per inconsistency.
AuditSteps = Callable[[Iterable[PodInfo], int], Generator[None, None, list[str]]]


@runtime_checkable
class LedgerAudit(Protocol):
    """A plugin whose quota ledger is kept from pod events and can be checked against the pods."""

    def audit_ledger(self) -> AuditSteps:
        """The audit of a copy of the ledger taken now (later events do not change it)."""
        ...


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One difference: what (``node``, ``pod``, ``pending pod``, ``ledger``), whose, and how."""

    what: str
    name: str
    detail: str

    def __str__(self) -> str:
        return f"{self.what} {self.name}: {self.detail}" if self.name else f"{self.what}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Comparison:
    nodes: int
    pods: int
    unreadable: int  # informer pods that do not parse (the feed warned about each already)
    mismatches: tuple[Mismatch, ...]
    # Pods the scheduler counts on a node that the informer shows pending: waiting in Permit for
    # their gang, or assumed while their bind is in flight (not mismatches: not bound yet).
    assumed: int = 0

    def summary(self) -> str:
        return (
            f"{self.nodes} nodes, {self.pods} pods, {self.unreadable} unreadable, {self.assumed} assumed "
            f"not yet bound, {len(self.mismatches)} mismatch(es)"
        )


@dataclass(frozen=True, slots=True)
class QueuedEntry:
    """A queued pod as the dump shows it."""

    key: str
    pool: str
    attempts: int
    parked_at: float
    message: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Both sides as they stood in one step of the event loop: what :func:`compare` and :func:`dump`
    read (the informers' objects by reference, the scheduler's state copied)."""

    informer_nodes: frozenset[str]
    pod_objects: Sequence[Mapping[str, object]]
    assumed: frozenset[str]
    ours: Callable[[PodInfo], bool]
    counted: Mapping[str, PodInfo]  # the scheduler's pods by key (frozen values)
    node_pods: Sequence[tuple[str, Sequence[PodInfo]]]  # each live node row, with the pods it counts
    pending: frozenset[str]  # the scheduler's pending pods
    queued: Sequence[QueuedEntry]
    held: frozenset[str]  # pods held for their PodGroup's enqueue
    ledgers: Sequence[AuditSteps]  # the LedgerAudit plugins' audits, each of its ledger's copy
    waiting: Mapping[str, tuple[float, list[PodInfo]]]  # gangs waiting in Permit
    # PodGroup, its held pods, why refused, its phase ("" when the group is unknown)
    enqueue_held: Sequence[tuple[str, frozenset[str], str, str]]
    now: float


def snapshot(
    scheduler: Scheduler,
    node_names: Iterable[str],
    pod_objects: Iterable[Mapping[str, object]],
    assumed: Collection[str] = (),
    responsible_for: Callable[[PodInfo], bool] | None = None,
) -> Snapshot:
    """Take both sides at once (``pod_objects`` as cached; ``assumed``: keys of pods bound by this
    scheduler whose bind the watch has not shown yet): copies and references, no parsing, no sorting;
    the ledgers copied for their audits, which run in the comparison's steps."""
    cluster, podgroups = scheduler.cluster, scheduler.podgroups
    counted = dict(cluster.pods)
    refusals, groups = podgroups.enqueue_refusals, podgroups.groups
    return Snapshot(
        informer_nodes=frozenset(node_names),
        pod_objects=list(pod_objects),
        assumed=frozenset(assumed),
        ours=responsible_for or scheduler.responsible_for,
        counted=counted,
        node_pods=[(name, tuple(cluster.pods_on_node(name))) for name in cluster.row_of],
        pending=frozenset(scheduler.pending),
        queued=[
            QueuedEntry(q.pod.key, q.pool, q.attempts, q.parked_at, q.message) for q in scheduler.queue.pods()
        ],
        held=frozenset(key for keys in podgroups.held.values() for key in keys),
        ledgers=[
            plugin.audit_ledger() for plugin in scheduler.framework.plugins if isinstance(plugin, LedgerAudit)
        ],
        waiting=scheduler.framework.waiting.held(),
        enqueue_held=[
            (
                group,
                frozenset(keys),
                refusals.get(group, ""),
                info.phase if (info := groups.get(group)) else "",
            )
            for group, keys in podgroups.held.items()
            if keys
        ],
        now=scheduler.clock(),
    )


def compare(snap: Snapshot) -> Comparison:
    """The scheduler's state against the informers' nodes and pods, at once (:func:`snapshot`)."""
    return finish(compare_steps(snap))


def dump(snap: Snapshot) -> list[str]:
    """The scheduler's view, one line per node with the pods it counts there, then the queue's pools
    (kube-scheduler's CacheDumper: its nodes and the scheduling queue's pods), at once."""
    return list(dump_lines(snap))


def compare_steps(snap: Snapshot) -> Generator[None, None, Comparison]:
    """:func:`compare` on a snapshot, pausing (``yield``) every :data:`CHUNK` pods or mismatches."""
    out: list[Mismatch] = []
    scheduler_nodes = {name for name, _ in snap.node_pods}
    informer_nodes = snap.informer_nodes
    out += [
        Mismatch("node", n, "in the informer, not in the scheduler")
        for n in sorted(informer_nodes - scheduler_nodes)
    ]
    out += [
        Mismatch("node", n, "in the scheduler, gone from the informer")
        for n in sorted(scheduler_nodes - informer_nodes)
    ]
    yield

    bound: dict[str, str] = {}
    pending: set[str] = set()
    unreadable = 0
    ours = snap.ours
    for objects in _slices(snap.pod_objects):
        yield
        for obj in objects:
            try:
                pod = PodInfo.from_dict(obj)
            except GpuqError:
                unreadable += 1
                continue
            if pod.holds_resources:
                bound[pod.key] = pod.node_name
            elif not pod.bound and not pod.terminal and not pod.deleting and ours(pod):
                pending.add(pod.key)
    counted: dict[str, str] = {}
    for pods in _slices(list(snap.counted.items())):
        yield
        counted.update((key, p.node_name) for key, p in pods)
    for missed in _slices(sorted(bound.keys() - counted.keys())):
        yield
        out += [
            Mismatch("pod", key, f"bound to {bound[key]} in the informer, not counted by the scheduler")
            for key in missed
        ]
    in_flight = 0
    for redundant in _slices(sorted(counted.keys() - bound.keys())):
        yield
        for key in redundant:
            if key in snap.assumed or key in pending:
                in_flight += 1  # ours, assumed: its bind not shown by the watch yet
            else:
                out.append(
                    Mismatch(
                        "pod", key, f"counted on {counted[key]} by the scheduler, not bound in the informer"
                    )
                )
    moved: list[str] = []
    for entries in _slices(list(bound.items())):
        yield
        moved += [key for key, node in entries if counted.get(key, node) != node]
    out += [Mismatch("pod", k, f"bound to {bound[k]}, counted on {counted[k]}") for k in sorted(moved)]
    queued = snap.pending
    for key in sorted(pending - queued - counted.keys()):
        out.append(Mismatch("pending pod", key, "pending in the informer, unknown to the scheduler"))
    for key in sorted(queued - pending):
        where = f"bound to {bound[key]}" if key in bound else "gone or finished"
        out.append(Mismatch("pending pod", key, f"pending in the scheduler, {where} in the informer"))
    yield

    in_queue = {entry.key for entry in snap.queued}
    for key in sorted(queued & pending):
        if key not in in_queue and key not in snap.held and key not in counted:
            out.append(
                Mismatch("pending pod", key, "in no queue pool, not held by its PodGroup: never tried")
            )
    for group, held, _, phase in snap.enqueue_held:
        if phase != PENDING:
            # Only a Pending group's pods wait for the enqueue action, which never admits another.
            what = f"which is {phase}" if phase else "which is unknown"
            for key in sorted(held & pending):
                out.append(
                    Mismatch(
                        "pending pod", key, f"held for the enqueue of PodGroup {group}, {what}: never tried"
                    )
                )
    for audit in snap.ledgers:
        lines = yield from audit(snap.counted.values(), CHUNK)
        out += [Mismatch("ledger", "", line) for line in lines]
    return Comparison(len(informer_nodes), len(snap.pod_objects), unreadable, tuple(out), in_flight)


def dump_lines(snap: Snapshot) -> Iterator[str]:
    """:func:`dump` on a snapshot, a line at a time."""
    for name, pods in sorted(snap.node_pods, key=lambda entry: entry[0]):
        counted = sorted(p.key for p in pods)
        yield f"node {name}: {len(counted)} pod(s) counted: {', '.join(counted)}"
    now = snap.now
    pools: dict[str, list[str]] = {}
    for queued in sorted(snap.queued, key=lambda q: q.key):
        parked = f", parked {now - queued.parked_at:.0f}s" if queued.pool == "unschedulable" else ""
        entry = f"{queued.key} ({queued.attempts} attempt(s){parked}: {queued.message or '-'})"
        pools.setdefault(queued.pool or "active", []).append(entry)
    for pool in sorted(pools):
        yield f"queue {pool}: {len(pools[pool])} pod(s): {'; '.join(pools[pool])}"
    for gang, (since, waiting) in snap.waiting.items():
        placed = ", ".join(f"{p.key} on {p.node_name}" for p in waiting)
        yield f"waiting in Permit for gang {gang} ({now - since:.0f}s): {placed}"
    for group, held, refused, _ in sorted(snap.enqueue_held, key=lambda entry: entry[0]):
        why = f" (refused: {refused})" if refused else ""
        yield f"held for the enqueue of PodGroup {group}{why}: {', '.join(sorted(held))}"


def _slices(items: Sequence[T]) -> Iterator[Sequence[T]]:
    """``items`` in slices of :data:`CHUNK` (a pause of the steps before each)."""
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]


def _advance(steps: Generator[None, None, T]) -> tuple[T] | None:
    """One step of ``steps``: None while it goes on; its result (in a 1-tuple) once it has ended."""
    try:
        next(steps)
    except StopIteration as done:
        return (done.value,)
    return None


def finish(steps: Generator[None, None, T]) -> T:
    """Run ``steps`` to its end at once; its result."""
    while (ended := _advance(steps)) is None:
        pass
    return ended[0]


async def finish_cooperatively(steps: Generator[None, None, T]) -> T:
    """Run ``steps`` to its end, the event loop run at each of its pauses; its result."""
    while (ended := _advance(steps)) is None:
        await asyncio.sleep(0)
    return ended[0]


class CacheDebugger:
    """One comparison and dump at a time, as a task of the event loop that gives the loop back between
    steps (scheduler/service.py starts it on SIGUSR2); a signal while one runs is logged and ignored."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, take: Callable[[], Snapshot]) -> asyncio.Task[None] | None:
        """Take the snapshot now and compare and dump it in steps; None when one runs already (or the
        snapshot failed)."""
        if self.running:
            self.log.info("cache debugger already running: this signal is ignored")
            return None
        try:
            snap = take()
        except Exception:
            self.log.exception("cache comparison failed (an error in gpuq)")
            return None
        self._task = asyncio.get_running_loop().create_task(self.run(snap), name="cache-debugger")
        return self._task

    async def run(self, snap: Snapshot) -> None:
        """Log every mismatch (WARNING), the summary, then the dump (INFO), as the synchronous
        :func:`compare` and :func:`dump` would give them."""
        log = self.log
        try:
            found = await finish_cooperatively(compare_steps(snap))
            for i, mismatch in enumerate(found.mismatches, 1):
                log.warning("cache mismatch: %s", mismatch)
                if not i % CHUNK:
                    await asyncio.sleep(0)
            log.info("cache comparison: %s", found.summary())
            for i, line in enumerate(dump_lines(snap), 1):
                log.info("cache dump: %s", line)
                if not i % CHUNK:
                    await asyncio.sleep(0)
        except Exception:
            log.exception("cache comparison failed (an error in gpuq)")
