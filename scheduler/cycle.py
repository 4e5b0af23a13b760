"""The scheduling cycle: enqueue -> PreFilter -> Filter -> (PostFilter) -> PreScore -> Score -> pick ->
Reserve -> Permit -> Bind, with Unreserve on any later failure (DESIGN "Data flow").

:class:`Scheduler` owns the cluster state, the API objects, the queue and the plugin chain, and is the
plugins' :class:`~scheduler.framework.interfaces.Handle`. It is synchronous; binds and evictions go
through the :class:`~scheduler.backend.ClusterBackend` with completion callbacks, so the same cycle
runs against the in-memory backend (``gpuq simulate``) and the Kubernetes one.

The chosen node is the feasible node with the highest total score; equal totals go to the node whose
name sorts first (DESIGN "gpuq simulate"), so a run is deterministic.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import numpy as np

from common.model.annotations import GROUP_NAME
from common.model.crd import PodGroup
from common.model.errors import GpuqError, InvalidValue
from common.model.events import FAILED_SCHEDULING, PREEMPTED, SCHEDULED, EventRecord
from common.model.nodes import NodeInfo
from common.model.pods import GPUQ_SCHEDULER, PodInfo
from scheduler.backend import ClusterBackend, Outcome
from scheduler.cluster.objects import (
    ELASTIC_QUOTA,
    GPU_RESOURCE_QUOTA,
    NAMESPACE,
    POD_GROUP,
    PRIORITY_CLASS,
    QUEUE,
    Obj,
    ObjectStore,
)
from scheduler.cluster.state import ClusterState
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    FilterOutcome,
    FloatArray,
    GroupInfo,
    PendingPodListener,
    PostFilterResult,
    StatusPatch,
    StatusSource,
)
from scheduler.framework.registry import PluginSettings, Registry
from scheduler.framework.runtime import ALLOCATE, Framework, Observer
from scheduler.framework.status import Code, Status
from scheduler.queue import SchedulingQueue

PENDING: Final = "Pending"
INQUEUE: Final = "Inqueue"
RUNNING: Final = "Running"
UNSCHEDULABLE_REASON: Final = "Unschedulable"
SCHEDULER_ERROR_REASON: Final = "SchedulerError"


class SchedulerSettings:
    """What the scheduler reads of :class:`common.model.config.SchedulerConfig`."""

    actions: tuple[str, ...]
    tiers: tuple[tuple[PluginSettings, ...], ...]


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


@dataclass(slots=True)
class _Waiting:
    pod: PodInfo
    row: int
    state: CycleState


def fit_error(num_nodes: int, outcome: FilterOutcome | None, prefilter: Status | None, post: str = "") -> str:
    """kube-scheduler's FitError message: ``0/5 nodes are available: 2 ..., 3 Insufficient cpu.``

    Each node counts under the reasons of the first plugin that rejected it; the "count reason"
    strings are sorted, as kube-scheduler sorts them, so the message is stable.
    """
    message = f"0/{num_nodes} nodes are available:"
    if prefilter is not None and prefilter.reasons:
        message += f" {prefilter.message}."
    if outcome is not None:
        histogram: Counter[str] = Counter()
        for _, result, first in outcome.results:
            if not first.any():
                continue
            for mask, reason in result.reasons():
                count = int(np.count_nonzero(mask & first))
                if count:
                    histogram[reason] += count
        parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
        if parts:
            message += f" {', '.join(parts)}."
    if post:
        message += f" {post}"
    return message


class Scheduler:
    def __init__(
        self,
        settings: Any,
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
        self.groups: dict[str, GroupInfo] = {}
        self.pending: dict[str, PodInfo] = {}
        self.members: dict[str, set[str]] = {}
        self.waiting: dict[str, list[_Waiting]] = {}
        self._waiting_since: dict[str, float] = {}
        self._held: dict[str, set[str]] = {}  # group key -> pods waiting for the group to be Inqueue
        self.attempts: dict[str, Attempt] = {}
        self.reasons: dict[str, str] = {}  # pod key -> last PodScheduled message
        self.preempted: dict[str, PodInfo] = {}
        self.changes = 0
        self._allowed: set[str] = set()
        self._dirty_groups: set[str] = set()
        self.enqueue_refusals: dict[str, str] = {}  # PodGroup key -> why it is still Pending
        self.invalid_groups: dict[str, str] = {}  # PodGroup key -> why it could not be read
        self.wall_clock = wall_clock or (lambda: datetime.now(UTC))
        self.objects.subscribe(self._object_changed)
        plugins = registry.build(self, settings.tiers)
        self.framework = Framework(self, plugins, settings.actions, observe, keep_outcomes=keep_attempts)
        interest = {p.name: p.events for p in self.framework.plugins}
        for plugin in self.framework.plugins:
            interest.update(plugin.event_groups)
        self.queue = SchedulingQueue(self.framework.sort_key, clock, interest=interest)
        self._pending_listeners = tuple(
            p for p in self.framework.plugins if isinstance(p, PendingPodListener)
        )
        self._status_sources = tuple(p for p in self.framework.plugins if isinstance(p, StatusSource))
        self._allocate = ALLOCATE in self.framework.actions

    # -- Handle -------------------------------------------------------------------------------------
    def record(self, event: EventRecord) -> None:
        self.backend.record_event(event)

    def group_of(self, pod: PodInfo) -> GroupInfo | None:
        name = pod.annotations.get(GROUP_NAME)
        return self.groups.get(f"{pod.namespace}/{name}") if name else None

    def group_members(self, group: GroupInfo) -> Sequence[PodInfo]:
        out: list[PodInfo] = []
        for key in sorted(self.members.get(group.key, ())):
            pod = self.pending.get(key) or self.cluster.pods.get(key)
            if pod is not None:
                out.append(pod)
        return out

    def ready_members(self, group: GroupInfo) -> int:
        # Waiting pods are assumed in the cluster state, so "in cluster.pods" covers all three.
        return sum(1 for key in self.members.get(group.key, ()) if key in self.cluster.pods)

    def allow_group(self, group: GroupInfo) -> None:
        self._allowed.add(group.key)

    def group(self, key: str) -> GroupInfo | None:
        return self.groups.get(key)

    def group_problem(self, key: str) -> str | None:
        return self.invalid_groups.get(key)

    def pending_pod(self, key: str) -> PodInfo | None:
        return self.pending.get(key)

    # -- informer-side inputs ---------------------------------------------------------------------
    def responsible_for(self, pod: PodInfo) -> bool:
        return pod.scheduler_name in (self.scheduler_name, "") or (
            pod.scheduler_name == "default-scheduler" and self.scheduler_name == "*"
        )

    def add_pod(self, pod: PodInfo) -> None:
        """A pod appeared or changed: bound pods count as usage, pending ones of ours are queued."""
        name = pod.annotations.get(GROUP_NAME)
        if name:
            self.members.setdefault(f"{pod.namespace}/{name}", set()).add(pod.key)
        if pod.bound:
            self.pending.pop(pod.key, None)
            self.queue.delete(pod.key)
            if pod.terminal:
                self._pod_gone(pod.key)
                for listener in self._pending_listeners:
                    listener.pending_pod_removed(pod)
                return
            if pod.holds_resources:
                self.cluster.add_pod(pod)
            else:
                self._pod_gone(pod.key)
            return
        if pod.terminal or pod.deleting or not self.responsible_for(pod):
            previous = self.pending.pop(pod.key, None)
            if previous is not None:
                self.queue.delete(pod.key)
                for listener in self._pending_listeners:
                    listener.pending_pod_removed(previous)
            return
        self.pending[pod.key] = pod
        for listener in self._pending_listeners:
            listener.pending_pod_added(pod)
        self._gate(pod)
        group = self.group_of(pod)
        if group is not None:
            self.queue.on_event(ClusterEvent.POD_ADDED, only=lambda p: self.group_of(p) is group)

    def _gate_members(self, group: GroupInfo) -> None:
        """A PodGroup that appears after some of its pods: those queued meanwhile wait for enqueue
        like the rest (until then gang's PreFilter kept them from being scheduled alone)."""
        if not self.framework.enqueue_enabled or group.phase != PENDING:
            return
        for pod_key in sorted(self.members.get(group.key, ())):
            if pod_key in self.pending:
                self.queue.delete(pod_key)
                self._held.setdefault(group.key, set()).add(pod_key)

    def _gate(self, pod: PodInfo) -> None:
        """Queue ``pod`` unless its PodGroup still waits for enqueue."""
        group = self.group_of(pod)
        if group is not None and self.framework.enqueue_enabled and group.phase == PENDING:
            self._held.setdefault(group.key, set()).add(pod.key)
            return
        self.queue.add(pod)

    def delete_pod(self, key: str) -> None:
        pending = self.pending.pop(key, None)
        if pending is not None:
            for listener in self._pending_listeners:
                listener.pending_pod_removed(pending)
        self.queue.delete(key)
        for held in self._held.values():
            held.discard(key)
        for members in self.members.values():
            members.discard(key)
        self._pod_gone(key)

    def _pod_gone(self, key: str) -> None:
        if self.cluster.remove_pod(key) is not None:
            self.changes += 1
            self.queue.on_event(ClusterEvent.POD_DELETED)

    def set_node(self, node: NodeInfo) -> None:
        event = ClusterEvent.NODE_CHANGED if node.name in self.cluster.row_of else ClusterEvent.NODE_ADDED
        self.cluster.set_node(node)
        self.queue.on_event(event)

    def remove_node(self, name: str) -> None:
        for pod in self.cluster.remove_node(name):
            self.queue.on_event(ClusterEvent.POD_DELETED)
            del pod

    def put_object(self, obj: Obj) -> None:
        self.objects.put(obj)

    def _object_changed(self, kind: str, namespace: str, name: str, obj: Obj | None) -> None:
        if kind == POD_GROUP:
            key = f"{namespace}/{name}"
            if obj is None:
                self.groups.pop(key, None)
                self.invalid_groups.pop(key, None)
                self._release_held(key)  # back to the queue, where gang says why they wait
            else:
                try:
                    model = PodGroup.from_dict(obj)
                except GpuqError as err:
                    # Semantics 3: say so (the caller records the Warning) and lose nothing: a group
                    # read before keeps its last valid version; its pods are told why they wait.
                    self.invalid_groups[key] = str(err)
                    raise
                self.invalid_groups.pop(key, None)
                previous = self.groups.get(key)
                phase = model.phase if previous is None else previous.phase
                group = self.groups[key] = GroupInfo(
                    namespace, name, model.spec.minMember, model.queue, phase, model
                )
                if previous is None:
                    self._gate_members(group)
            self.queue.on_event(ClusterEvent.PODGROUP_CHANGED)
        elif kind in (QUEUE, ELASTIC_QUOTA, GPU_RESOURCE_QUOTA, PRIORITY_CLASS, NAMESPACE):
            # A Namespace: its deletion starting retires its ElasticQuota (capacity-scheduling).
            self.queue.on_event(ClusterEvent.QUOTA_CHANGED)

    # -- enqueue action ---------------------------------------------------------------------------
    def run_enqueue(self) -> int:
        """Move Pending PodGroups to Inqueue when the enqueue plugins allow; returns how many moved."""
        moved = 0
        for key in sorted(self.groups):
            group = self.groups[key]
            if group.phase != PENDING:
                continue
            if self.framework.enqueue_enabled:
                status = self.framework.run_enqueue(group)
                if not status.is_success:
                    self.enqueue_refusals[key] = status.message
                    continue
            self.enqueue_refusals.pop(key, None)
            self._set_group_phase(group, INQUEUE)
            moved += 1
            self._release_held(key)
        return moved

    def _release_held(self, group_key: str) -> None:
        """Queue the pending pods held for the enqueue of PodGroup ``group_key``."""
        for pod_key in sorted(self._held.pop(group_key, set())):
            pod = self.pending.get(pod_key)
            if pod is not None:
                self.queue.add(pod)

    def _set_group_phase(self, group: GroupInfo, phase: str) -> None:
        if group.phase == phase:
            return
        left_inqueue = group.phase == INQUEUE
        group.phase = phase
        if left_inqueue:
            # After the phase is set, so plugins see where the group went (Running keeps a reservation).
            self.framework.run_dequeued(group)
        self.changes += 1
        self._dirty_groups.add(group.key)

    # -- batched status sync ------------------------------------------------------------------------
    def sync_status(self) -> int:
        """Write every dirty custom-resource status once (PodGroup phases, quota usage); returns how many.

        Called after a batch of cycles (the simulator after each round, the cluster scheduler on a
        timer), never per pod: a hundred pods bound in one namespace make one status patch.
        """
        patches: list[StatusPatch] = []
        for key in sorted(self._dirty_groups):
            group = self.groups.get(key)
            if group is None:
                continue
            status: dict[str, Any] = {}
            if group.model is not None:
                status = group.model.status.model_dump(exclude_defaults=True)
            status["phase"] = group.phase
            running = sum(1 for k in self.members.get(group.key, ()) if k in self.cluster.pods)
            if running:
                status["running"] = running
            patches.append(StatusPatch(POD_GROUP, group.namespace, group.name, status))
        self._dirty_groups.clear()
        now = self.wall_clock()
        for source in self._status_sources:
            more, events = source.take_status(now)
            patches.extend(more)
            for event in events:
                self.record(event)
        for patch in patches:
            self.backend.patch_status(patch.kind, patch.namespace, patch.name, patch.status)
        return len(patches)

    # -- the cycle --------------------------------------------------------------------------------
    def schedule_one(self) -> Attempt | None:
        """Take the next pod from the queue and run one attempt; None when none is ready."""
        if not self._allocate:
            return None
        pod = self.queue.pop()
        if pod is None:
            return None
        attempt = self._attempt(pod)
        if self.keep_attempts:
            self.attempts[pod.key] = attempt
        return attempt

    def _attempt(self, pod: PodInfo) -> Attempt:
        state = CycleState()
        num_nodes = self.cluster.node_count
        try:
            pre = self.framework.run_pre_filter(state, pod)
        except InvalidValue as err:
            return self._fail(pod, Status.unresolvable(str(err), plugin="PreFilter"), None, None, str(err))
        if not pre.is_success:
            outcome = FilterOutcome(np.zeros(self.cluster.n, dtype=np.bool_), ())
            if pre.code is Code.UNSCHEDULABLE and self.framework.post_filter_plugins:
                # Preemption needs to know which nodes the victims' removal could help.
                outcome = self.framework.run_filter(state, pod)
            post = self._post_filter(state, pod, outcome, pre)
            message = fit_error(num_nodes, None, pre, post.message)
            return self._fail(pod, pre, None, post, message)
        outcome = self.framework.run_filter(state, pod)
        feasible = outcome.feasible
        if not outcome.feasible_count:
            status = Status.unschedulable(plugin="Filter")
            # The reasons as Filter saw them: preemption below may evict pods they would read.
            message = fit_error(num_nodes, outcome, None)
            post = self._post_filter(state, pod, outcome, None)
            if post.message:
                message += f" {post.message}"
            return self._fail(pod, status, outcome, post, message)
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
            return self._fail(pod, reserved, outcome, None, message, attempt=attempt)
        self.cluster.add_pod(assumed)
        permit = self.framework.run_permit(state, assumed, row)
        if permit.is_wait:
            group = self.group_of(pod)
            key = group.key if group is not None else pod.key
            self.waiting.setdefault(key, []).append(_Waiting(assumed, row, state))
            self._waiting_since.setdefault(key, self.clock())
            attempt.status = permit
            attempt.message = permit.message
            return attempt
        if not permit.is_success:
            self.framework.run_unreserve(state, assumed, row)
            self.cluster.remove_pod(pod.key)
            return self._fail(pod, permit, outcome, None, permit.message, attempt=attempt)
        group = self.group_of(pod)
        self._bind(assumed, row, state)
        if group is not None and group.key in self._allowed:
            self._allowed.discard(group.key)
            for waiting in self.waiting.pop(group.key, []):
                self._bind(waiting.pod, waiting.row, waiting.state)
            self._waiting_since.pop(group.key, None)
        return attempt

    def _pick(self, feasible: BoolArray, total: FloatArray) -> int:
        """The feasible row with the highest total; among equal totals, the first node name."""
        order = self.cluster.rank_order()
        # Gathered by node name, the first maximum is the tie-break's winner: one argmax, no tie scan.
        ranked = np.where(feasible, total, -np.inf).take(order)
        i = int(ranked.argmax())
        if math.isnan(ranked[i]):
            return 0  # as the former full-width argmin over no candidate did
        return int(order[i])

    def _post_filter(
        self, state: CycleState, pod: PodInfo, outcome: FilterOutcome, pre: Status | None
    ) -> PostFilterResult:
        if pre is not None and pre.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return PostFilterResult(Status.unresolvable())
        if not self.framework.post_filter_plugins:
            return PostFilterResult(Status.unschedulable())
        result = self.framework.run_post_filter(state, pod, outcome)
        if result.status.is_success and result.victims:
            for victim in result.victims:
                self._evict(victim, pod, result.nominated_node)
        return result

    def _evict(self, victim: PodInfo, preemptor: PodInfo, node: str) -> None:
        def done(outcome: Outcome) -> None:
            if outcome.ok:
                self.preempted[victim.key] = victim
                self.record(
                    EventRecord(
                        victim.ref, "Normal", PREEMPTED, f"Preempted by {preemptor.key} on node {node}"
                    )
                )
                self.delete_pod(victim.key)

        self.backend.evict(victim, f"preempted by {preemptor.ref}", done)

    def _fail(
        self,
        pod: PodInfo,
        status: Status,
        outcome: FilterOutcome | None,
        post: PostFilterResult | None,
        message: str,
        *,
        attempt: Attempt | None = None,
    ) -> Attempt:
        rejected_by = {status.plugin} if status.plugin not in ("", "Filter", "PreFilter") else set()
        if outcome is not None:
            rejected_by |= {name for name, _, first in outcome.results if first.any()}
        nominated = post.nominated_node if post is not None and post.status.is_success else ""
        self.reasons[pod.key] = message
        self.backend.set_pod_condition(pod, UNSCHEDULABLE_REASON, message, nominated)
        self.record(EventRecord(pod.ref, "Warning", FAILED_SCHEDULING, message))
        self.queue.unschedulable(pod, rejected_by, message)
        if nominated and post is not None and post.victims:
            # The victims are gone: retry the preemptor now, ahead of lower-ordered pods that would
            # otherwise take the room it made (kube-scheduler protects it with the nomination).
            # Never without victims: nothing changed, and the retry would loop.
            self.queue.activate(pod.key)
        if attempt is None:
            attempt = Attempt(pod, status, outcome=outcome)
        attempt.status = status
        attempt.node = ""
        attempt.message = message
        attempt.nominated = nominated
        return attempt

    def _bind(self, pod: PodInfo, row: int, state: CycleState) -> None:
        def done(outcome: Outcome) -> None:
            if outcome.ok:
                self.pending.pop(pod.key, None)
                self.queue.done(pod.key)
                self.reasons.pop(pod.key, None)
                self.changes += 1
                self.record(
                    EventRecord(
                        pod.ref, "Normal", SCHEDULED, f"Successfully assigned {pod.key} to {pod.node_name}"
                    )
                )
                group = self.group_of(pod)
                if group is not None and self.ready_members(group) >= max(group.min_member, 1):
                    self._set_group_phase(group, RUNNING)
            else:
                self.framework.run_unreserve(state, pod, row)
                self.cluster.remove_pod(pod.key)
                original = pod.with_node_name("")
                self.reasons[pod.key] = outcome.message
                self.backend.set_pod_condition(original, SCHEDULER_ERROR_REASON, outcome.message)
                self.queue.requeue(original)

        self.backend.bind(pod, pod.node_name, done)

    # -- gangs that never reach quorum ------------------------------------------------------------
    def reject_waiting(self, keys: Iterable[str] | None = None) -> int:
        """Roll back waiting gangs (all, or those in ``keys``): unreserve, forget, park; returns pods."""
        rolled = 0
        for key in sorted(self.waiting if keys is None else keys):
            members = self.waiting.pop(key, [])
            self._waiting_since.pop(key, None)
            group = self.groups.get(key)
            for waiting in members:
                self.framework.run_unreserve(waiting.state, waiting.pod, waiting.row)
                self.cluster.remove_pod(waiting.pod.key)
            for waiting in members:
                pod = waiting.pod.with_node_name("")
                need = group.min_member if group is not None else 0
                message = (
                    f"PodGroup {key}: only {len(members)} of minMember {need} pod(s) could be placed"
                    if group is not None
                    else f"Permit did not allow {pod.key}"
                )
                self.reasons[pod.key] = message
                self.backend.set_pod_condition(pod, UNSCHEDULABLE_REASON, message)
                self.record(EventRecord(pod.ref, "Warning", FAILED_SCHEDULING, message))
                self.queue.unschedulable(pod, {"gang"}, message)
                if pod.key in self.attempts:
                    attempt = self.attempts[pod.key]
                    attempt.status = Status.unschedulable(message, plugin="gang")
                    attempt.node = ""
                    attempt.message = message
                rolled += 1
        return rolled

    def expire_waiting(self) -> int:
        """Roll back gangs that have waited longer than ``gang_timeout`` (a cluster's Permit timeout)."""
        now = self.clock()
        expired = [k for k, since in self._waiting_since.items() if now - since >= self.gang_timeout]
        return self.reject_waiting(expired) if expired else 0

    # -- state for reports ------------------------------------------------------------------------
    def fingerprint(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, p.node_name) for k, p in self.cluster.pods.items()))

    def group_phases(self) -> Mapping[str, str]:
        return {k: g.phase for k, g in self.groups.items()}
