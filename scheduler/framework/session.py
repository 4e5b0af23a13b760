"""Volcano's session extension points, as the framework runs them (volcano-sh/volcano
``pkg/scheduler/framework/session_plugins.go``): the configuration's tiers, the switches that take a
plugin out of an extension point, and the points Volcano's actions ask (queue and job order,
preemptable, reclaimable, overused, allocatable, job starving), combined tier by tier as
:mod:`scheduler.framework.tiers` says.

The framework honours the configuration's Volcano switches, centrally, by extension point (a plugin never
reads its own): a plugin whose switch for a point is false takes no part in it.

========================  ===================================================================
switch                    gpuq extension points it gates
========================  ===================================================================
enablePredicate           PreFilter, Filter (the checks before a node is chosen)
enableNodeOrder           PreScore, Score
enableJobEnqueued         Enqueue (and its enqueued/dequeued bookkeeping)
enableJobOrder            JobOrder; QueueSort (the pod queue's order) with enableTaskOrder: a
                          plugin's sort key is used unless both are false
enableTaskOrder           QueueSort, as above
enableQueueOrder          QueueOrder
enablePreemptable         Preemptable; PostFilter (capacity-scheduling's ElasticQuota preemption)
enableReclaimable         Reclaimable
enabledOverused           Overused
enabledAllocatable        Allocatable
enableJobStarving         JobStarving
enableJobReady            Permit (gang's quorum)
enableTargetJob           TargetJob (the reserve action's election)
enableReservedNodes       ReservedNodes (the reserve action's node locking)
========================  ===================================================================

Reserve/Unreserve are bookkeeping (the ledgers must match what is bound) and are never switched off.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any

from gpuq_k8s.common.model import switches as sw
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.reservation import Candidate, Lock
from gpuq_k8s.scheduler.framework import tiers as combine
from gpuq_k8s.scheduler.framework.interfaces import (
    AllocatablePlugin,
    GroupInfo,
    JobOrderPlugin,
    JobStarvingPlugin,
    OverusedPlugin,
    Plugin,
    PreemptablePlugin,
    QueueOrderPlugin,
    ReclaimablePlugin,
    ReservedNodesPlugin,
    TargetJobPlugin,
)
from gpuq_k8s.scheduler.framework.status import Status


class SessionPoints:
    """What :class:`~scheduler.framework.runtime.Framework` inherits: its plugins in tiers, the
    switches, and Volcano's session points. ``queue_of`` is the Handle's (the PodGroup tracker's)."""

    _switches: Mapping[str, Mapping[str, bool]]
    _tiers: tuple[tuple[Plugin, ...], ...]

    queue_of: Callable[[PodInfo], str]  # bound by the Framework to the PodGroup tracker's

    def _init_tiers(self, plugins: Sequence[Plugin], tiers: Sequence[Sequence[str]]) -> None:
        self._tiers = _group_in_tiers(plugins, tiers)

    def _enabled(self, plugin: Plugin, switch: str) -> bool:
        """A switch is set on a configuration entry: a member plugin follows its entry's."""
        return self._switches.get(plugin.config_name, {}).get(switch, True)

    def _tiered(self, kind: Any, switch: str) -> Any:
        """The plugins of extension point ``kind`` (an interface class) whose ``switch`` is on, tier
        by tier (typed by the attribute it is assigned to: mypy takes no abstract class as a type)."""
        out: list[tuple[Plugin, ...]] = []
        for tier in self._tiers:
            members = tuple(p for p in tier if isinstance(p, kind) and self._enabled(p, switch))
            if members:
                out.append(members)
        return tuple(out)

    def _flat(self, kind: Any, switch: str) -> Any:
        return tuple(p for tier in self._tiered(kind, switch) for p in tier)

    def _init_session_points(self) -> None:
        self.queue_order_tiers: tuple[tuple[QueueOrderPlugin, ...], ...] = self._tiered(
            QueueOrderPlugin, sw.QUEUE_ORDER
        )
        # The queue-order plugins that also order allocate (``orders_allocation``), tier by tier.
        allocation = (tuple(p for p in tier if p.orders_allocation) for tier in self.queue_order_tiers)
        self.allocation_queue_order_tiers = tuple(tier for tier in allocation if tier)
        self.job_order_tiers: tuple[tuple[JobOrderPlugin, ...], ...] = self._tiered(
            JobOrderPlugin, sw.JOB_ORDER
        )
        self.preemptable_tiers: tuple[tuple[PreemptablePlugin, ...], ...] = self._tiered(
            PreemptablePlugin, sw.PREEMPTABLE
        )
        self.reclaimable_tiers: tuple[tuple[ReclaimablePlugin, ...], ...] = self._tiered(
            ReclaimablePlugin, sw.RECLAIMABLE
        )
        self.overused_tiers: tuple[tuple[OverusedPlugin, ...], ...] = self._tiered(
            OverusedPlugin, sw.OVERUSED
        )
        self.allocatable_tiers: tuple[tuple[AllocatablePlugin, ...], ...] = self._tiered(
            AllocatablePlugin, sw.ALLOCATABLE
        )
        self.starving_tiers: tuple[tuple[JobStarvingPlugin, ...], ...] = self._tiered(
            JobStarvingPlugin, sw.JOB_STARVING
        )
        self.target_job_plugins: tuple[TargetJobPlugin, ...] = self._flat(TargetJobPlugin, sw.TARGET_JOB)
        self.reserved_nodes_plugins: tuple[ReservedNodesPlugin, ...] = self._flat(
            ReservedNodesPlugin, sw.RESERVED_NODES
        )

    # -- Volcano's session points -------------------------------------------------------------------
    def compare_queues(self, left: str, right: str) -> int:
        return combine.order(self.queue_order_tiers, lambda p: p.compare_queues(left, right))

    def compare_queues_for_allocation(self, left: str, right: str) -> int:
        return combine.order(self.allocation_queue_order_tiers, lambda p: p.compare_queues(left, right))

    def compare_jobs(self, left: GroupInfo, right: GroupInfo) -> int:
        return combine.order(self.job_order_tiers, lambda p: p.compare_jobs(left, right))

    def preemptable(self, preemptor: PodInfo, candidates: Sequence[PodInfo]) -> list[PodInfo]:
        return combine.victims(self.preemptable_tiers, lambda p: p.preemptable(preemptor, candidates))

    def preemption_ruled_out(self, preemptor: PodInfo) -> bool:
        """No tier could name a victim for ``preemptor``: each has a plugin that allows none."""
        return all(any(p.rules_out(preemptor) for p in tier) for tier in self.preemptable_tiers)

    def reclaim_ruled_out(self, reclaimer: PodInfo) -> bool:
        return all(any(p.rules_out(reclaimer) for p in tier) for tier in self.reclaimable_tiers)

    def reclaimable(self, reclaimer: PodInfo, candidates: Sequence[PodInfo]) -> list[PodInfo]:
        return combine.victims(self.reclaimable_tiers, lambda p: p.reclaimable(reclaimer, candidates))

    def overused(self, queue: str) -> bool:
        return self.overused_by(queue) is not None

    def overused_by(self, queue: str) -> str | None:
        """The first plugin that finds Queue ``queue`` overused, or None."""
        plugin = combine.first(self.overused_tiers, lambda p: p.overused(queue))
        return None if plugin is None else plugin.name

    def not_allocatable_by(self, queue: str, pod: PodInfo) -> str | None:
        """The first plugin that refuses to charge ``pod`` to Queue ``queue``, or None (allocatable)."""
        plugin = combine.first(self.allocatable_tiers, lambda p: not p.allocatable(queue, pod))
        return None if plugin is None else plugin.name

    def queue_check(self, pod: PodInfo) -> Status:
        """Volcano's allocate skips an overused queue and a task its queue cannot be charged with:
        Unschedulable, naming the plugin, or Success. A pod without any request is Volcano's
        backfill's, which asks neither (a queue that deserves nothing is "overused" at 0 allocated,
        and would otherwise keep its BestEffort pods out, even after they preempted for a slot)."""
        if not (self.overused_tiers or self.allocatable_tiers):
            return Status.success()
        if not any(amount > 0 for amount in pod.requests.values()):
            return Status.success()
        queue = self.queue_of(pod)
        plugin = self.overused_by(queue)
        if plugin is not None:
            return Status.unschedulable(
                f"queue {queue} is overused (it holds its deserved share)", plugin=plugin
            )
        plugin = self.not_allocatable_by(queue, pod)
        if plugin is not None:
            return Status.unschedulable(f"queue {queue} cannot be allocated {pod.key}", plugin=plugin)
        return Status.success()

    def job_starving(self, group: GroupInfo) -> bool:
        return combine.starving(self.starving_tiers, lambda p: p.job_starving(group))

    def target_job(
        self, candidates: Sequence[Candidate], passed_over: Container[str]
    ) -> tuple[Candidate, float] | None:
        """Volcano's ``TargetJob``: the first enabled plugin in tier order answers; with its lock
        timeout. None when no plugin is enabled or it elects none."""
        for plugin in self.target_job_plugins:
            target = plugin.target_job(candidates, passed_over)
            return None if target is None else (target, plugin.lock_timeout)
        return None

    def reserved_nodes(self, lock: Lock) -> Lock:
        """Volcano's ``ReservedNodes``: every enabled plugin adds the node it picks to ``lock``."""
        for plugin in self.reserved_nodes_plugins:
            node = plugin.reserved_node(lock)
            if node is not None and node not in lock.nodes:
                lock = lock.with_node(node)
        return lock


def _group_in_tiers(
    plugins: Sequence[Plugin], tiers: Sequence[Sequence[str]]
) -> tuple[tuple[Plugin, ...], ...]:
    """The plugins grouped by the configuration's tiers (by configuration entry: a member plugin goes
    with its entry, right after it); plugins no tier names (a test's hand-built chain) form one last
    tier."""
    by_entry: dict[str, list[Plugin]] = {}
    for plugin in plugins:
        by_entry.setdefault(plugin.config_name, []).append(plugin)
    out: list[tuple[Plugin, ...]] = []
    placed: set[str] = set()
    for names in tiers:
        tier = tuple(p for n in names for p in by_entry.get(n, ()))
        placed.update(names)
        if tier:
            out.append(tier)
    rest = tuple(p for p in plugins if p.config_name not in placed)
    if rest:
        out.append(rest)
    return tuple(out)
