"""The scheduling cycle: enqueue -> PreFilter -> Filter -> (PostFilter) -> PreScore -> Score -> pick ->
Reserve -> Permit -> Bind, with Unreserve on any later failure (design.md "Data flow").

:class:`Scheduler` owns the cluster state, the API objects, the queue, the framework (the plugin chain
and the plugins' :class:`~scheduler.framework.interfaces.Handle`) and the PodGroup bookkeeping
(:class:`~scheduler.groups.GroupTracker`), and feeds them what the informers (or the simulator's
manifests) report. One attempt is split as kube-scheduler's ``schedule_one.go`` splits it: the
scheduling step (``schedulingCycle``: PreFilter .. Reserve, Permit) decides and reserves, the binding
step (``bindingCycle``) binds, and on failure unreserves and requeues. Failed attempts are reported
by :mod:`scheduler.failure`; PostFilter's victims are evicted by :mod:`scheduler.preemption`.

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
from gpuq_k8s.common.model.events import SCHEDULED, EventRecord
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import GPUQ_SCHEDULER, PodInfo
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.actions.allocate import with_resource_fit
from gpuq_k8s.scheduler.actions.backfill import best_effort
from gpuq_k8s.scheduler.backend import ClusterBackend, Outcome, Result
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.cluster.state import ClusterState
from gpuq_k8s.scheduler.failure import FailureHandler, capacity_note, fit_error
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    FilterOutcome,
    FloatArray,
    PostFilterResult,
)
from gpuq_k8s.scheduler.framework.registry import PluginSettings, Registry
from gpuq_k8s.scheduler.framework.runtime import ALLOCATE, BACKFILL, Framework, Observer
from gpuq_k8s.scheduler.framework.status import Code, PluginInputError, Status
from gpuq_k8s.scheduler.groups import GroupTracker
from gpuq_k8s.scheduler.preemption import Preemption
from gpuq_k8s.scheduler.queue import SchedulingQueue


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
        self.preempted: dict[str, PodInfo] = {}
        self.podgroups = GroupTracker(self.cluster, self.pending)
        # Subscribed before the plugins are built, so the PodGroup bookkeeping sees a change first.
        self.objects.subscribe(self._object_changed)
        self.framework = Framework(
            self.cluster,
            self.objects,
            self.podgroups,
            backend.record_event,
            lambda handle: with_resource_fit(
                registry.build(handle, settings.tiers),
                handle,
                {p.name: p.switches for tier in settings.tiers for p in tier},
            ),
            actions=settings.actions,
            tiers=[[p.name for p in tier] for tier in settings.tiers],
            switches={p.name: p.switches for tier in settings.tiers for p in tier},
            action_arguments=settings.configurations,
            observe=observe,
            keep_outcomes=keep_attempts,
        )
        sort_key = self.framework.sort_key
        if BACKFILL in self.framework.actions:
            # Backfill: pods without requests after every pod with requests (scheduler/actions/backfill.py).
            def sort_key(
                pod: PodInfo, key: Callable[[PodInfo], tuple[Any, ...]] = sort_key
            ) -> tuple[Any, ...]:
                return (best_effort(pod), *key(pod))

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
            queue_order=queue_order,
            live_keys=framework.sort_keys_live,
        )
        self.podgroups.connect(self.framework, self.queue)
        self.failures = FailureHandler(backend, self.queue, self.framework.record, self.reasons)
        self.preemption = Preemption(
            self.framework, backend, self.preempted, self.delete_pod, ours=self.responsible_for
        )
        self._allocate = ALLOCATE in self.framework.actions
        self._backfill = BACKFILL in self.framework.actions

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
            if pod.terminal:
                self._pod_gone(pod.key)
                for listener in listeners:
                    listener.pending_pod_removed(pod)
                return
            if pod.holds_resources:
                previous = self.cluster.pods.get(pod.key)
                self.cluster.add_pod(pod)
                # Bound before we saw it (by us before a restart, or by another hand): its group runs
                # once minMember of its pods are, as Volcano's gang decides at session close.
                podgroups.pod_bound(pod)
                if previous is None or previous.node_name != pod.node_name:
                    self.queue.on_event(ClusterEvent.POD_BOUND)
                elif previous.labels != pod.labels or previous.deleting != pod.deleting:
                    self.queue.on_event(ClusterEvent.POD_UPDATED)
            else:
                self._pod_gone(pod.key)
            return
        if pod.terminal or pod.deleting or not self.responsible_for(pod):
            previous = self.pending.pop(pod.key, None)
            if previous is not None:
                self.queue.delete(pod.key)
                for listener in listeners:
                    listener.pending_pod_removed(previous)
            return
        self.pending[pod.key] = pod
        for listener in listeners:
            listener.pending_pod_added(pod)
        podgroups.gate(pod)
        group = podgroups.group_of(pod)
        if group is not None:
            self.queue.on_event(ClusterEvent.POD_ADDED, only=lambda p: podgroups.group_of(p) is group)

    def delete_pod(self, key: str) -> None:
        pending = self.pending.pop(key, None)
        if pending is not None:
            for listener in self.framework.pending_listeners:
                listener.pending_pod_removed(pending)
        self.queue.delete(key)
        self.podgroups.forget_pod(key)
        self._pod_gone(key)

    def _pod_gone(self, key: str) -> None:
        if self.cluster.remove_pod(key) is not None:
            self.queue.on_event(ClusterEvent.POD_DELETED)

    def set_node(self, node: NodeInfo) -> None:
        event = ClusterEvent.NODE_CHANGED if node.name in self.cluster.row_of else ClusterEvent.NODE_ADDED
        self.cluster.set_node(node)
        self.queue.on_event(event)

    def remove_node(self, name: str) -> None:
        """The node is gone; pods bound to it go on counting until their deletes arrive (a ghost
        row: :mod:`scheduler.cluster.state`)."""
        self.cluster.remove_node(name)

    def put_object(self, obj: Obj) -> None:
        self.objects.put(obj)

    def _object_changed(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        if kind == kinds.POD_GROUP:
            self.podgroups.podgroup_changed(namespace, name, obj)
            self.queue.on_event(ClusterEvent.PODGROUP_CHANGED)
        elif kind in (
            kinds.QUEUE,
            kinds.ELASTIC_QUOTA,
            kinds.GPU_RESOURCE_QUOTA,
            kinds.PRIORITY_CLASS,
            kinds.NAMESPACE,
        ):
            # A Namespace: its deletion starting retires its ElasticQuota (capacity-scheduling).
            self.queue.on_event(ClusterEvent.QUOTA_CHANGED)
            if kind == kinds.NAMESPACE:  # its labels: inter-pod affinity's namespaceSelector
                self.queue.on_event(ClusterEvent.NAMESPACE_CHANGED)

    def run_enqueue(self) -> int:
        """The enqueue action: Pending PodGroups the Enqueue plugins admit go Inqueue; returns how many."""
        return self.podgroups.run_enqueue()

    # -- batched status sync ------------------------------------------------------------------------
    def sync_status(self) -> int:
        """Write every dirty custom-resource status once (PodGroup phases, quota usage); returns how many.

        Called after a batch of cycles (the simulator after each round, the cluster scheduler on a
        timer), never per pod: a hundred pods bound in one namespace make one status patch.
        """
        patches = self.podgroups.take_status()
        now = self.wall_clock()
        for source in self.framework.status_sources:
            more, events = source.take_status(now)
            patches.extend(more)
            for event in events:
                self.framework.record(event)
        for patch in patches:
            self.backend.patch_status(patch.kind, patch.namespace, patch.name, patch.status)
        return len(patches)

    # -- the cycle --------------------------------------------------------------------------------
    def schedule_one(self) -> Attempt | None:
        """Take the next pod from the queue and run one attempt; None when none is ready."""
        if not (self._allocate or self._backfill):
            return None
        pod = self.queue.pop()
        if pod is None:
            return None
        if not self._allocate and not best_effort(pod):
            # Only backfill is configured: it places pods without requests, nothing else.
            message = "no allocate action is configured: only backfill's pods without requests are placed"
            status = Status.unschedulable(message, plugin=ALLOCATE)
            return self._fail(Attempt(pod, status), status, None, message)[0]
        state = CycleState()
        attempt, assumed, row = self._scheduling_cycle(state, pod)
        if assumed is not None:
            self._binding_cycle(state, assumed, row)
        if self.keep_attempts:
            self.attempts[pod.key] = attempt
        return attempt

    def _scheduling_cycle(self, state: CycleState, pod: PodInfo) -> Scheduled:
        """PreFilter .. Reserve, Permit: the pod is placed, reserved and assumed, or reported as failed."""
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
        feasible = outcome.feasible
        if not outcome.feasible_count:
            status = Status.unschedulable(plugin="Filter")
            # The reasons as Filter saw them: preemption below may evict pods they would read.
            message = fit_error(num_nodes, outcome, None)
            message += capacity_note(self.cluster, pod, outcome, message)
            post = self.preemption.post_filter(state, pod, outcome, None)
            if post.message:
                message += f" {post.message}"
            return self._fail(Attempt(pod, status, outcome=outcome), status, post, message)
        total, scores = self.framework.run_score(state, pod, feasible)
        row = self._pick(feasible, total)
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
        permit = self.framework.run_permit(state, assumed, row)
        if permit.is_wait:
            group = self.podgroups.group_of(pod)
            key = group.key if group is not None else pod.key
            self.framework.waiting.add(key, assumed, row, state, self.clock())
            attempt.status = permit
            attempt.message = permit.message
            return attempt, None, -1
        if not permit.is_success:
            self.framework.run_unreserve(state, assumed, row)
            self.cluster.remove_pod(pod.key)
            return self._fail(attempt, permit, None, permit.message)
        return attempt, assumed, row

    def _pick(self, feasible: BoolArray, total: FloatArray) -> int:
        """The feasible row with the highest total; among equal totals, the first node name."""
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
        """The attempt failed with ``status``: reported, and the pod parked (:mod:`scheduler.failure`)."""
        nominated = self.failures.unschedulable(attempt.pod, status, attempt.outcome, post, message)
        attempt.status = status
        attempt.node = ""
        attempt.message = message
        attempt.nominated = nominated
        return attempt, None, -1

    def _binding_cycle(self, state: CycleState, assumed: PodInfo, row: int) -> None:
        """Bind the pod Permit let through, then, if it completed its gang, the gang's waiting pods."""
        group = self.podgroups.group_of(assumed)
        self._bind(assumed, row, state)
        if group is not None:
            for waiting in self.framework.waiting.release(group.key):
                self._bind(waiting.pod, waiting.row, waiting.state)

    def _bind(self, pod: PodInfo, row: int, state: CycleState) -> None:
        self.backend.bind(pod, pod.node_name, lambda outcome: self.bind_done(pod, row, state, outcome))

    def bind_done(self, pod: PodInfo, row: int, state: CycleState, outcome: Outcome) -> None:
        """The one place a bind's outcome acts on the ledger and the queue (``pod`` is assumed on
        ``row``): bound here stays charged; anything else unreserves our assumption, unless the
        watch has meanwhile put the pod where it really is (then that is the truth, left alone).
        Only a pod that is still there and unbound is retried; only that one gets PodScheduled=False."""
        key = pod.key
        if outcome.result is Result.DONE:
            self.pending.pop(key, None)
            self.queue.done(key)
            self.reasons.pop(key, None)
            self.framework.record(
                EventRecord(pod.ref, "Normal", SCHEDULED, f"Successfully assigned {key} to {pod.node_name}")
            )
            self.podgroups.pod_bound(pod)
            self.queue.on_event(ClusterEvent.POD_BOUND)
            return
        current = self.cluster.pods.get(key)
        if current is None or (current.uid == pod.uid and current.node_name == pod.node_name):
            self.framework.run_unreserve(state, pod, row)
            self.cluster.remove_pod(key)
        waiting = self.pending.get(key)
        if waiting is not None and waiting.uid != pod.uid:
            return  # a new pod of that name: not this outcome's business
        if outcome.result is Result.NOT_BOUND and waiting is not None:
            self.failures.bind_failed(pod.with_node_name(""), outcome.message)
            return
        # Bound elsewhere (the watch charges it there), gone, or its delete observed meanwhile
        # (no longer pending): nothing to retry and no condition to write.
        self.queue.done(key)
        self.reasons.pop(key, None)
        if outcome.result is Result.GONE:
            self.delete_pod(key)
        else:
            self.pending.pop(key, None)

    # -- gangs that never reach quorum ------------------------------------------------------------
    def reject_waiting(self, keys: Iterable[str] | None = None) -> int:
        """Roll back waiting gangs (all, or those in ``keys``): unreserve, forget, park; returns pods."""
        waiting = self.framework.waiting
        rolled = 0
        for key in waiting.gangs() if keys is None else sorted(keys):
            members = waiting.reject(key)
            group = self.podgroups.groups.get(key)
            for member in members:
                self.framework.run_unreserve(member.state, member.pod, member.row)
                self.cluster.remove_pod(member.pod.key)
            for member in members:
                pod = member.pod.with_node_name("")
                need = group.min_member if group is not None else 0
                message = (
                    f"PodGroup {key}: only {len(members)} of minMember {need} pod(s) could be placed"
                    if group is not None
                    else f"Permit did not allow {pod.key}"
                )
                self.failures.park(pod, message, {plugin_names.GANG})
                if pod.key in self.attempts:
                    attempt = self.attempts[pod.key]
                    attempt.status = Status.unschedulable(message, plugin=plugin_names.GANG)
                    attempt.node = ""
                    attempt.message = message
                rolled += 1
        return rolled

    def expire_waiting(self) -> int:
        """Roll back gangs that have waited longer than ``gang_timeout`` (a cluster's Permit timeout)."""
        expired = self.framework.waiting.expired(self.clock(), self.gang_timeout)
        return self.reject_waiting(expired) if expired else 0

    # -- state for reports ------------------------------------------------------------------------
    def fingerprint(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, p.node_name) for k, p in self.cluster.pods.items()))

    def group_phases(self) -> Mapping[str, str]:
        return self.podgroups.phases()
