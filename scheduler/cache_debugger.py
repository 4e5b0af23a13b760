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
  gone in the informer);
* **ledgers**: whatever each :class:`LedgerAudit` plugin reports against the scheduler's bound pods.

Both sides are read in one synchronous step of the event loop, in which the informers' handlers
also run (each change is applied to the cache and delivered to the scheduler before the next): a
difference is not a race of the comparison, it is state the scheduler lost or kept.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cycle import Scheduler


@runtime_checkable
class LedgerAudit(Protocol):
    """A plugin whose quota ledger is kept from pod events and can be checked against the pods."""

    def audit_ledger(self, bound: Iterable[PodInfo]) -> list[str]: ...


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


def compare(
    scheduler: Scheduler,
    node_names: Iterable[str],
    pod_objects: Iterable[Mapping[str, object]],
    assumed: Collection[str] = (),
    responsible_for: Callable[[PodInfo], bool] | None = None,
) -> Comparison:
    """The scheduler's state against the informers' nodes and pods (``pod_objects`` as cached);
    ``assumed``: keys of pods bound by this scheduler whose bind the watch has not shown yet."""
    ours = responsible_for or scheduler.responsible_for
    cluster = scheduler.cluster
    out: list[Mismatch] = []
    informer_nodes = set(node_names)
    scheduler_nodes = set(cluster.row_of)
    out += [
        Mismatch("node", n, "in the informer, not in the scheduler")
        for n in sorted(informer_nodes - scheduler_nodes)
    ]
    out += [
        Mismatch("node", n, "in the scheduler, gone from the informer")
        for n in sorted(scheduler_nodes - informer_nodes)
    ]

    bound: dict[str, str] = {}
    pending: set[str] = set()
    unreadable = 0
    count = 0
    for obj in pod_objects:
        count += 1
        try:
            pod = PodInfo.from_dict(obj)
        except GpuqError:
            unreadable += 1
            continue
        if pod.holds_resources:
            bound[pod.key] = pod.node_name
        elif not pod.bound and not pod.terminal and not pod.deleting and ours(pod):
            pending.add(pod.key)
    counted = {key: pod.node_name for key, pod in cluster.pods.items()}
    for key in sorted(set(bound) - set(counted)):
        out.append(
            Mismatch("pod", key, f"bound to {bound[key]} in the informer, not counted by the scheduler")
        )
    in_flight = 0
    for key in sorted(set(counted) - set(bound)):
        if key in assumed or key in pending:
            in_flight += 1
            continue  # ours, assumed: its bind not shown by the watch yet
        out.append(
            Mismatch("pod", key, f"counted on {counted[key]} by the scheduler, not bound in the informer")
        )
    for key in sorted(set(bound) & set(counted)):
        if bound[key] != counted[key]:
            out.append(Mismatch("pod", key, f"bound to {bound[key]}, counted on {counted[key]}"))
    queued = set(scheduler.pending)
    for key in sorted(pending - queued - set(counted)):
        out.append(Mismatch("pending pod", key, "pending in the informer, unknown to the scheduler"))
    for key in sorted(queued - pending):
        where = f"bound to {bound[key]}" if key in bound else "gone or finished"
        out.append(Mismatch("pending pod", key, f"pending in the scheduler, {where} in the informer"))

    held = {key for keys in scheduler.podgroups.held.values() for key in keys}
    queue = scheduler.queue
    for key in sorted(queued & pending):
        if queue.get(key) is None and key not in held and key not in counted:
            out.append(
                Mismatch("pending pod", key, "in no queue pool, not held by its PodGroup: never tried")
            )

    for plugin in scheduler.framework.plugins:
        if isinstance(plugin, LedgerAudit):
            out += [Mismatch("ledger", "", line) for line in plugin.audit_ledger(cluster.pods.values())]
    return Comparison(len(informer_nodes), count, unreadable, tuple(out), in_flight)


def dump(scheduler: Scheduler) -> list[str]:
    """The scheduler's view, one line per node with the pods it counts there, then the queue's pools
    (kube-scheduler's CacheDumper: its nodes and the scheduling queue's pods)."""
    cluster = scheduler.cluster
    lines = []
    for name in sorted(cluster.row_of):
        counted = sorted(p.key for p in cluster.pods_on_node(name))
        lines.append(f"node {name}: {len(counted)} pod(s) counted: {', '.join(counted)}")
    now = scheduler.clock()
    pools: dict[str, list[str]] = {}
    for queued in sorted(scheduler.queue.pods(), key=lambda q: q.pod.key):
        parked = f", parked {now - queued.parked_at:.0f}s" if queued.pool == "unschedulable" else ""
        entry = f"{queued.pod.key} ({queued.attempts} attempt(s){parked}: {queued.message or '-'})"
        pools.setdefault(queued.pool or "active", []).append(entry)
    for pool in sorted(pools):
        lines.append(f"queue {pool}: {len(pools[pool])} pod(s): {'; '.join(pools[pool])}")
    for gang, (since, waiting) in scheduler.framework.waiting.held().items():
        placed = ", ".join(f"{p.key} on {p.node_name}" for p in waiting)
        lines.append(f"waiting in Permit for gang {gang} ({now - since:.0f}s): {placed}")
    for group, held in sorted(scheduler.podgroups.held.items()):
        if held:
            refused = scheduler.podgroups.enqueue_refusals.get(group)
            why = f" (refused: {refused})" if refused else ""
            lines.append(f"held for the enqueue of PodGroup {group}{why}: {', '.join(sorted(held))}")
    return lines
