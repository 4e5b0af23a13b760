"""The scheduling cycle: enqueue -> PreFilter -> Filter -> (PostFilter) -> PreScore -> Score -> pick ->
Reserve -> Permit -> Bind, with Unreserve on any later failure (design.md "Data flow").

:class:`Scheduler` owns the cluster state, the API objects, the queue, the framework (the plugin chain
and the plugins' :class:`~scheduler.framework.interfaces.Handle`) and the PodGroup bookkeeping
(:class:`~scheduler.groups.GroupTracker`), and feeds them what the informers (or the simulator's
manifests) report. One attempt is split as kube-scheduler's ``schedule_one.go`` splits it: the
scheduling step (``schedulingCycle``: PreFilter .. Reserve, Permit) decides and reserves, the binding
step (``bindingCycle``, :mod:`scheduler.binding_cycle`) binds, and on failure unreserves and
requeues. Failed attempts are reported by :mod:`scheduler.failure`; PostFilter's victims are evicted
by :mod:`scheduler.preemption`; gangs waiting in Permit that cannot reach their quorum are rolled back
by :mod:`scheduler.gang_cycle`; the reserve action is fed by :mod:`scheduler.reserve_cycle`.

It is synchronous; binds and evictions go through the :class:`~scheduler.backend.ClusterBackend`
with completion callbacks, so the same cycle runs against the in-memory backend (``gpuq simulate``)
and the Kubernetes one.

The chosen node is the feasible node with the highest total score; equal totals go to the node whose
name sorts first (design.md "gpuq simulate"), so a run is deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import GPUQ_SCHEDULER, PodInfo
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.actions.allocate import with_resource_fit
from gpuq_k8s.scheduler.actions.backfill import best_effort
from gpuq_k8s.scheduler.actions.reserve import Reserve
from gpuq_k8s.scheduler.backend import ClusterBackend
from gpuq_k8s.scheduler.binding_cycle import BindingCycle
from gpuq_k8s.scheduler.bound_at_start import add_bound_pods
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.cluster.state import ClusterState
from gpuq_k8s.scheduler.containment import Containment
from gpuq_k8s.scheduler.failure import FailureHandler, capacity_note, fit_error
from gpuq_k8s.scheduler.framework.cluster_events import OBJECT_EVENTS, bound_pod_events, node_events
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    FilterOutcome,
    FloatArray,
    PostFilterResult,
)
from gpuq_k8s.scheduler.framework.registry import PluginSettings, Registry
from gpuq_k8s.scheduler.framework.runtime import ALLOCATE, BACKFILL, RESERVE, Framework, Observer
from gpuq_k8s.scheduler.framework.status import Code, PluginInputError, Status
from gpuq_k8s.scheduler.gang_cycle import GangCycle
from gpuq_k8s.scheduler.groups import GroupTracker
from gpuq_k8s.scheduler.nominator import Nominator
from gpuq_k8s.scheduler.plugins.dra_extended import extended_resources
from gpuq_k8s.scheduler.plugins.dra_view import dra_view
from gpuq_k8s.scheduler.plugins.members import with_safety_rules
from gpuq_k8s.scheduler.preemption import Preemption
from gpuq_k8s.scheduler.queue import SchedulingQueue
from gpuq_k8s.scheduler.reserve_cycle import ReserveCycle
from gpuq_k8s.scheduler.status_sync import sync_status


class SchedulerSettings(Protocol):
    """What the scheduler reads of :class:`common.model.config.SchedulerConfig`."""

    @property
    def actions(self) -> Sequence[str]: ...

    @property
    def tiers(self) -> Sequence[Sequence[PluginSettings]]: ...

    @property
    def configurations(self) -> Mapping[str, Mapping[str, Any]]: ...


@dataclass(slots=True)
class Attempt:
    """One scheduling attempt of one pod, kept for ``--explain`` and the report."""

    pod: PodInfo
    status: Status
    node: str = ""
    message: str = ""
    nominated: str = ""
    outcome: FilterOutcome | None = None
    total: FloatArray | None = None
    scores: dict[str, FloatArray] = field(default_factory=dict)


# What the scheduling step hands the binding step: the attempt, and the pod assumed on its node row
# when it is to be bound now (None, -1: failed, or waiting in Permit).
Scheduled = tuple[Attempt, PodInfo | None, int]


class Scheduler:
    def __init__(
        self,
        settings: SchedulerSettings,
        registry: Registry,
        backend: ClusterBackend,
        *,
        clock: Callable[[], float],
        scheduler_name: str = GPUQ_SCHEDULER,
        observe: Observer | None = None,
        keep_attempts: bool = False,
        gang_timeout: float = 60.0,
        wall_clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.cluster = ClusterState()
        self.objects = ObjectStore()
        self.backend = backend
        self.clock = clock
        self.scheduler_name = scheduler_name
        self.keep_attempts = keep_attempts
        self.gang_timeout = gang_timeout
        self.wall_clock = wall_clock or (lambda: datetime.now(UTC))
        self.pending: dict[str, PodInfo] = {}  # pods of ours not bound yet
        self.attempts: dict[str, Attempt] = {}
        self.reasons: dict[str, str] = {}  # pod key -> last PodScheduled message
        self.preempted: dict[str, PodInfo] = {}  # victims evicted, until their delete is seen
        self.nominator = Nominator(self.cluster)
        self.podgroups = GroupTracker(
            self.cluster,
            self.pending,
            not_ready=lambda key: self.nominator.is_counted(key) or key in self.preempted,
            nominated=lambda key: bool(self.nominator.node_of(key)),
        )
        # Subscribed before the plugins are built, so the PodGroup bookkeeping sees a change first;
        # the cluster events of an object change are raised once every plugin has seen it.
        self.objects.subscribe(self._object_changed)
        self.objects.watch(self._object_events)
        self.framework = Framework(
            self.cluster,
            self.objects,
            self.podgroups,
            backend.record_event,
            lambda handle: with_safety_rules(
                with_resource_fit(
                    registry.build(handle, settings.tiers),
                    handle,
                    {p.name: p.switches for tier in settings.tiers for p in tier},
                ),
                handle,
            ),
            actions=settings.actions,
            tiers=[[p.name for p in tier] for tier in settings.tiers],
            switches={p.name: p.switches for tier in settings.tiers for p in tier},
            action_arguments=settings.configurations,
            observe=observe,
            keep_outcomes=keep_attempts,
            nominator=self.nominator,
        )
        key_of = self.framework.sort_key
        backfill = BACKFILL in self.framework.actions
        partially_placed = self.podgroups.partially_placed

        def sort_key(pod: PodInfo) -> tuple[Any, ...]:
            # The pending pods of a gang left partly placed (a leader lost between its binds) first;
            # with backfill, pods without requests after every pod with requests (actions/backfill.py).
            key = (not partially_placed(pod), *key_of(pod))
            return (best_effort(pod), *key) if backfill else key

        framework = self.framework
        queue_order = (
            (self.podgroups.queue_of, framework.compare_queues_for_allocation)
            if framework.allocation_queue_order_tiers
            else None
        )
        self.queue = SchedulingQueue(
            sort_key,
            clock,
            interest=framework.interest,
            hints=framework.hints,
            pre_enqueue=framework.run_pre_enqueue if framework.pre_enqueue_plugins else None,
            queue_order=queue_order,
            live_keys=framework.sort_keys_live,
        )
        # An error of gpuq's own met on one object stays with it (scheduler/containment.py).
        self.contain = Containment(self.framework.record)
        self.podgroups.connect(self.framework, self.queue, self.contain)
        self.failures = FailureHandler(backend, self.queue, self.framework.record, self.reasons)
        self.preemption = Preemption(
            self.framework,
            backend,
            self.preempted,
            self.nominator,
            forget=self.delete_pod,
            ours=self.responsible_for,
        )
        self.gangs = GangCycle(
            framework=self.framework,
            cluster=self.cluster,
            podgroups=self.podgroups,
            queue=self.queue,
            failures=self.failures,
            attempts=self.attempts,
        )
        self._nominated_before = ""  # the attempt's pod's nomination when it began
        self._allocate = ALLOCATE in self.framework.actions
        self._backfill = BACKFILL in self.framework.actions
        # The reserve action (Semantics 15), fed from this state (scheduler/reserve_cycle.py).
        self.reserve = (
            ReserveCycle(
                action=Reserve(self.framework),
                pending=self.pending,
                podgroups=self.podgroups,
                objects=self.objects,
                cluster=self.cluster,
                queue=self.queue,
            )
            if RESERVE in self.framework.actions
            else None
        )
        self.binding = BindingCycle(
            framework=self.framework,
            backend=backend,
            cluster=self.cluster,
            pending=self.pending,
            queue=self.queue,
            reasons=self.reasons,
            podgroups=self.podgroups,
            failures=self.failures,
            reserve=self.reserve,
            forget=self.delete_pod,
        )

    # -- informer-side inputs ---------------------------------------------------------------------
    def responsible_for(self, pod: PodInfo) -> bool:
        return pod.scheduler_name in (self.scheduler_name, "") or (
            pod.scheduler_name == "default-scheduler" and self.scheduler_name == "*"
        )

    def add_pod(self, pod: PodInfo) -> None:
        """A pod appeared or changed: bound pods count as usage, pending ones of ours are queued."""
        podgroups = self.podgroups
        podgroups.add_member(pod)
        listeners = self.framework.pending_listeners
        if pod.bound:
            self.pending.pop(pod.key, None)
            self.queue.delete(pod.key)
            self.nominator.forget(pod.key)
            if pod.terminal:
                podgroups.pod_finished(pod)
                self._pod_gone(pod.key)
                for listener in listeners:
                    listener.pending_pod_removed(pod)
                return
            if pod.holds_resources:
                previous = self.cluster.pods.get(pod.key)
                self.cluster.add_pod(pod)
                events = bound_pod_events(previous, pod)
                if events:
                    self.queue.on_event(events, old=previous, new=pod)
                # Bound before we saw it (by us before a restart, or by another hand): its group runs
                # once minMember of its pods are, as Volcano's gang decides at session close.
                podgroups.pod_bound(pod)
            else:
                self._pod_gone(pod.key)
            return
        if pod.terminal or pod.deleting or not self.responsible_for(pod):
            self.nominator.forget(pod.key)
            previous = self.pending.pop(pod.key, None)
            if previous is not None:
                self.queue.delete(pod.key)
                for listener in listeners:
                    listener.pending_pod_removed(previous)
            return
        self.pending[pod.key] = pod
        self.nominator.update(pod)
        for listener in listeners:
            listener.pending_pod_added(pod)
        podgroups.gate(pod)
        group = podgroups.group_of(pod)
        if group is not None:
            self.queue.on_event(ClusterEvent.POD_ADDED, only=lambda p: podgroups.group_of(p) is group)

    def add_bound_pods(self, pods: Sequence[PodInfo]) -> None:
        """:meth:`add_pod` for each of ``pods`` in order, the same state, cheaper for the start's
        bound pods (scheduler/kube/feed.py ``Feed.load``; :func:`scheduler.bound_at_start.add_bound_pods`)."""
        busy = bool(self.pending or len(self.queue) or self.nominator.nominations)
        add_bound_pods(pods, self.cluster, self.podgroups, self.add_pod, busy=busy)

    def delete_pod(self, key: str) -> None:
        pending = self.pending.pop(key, None)
        if pending is not None:
            for listener in self.framework.pending_listeners:
                listener.pending_pod_removed(pending)
        self.queue.delete(key)
        self.nominator.forget(key)
        self.podgroups.forget_pod(key)
        if self.reserve is not None:
            self.reserve.forget(key)
        self._pod_gone(key)

    def _pod_gone(self, key: str) -> None:
        gone = self.cluster.remove_pod(key)
        if gone is not None:
            self.queue.on_event(ClusterEvent.POD_DELETED, old=gone)

    def set_node(self, node: NodeInfo) -> None:
        row = self.cluster.row_of.get(node.name)
        old = self.cluster.nodes[row] if row is not None else None
        new = self.cluster.node(self.cluster.set_node(node))  # as stored (the default pod count)
        self.queue.on_event(node_events(old, new), old=old, new=new)

    def remove_node(self, name: str) -> None:
        """The node is gone; pods bound to it go on counting until their deletes arrive (a ghost
        row: :mod:`scheduler.cluster.state`); a nomination to it is dropped."""
        row = self.cluster.row_of.get(name)
        old = self.cluster.nodes[row] if row is not None else None
        self.cluster.remove_node(name)
        if old is not None:
            self.queue.on_event(ClusterEvent.NODE_DELETED, old=old)
        self.nominator.node_removed(name)

    def put_object(self, obj: Obj) -> None:
        self.objects.put(obj)

    def _object_changed(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        if kind == kinds.POD_GROUP:
            self.podgroups.podgroup_changed(namespace, name, obj)

    def _object_events(self, kind: Kind, namespace: str, name: str, old: Obj | None, new: Obj | None) -> None:
        events = OBJECT_EVENTS.get(kind)
        if events:
            self.queue.on_event(events, old=old, new=new)

    def run_enqueue(self) -> int:
        """The enqueue action: Pending PodGroups the Enqueue plugins admit go Inqueue; returns how many."""
        return self.podgroups.run_enqueue()

    def run_reserve(self) -> bool:
        """One step of the reserve action, when it is configured (:meth:`ReserveCycle.step`); True
        when it released a lock (the pods the lock kept out are then ready to be tried at once)."""
        return self.reserve is not None and self.reserve.step(self.clock())

    # -- batched status sync (scheduler/status_sync.py) --------------------------------------------
    def sync_status(self) -> int:
        """Write every dirty custom-resource status once (PodGroup phases, quota usage); returns how many
        (:func:`scheduler.status_sync.sync_status`)."""
        return sync_status(self.podgroups, self.objects, self.framework, self.backend, self.wall_clock)

    # -- the cycle --------------------------------------------------------------------------------
    def schedule_one(self) -> Attempt | None:
        """Take the next pod from the queue and run one attempt; None when none is ready."""
        if not (self._allocate or self._backfill):
            return None
        pod = self.queue.pop()
        if pod is None:
            return None
        self._nominated_before = self.nominator.node_of(pod.key) or pod.nominated_node_name
        if not self._allocate and not best_effort(pod):
            # Only backfill is configured: it places pods without requests, nothing else.
            message = "no allocate action is configured: only backfill's pods without requests are placed"
            status = Status.unschedulable(message, plugin=ALLOCATE)
            return self._fail(Attempt(pod, status), status, None, message)[0]
        state = CycleState()
        try:
            attempt, assumed, row = self._scheduling_cycle(state, pod)
            if assumed is not None:
                self.binding.run(state, assumed, row)
        except Exception as err:
            # A bug must not take scheduling down for every other pod (scheduler/containment.py):
            # this one waits for its next update.
            self.contain(pod.ref, "schedule", err, "it is not tried again until it changes")
            attempt = Attempt(pod, Status.error(f"an error in gpuq: {type(err).__name__}"))
        if self.keep_attempts:
            self.attempts[pod.key] = attempt
        return attempt

    def _scheduling_cycle(self, state: CycleState, pod: PodInfo) -> Scheduled:
        """PreFilter .. Reserve, Permit: the pod is placed, reserved and assumed, or reported as failed.
        Up to PostFilter the nominated pods that hold room for it count on their nodes (Semantics 18)."""
        with self.nominator.reserved_for(pod):
            decided = self._filter_step(state, pod)
        if not isinstance(decided, FilterOutcome):
            return decided
        return self._placing_step(state, pod, decided)

    def _filter_step(self, state: CycleState, pod: PodInfo) -> Scheduled | FilterOutcome:
        """Queue checks, PreFilter, Filter; PostFilter when no node fits (then the attempt failed)."""
        num_nodes = self.cluster.node_count
        queued = self.framework.queue_check(pod)
        if not queued.is_success:
            # Volcano's allocate skips an overused queue; reclaim (not preempt) is what helps it.
            post = self.preemption.post_filter(
                state, pod, FilterOutcome(np.zeros(self.cluster.n, np.bool_)), queued
            )
            message = fit_error(num_nodes, None, queued, post.message)
            return self._fail(Attempt(pod, queued), queued, post, message)
        try:
            pre = self.framework.run_pre_filter(state, pod)
        except PluginInputError as err:
            invalid = Status.unresolvable(str(err), plugin=err.plugin)
            return self._fail(Attempt(pod, invalid), invalid, None, str(err))
        if not pre.is_success:
            outcome = FilterOutcome(np.zeros(self.cluster.n, dtype=np.bool_), ())
            if pre.code is Code.UNSCHEDULABLE and self.framework.post_filter_plugins:
                # Preemption needs to know which nodes the victims' removal could help.
                outcome = self.framework.run_filter(state, pod)
            post = self.preemption.post_filter(state, pod, outcome, pre)
            message = fit_error(num_nodes, None, pre, post.message)
            return self._fail(Attempt(pod, pre), pre, post, message)
        outcome = self.framework.run_filter(state, pod)
        if not outcome.feasible_count:
            status = Status.unschedulable(plugin="Filter")
            # The reasons as Filter saw them: preemption below may evict pods they would read.
            message = fit_error(num_nodes, outcome, None)
            served = frozenset(extended_resources(dra_view(self.objects), pod))
            message += capacity_note(self.cluster, pod, outcome, message, served)
            post = self.preemption.post_filter(state, pod, outcome, None)
            if post.message:
                message += f" {post.message}"
            return self._fail(Attempt(pod, status, outcome=outcome), status, post, message)
        return outcome

    def _placing_step(self, state: CycleState, pod: PodInfo, outcome: FilterOutcome) -> Scheduled:
        """Score, pick, Reserve, assume, Permit for a pod some node fits."""
        num_nodes = self.cluster.node_count
        feasible = outcome.feasible
        total, scores = self.framework.run_score(state, pod, feasible)
        row = self._pick(feasible, total, self.nominator.node_of(pod.key))
        node = self.cluster.names[row]
        attempt = Attempt(pod, Status.success(), node, "", "", outcome, total, scores)
        assumed = pod.with_node_name(node)
        # Reserve before the pod is assumed in the cluster state: a plugin's ClusterListener then
        # sees the pod already charged by its Reserve and leaves it alone, while a pod bound by
        # someone else (running at start-up) is charged by the listener without a quota check.
        reserved = self.framework.run_reserve(state, assumed, row)
        if not reserved.is_success:
            message = f"0/{num_nodes} nodes are available: {reserved.message}."
            return self._fail(attempt, reserved, None, message)
        self.cluster.add_pod(assumed)
        self.queue.on_event(ClusterEvent.POD_BOUND, new=assumed)  # as counted: a burst sees its own pods
        self.nominator.forget(pod.key)  # placed: its room is its own now (kube-scheduler's assume)
        permit = self.framework.run_permit(state, assumed, row)
        if permit.is_wait:
            group = self.podgroups.group_of(pod)
            key = group.key if group is not None else pod.key
            self.framework.waiting.add(key, assumed, row, state, self.clock(), timeout=permit.timeout)
            attempt.status = permit
            attempt.message = permit.message
            return attempt, None, -1
        if not permit.is_success:
            self.framework.run_unreserve(state, assumed, row)
            self.cluster.remove_pod(pod.key)
            return self._fail(attempt, permit, None, permit.message)
        return attempt, assumed, row

    def _pick(self, feasible: BoolArray, total: FloatArray, nominated: str = "") -> int:
        """The feasible row with the highest total; among equal totals, the first node name. A pod
        nominated to a node that fits it goes there (kube-scheduler's evaluateNominatedNode): the
        room its victims left is what it waited for."""
        if nominated:
            row = self.cluster.row_of.get(nominated)
            if row is not None and feasible[row]:
                return row
        order = self.cluster.rank_order()
        # Gathered by node name, the first maximum is the tie-break's winner: one argmax, no tie scan.
        ranked = np.where(feasible, total, -np.inf).take(order)
        i = int(ranked.argmax())
        if math.isnan(ranked[i]):
            return 0  # as the former full-width argmin over no candidate did
        return int(order[i])

    def _fail(
        self, attempt: Attempt, status: Status, post: PostFilterResult | None, message: str
    ) -> Scheduled:
        """The attempt failed with ``status``: reported, and the pod parked (:mod:`scheduler.failure`)
        with its nomination (new, kept while its victims terminate, or cleared)."""
        pod = attempt.pod
        if self.reserve is not None:  # only the reserve action reads it
            self.reserve.refused(pod.key, status, attempt.outcome)
        nominated = self.nominator.node_of(pod.key)
        written = nominated if nominated or self._nominated_before else None
        self.failures.unschedulable(pod, status, attempt.outcome, post, message, nominated=written)
        attempt.status = status
        attempt.node = ""
        attempt.message = message
        attempt.nominated = nominated
        if not nominated and status.plugin != plugin_names.GANG:
            self.gangs.member_failed(pod)
        return attempt, None, -1

    # -- gangs that never reach quorum (scheduler/gang_cycle.py) -----------------------------------
    def reject_waiting(self, keys: Iterable[str] | None = None) -> int:
        """Roll back waiting gangs (all, or those in ``keys``); returns how many pods were rolled back
        (:meth:`GangCycle.reject_waiting`)."""
        return self.gangs.reject_waiting(keys)

    def expire_waiting(self) -> int:
        """Roll back gangs that have waited longer than ``gang_timeout`` (a cluster's Permit timeout)."""
        return self.gangs.expire_waiting(self.clock(), self.gang_timeout)

    # -- state for reports ------------------------------------------------------------------------
    def fingerprint(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, p.node_name) for k, p in self.cluster.pods.items()))

    def group_phases(self) -> Mapping[str, str]:
        return self.podgroups.phases()
