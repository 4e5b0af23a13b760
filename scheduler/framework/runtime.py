"""Runs the configured plugins at each extension point, in configuration order, timing each point.

This is the only place that knows the order of a cycle's steps within one extension point and how
the plugins' answers combine: filters AND their masks (a row is reported under the first plugin
that rejected it, as kube-scheduler stops at the first failing filter per node), scores add up
(as Volcano sums node-order scores), Reserve is undone in reverse order on the first failure, and
Volcano's session points (enqueue, queue and job order, preemptable, reclaimable, overused,
allocatable, job starving) combine tier by tier as :mod:`scheduler.framework.tiers` says.

It also honours the configuration's Volcano switches by extension point, and combines Volcano's
session points tier by tier (:mod:`scheduler.framework.session`, which it inherits).

The framework is also the plugins' :class:`~scheduler.framework.interfaces.Handle`, as
kube-scheduler's frameworkImpl is: it builds them with itself as their handle, holds the pods
waiting in Permit (:mod:`scheduler.framework.waiting`), and answers their PodGroup and pending-pod
queries from the scheduler's :class:`~scheduler.groups.GroupTracker`, which it knows only as
:class:`~scheduler.framework.interfaces.PodGroups` (the tracker runs the enqueue action through it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final, TypeVar, cast

import numpy as np

from gpuq_k8s.common.model import switches as sw
from gpuq_k8s.common.model.disruption_budget import Budgets
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.prebind import PreBindPlan
from gpuq_k8s.common.model.reservation import Lock
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.cluster.state import ClusterState
from gpuq_k8s.scheduler.framework import tiers as combine
from gpuq_k8s.scheduler.framework.budgets import BudgetView
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    EnqueuePlugin,
    EventSink,
    FilterOutcome,
    FilterPlugin,
    FilterResult,
    FloatArray,
    GroupInfo,
    Handle,
    PendingPodListener,
    PermitPlugin,
    Plugin,
    PodGroups,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueingHint,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
    StatusSource,
)
from gpuq_k8s.scheduler.framework.session import SessionPoints
from gpuq_k8s.scheduler.framework.status import Code, PluginInputError, Status
from gpuq_k8s.scheduler.framework.waiting import WaitingPods
from gpuq_k8s.scheduler.nominator import Nominator

ENQUEUE: Final = "enqueue"
ALLOCATE: Final = "allocate"
BACKFILL: Final = "backfill"
PREEMPT: Final = "preempt"
RECLAIM: Final = "reclaim"
RESERVE: Final = "reserve"


# extension point name, seconds: the metrics module turns these into
# gpuq_scheduler_framework_extension_point_duration_seconds{extension_point}.
Observer = Callable[[str, float], None]
T = TypeVar("T")


class Framework(SessionPoints):
    """The plugin chain of one scheduler and the :class:`Handle` its plugins hold.

    ``build_plugins`` makes the plugins given their handle (the registry, from the configuration's
    tiers); ``groups`` answers the PodGroup and pending-pod queries; ``record`` takes their events.
    """

    def __init__(
        self,
        cluster: ClusterState,
        objects: ObjectStore,
        groups: PodGroups,
        record: EventSink,
        build_plugins: Callable[[Handle], Iterable[Plugin]],
        *,
        actions: Sequence[str] = (ENQUEUE, ALLOCATE, PREEMPT),
        tiers: Sequence[Sequence[str]] = (),
        switches: Mapping[str, Mapping[str, bool]] | None = None,
        action_arguments: Mapping[str, Mapping[str, Any]] | None = None,
        observe: Observer | None = None,
        keep_outcomes: bool = False,
        nominator: Nominator | None = None,
    ) -> None:
        # -- the Handle ---------------------------------------------------------------------------
        self.cluster = cluster
        self.nominator = nominator if nominator is not None else Nominator(cluster)
        self.objects = objects
        self.record = record
        self.waiting = WaitingPods()
        # The reserve action's lock (scheduler/actions/reserve.py), read by the reservation Filter.
        self.reservation_lock: Lock | None = None
        self._shared: dict[type, object] = {}
        # The tracker's own queries, bound rather than wrapped: plugins ask them once or more per pod.
        self.group_of = groups.group_of
        self.group_members = groups.group_members
        self.ready_members = groups.ready_members
        self.group_reserves = groups.reserves
        self.group = groups.groups.get
        self.group_problem = groups.invalid.get
        self.pending_pod = groups.pending.get
        self._pending = groups.pending
        self._budgets = BudgetView(objects, record)
        self.queue_of = groups.queue_of
        # -- the plugins --------------------------------------------------------------------------
        # Attempts outlive their cycle (explanations): Filter and Score results are then copied out
        # of the plugins' caches at once instead of read lazily within the attempt.
        self.keep_outcomes = keep_outcomes
        self.actions = tuple(actions)
        self._switches = {name: dict(values) for name, values in (switches or {}).items()}
        self._action_arguments = {k: dict(v) for k, v in (action_arguments or {}).items()}
        self._observe = observe
        # Built last: a plugin may read its handle as it is made (kube-scheduler's NewFramework).
        plugins = self.plugins = tuple(build_plugins(self))
        self._init_tiers(plugins, tiers)
        on = self._enabled
        # Tier order (plugins of no tier last, as _group_in_tiers places them).
        self.queue_sorts = tuple(
            p
            for tier in self._tiers
            for p in tier
            if isinstance(p, QueueSortPlugin) and (on(p, sw.JOB_ORDER) or on(p, sw.TASK_ORDER))
        )
        self.enqueue_tiers: tuple[tuple[EnqueuePlugin, ...], ...] = self._tiered(
            EnqueuePlugin, sw.JOB_ENQUEUED
        )
        self.enqueue_plugins = tuple(p for tier in self.enqueue_tiers for p in tier)
        # PreEnqueue keeps a pod out of the queue altogether; a member's follows its entry's
        # enablePredicate, and SchedulingGates, which no configuration names, is always on.
        self.pre_enqueue_plugins: tuple[PreEnqueuePlugin, ...] = self._flat(PreEnqueuePlugin, sw.PREDICATE)
        self.pre_filter_plugins: tuple[PreFilterPlugin, ...] = self._flat(PreFilterPlugin, sw.PREDICATE)
        self.filter_plugins: tuple[FilterPlugin, ...] = self._flat(FilterPlugin, sw.PREDICATE)
        self.post_filter_plugins: tuple[PostFilterPlugin, ...] = (
            self._flat(PostFilterPlugin, sw.PREEMPTABLE) if PREEMPT in self.actions else ()
        )
        # A plugin whose scoring its configuration switches off (weight 0) takes no part in scoring.
        scoring_off = {p.name for p in plugins if isinstance(p, ScorePlugin) and not p.scoring}
        pre_score: tuple[PreScorePlugin, ...] = self._flat(PreScorePlugin, sw.NODE_ORDER)
        score: tuple[ScorePlugin, ...] = self._flat(ScorePlugin, sw.NODE_ORDER)
        self.pre_score_plugins = tuple(p for p in pre_score if p.name not in scoring_off)
        self.score_plugins = tuple(p for p in score if p.name not in scoring_off)
        self.reserve_plugins = tuple(p for p in plugins if isinstance(p, ReservePlugin))
        self.permit_plugins: tuple[PermitPlugin, ...] = self._flat(PermitPlugin, sw.JOB_READY)
        # No Volcano switch governs PreBind (its session has none): every PreBind plugin built runs.
        self.pre_bind_plugins = tuple(p for p in plugins if isinstance(p, PreBindPlugin))
        self._init_session_points()
        self.pending_listeners = tuple(p for p in plugins if isinstance(p, PendingPodListener))
        self.status_sources = tuple(p for p in plugins if isinstance(p, StatusSource))

    def action_arguments(self, action: str) -> Mapping[str, Any]:
        """The ``configurations:`` arguments of ``action`` (empty when the section names it not)."""
        return self._action_arguments.get(action, {})

    def shared(self, kind: type[T], make: Callable[[], T]) -> T:
        """The plugins' shared object of class ``kind`` (:meth:`Handle.shared`)."""
        value = self._shared.get(kind)
        if value is None:
            value = self._shared[kind] = make()
        return cast(T, value)

    def allow_group(self, group: GroupInfo) -> None:
        self.waiting.allow(group.key)

    def running_on(self, row: int) -> tuple[PodInfo, ...]:
        """The pods bound or assumed on node row ``row``, without the nominated pods counted there
        for this attempt (they hold room, they do not run: never victims)."""
        pods = tuple(self.cluster.pods_on[row].values())
        counted = self.nominator.is_counted
        return tuple(p for p in pods if not counted(p.key)) if self.nominator.nominations else pods

    # -- preemption's dry run (kube-scheduler's SelectVictimsOnNode asks these) ---------------------
    def disruption_budgets(self) -> Budgets:
        """The PodDisruptionBudgets with what each allows now (:mod:`scheduler.framework.budgets`)."""
        return self._budgets.budgets(lambda: (*self.cluster.pods.values(), *self._pending.values()))

    def fits_without(
        self,
        pod: PodInfo,
        row: int,
        removed: Sequence[PodInfo],
        queue_ok: Callable[[PodInfo], bool] | None = None,
    ) -> bool:
        """Would ``pod`` pass its queue's check, PreFilter and Filter on node row ``row`` with the pods
        ``removed`` taken off the cluster? Every plugin sees them gone (the cluster state tells its
        listeners, so the quota ledgers release them too, and the placement rules recount), as
        kube-scheduler runs its filters on a node with the victims removed. The cluster is restored
        before this returns."""
        cluster = self.cluster
        taken = [p for p in removed if cluster.remove_pod(p.key) is not None]
        try:
            if not (queue_ok(pod) if queue_ok is not None else self.queue_check(pod).is_success):
                return False  # the queue would still be overused, or could still not be charged the pod
            state = CycleState()
            try:
                if not self.run_pre_filter(state, pod).is_success:
                    return False
            except PluginInputError:
                return False
            return bool(self.run_filter(state, pod).feasible[row])
        finally:
            for victim in taken:
                cluster.add_pod(victim)

    @property
    def interest(self) -> Mapping[str, frozenset[ClusterEvent]]:
        """The events after which a pod each plugin (or plugin:kind) rejected is worth retrying."""
        interest = {p.name: p.events for p in self.plugins}
        for plugin in self.plugins:
            interest.update(plugin.event_groups)
        return interest

    @property
    def hints(self) -> Mapping[str, QueueingHint]:
        """The queueing hints of the plugins that give one (kube-scheduler's QueueingHintFn), by name."""
        return {
            p.name: p.queueing_hint for p in self.plugins if type(p).queueing_hint is not Plugin.queueing_hint
        }

    @property
    def enqueue_enabled(self) -> bool:
        return ENQUEUE in self.actions

    def plugin(self, name: str) -> Plugin | None:
        return next((p for p in self.plugins if p.name == name), None)

    def _timed(self, point: str, started: float) -> None:
        if self._observe is not None:
            self._observe(point, time.perf_counter() - started)

    @property
    def sort_keys_live(self) -> bool:
        """The queue must read a pod's key again when it reaches the head (QueueSortPlugin.live)."""
        return any(plugin.live for plugin in self.queue_sorts)

    def sort_key(self, pod: PodInfo) -> tuple[Any, ...]:
        """The enabled QueueSort plugins' keys in tier order, then creation time and namespace/name:
        the first plugin that tells two pods apart decides (Volcano's job and task order functions
        take the first non-zero verdict), and equal pods keep a deterministic order."""
        sorts = self.queue_sorts
        if not sorts:
            return (pod.key,)
        if len(sorts) == 1:
            return (*sorts[0].sort_key(pod), pod.creation_timestamp, pod.namespace, pod.name)
        parts = tuple(part for plugin in sorts for part in plugin.sort_key(pod))
        return (*parts, pod.creation_timestamp, pod.namespace, pod.name)

    # -- enqueue ----------------------------------------------------------------------------------
    def run_enqueue(self, group: GroupInfo) -> Status:
        started = time.perf_counter()
        try:

            def ask(plugin: EnqueuePlugin) -> Status:
                status = plugin.enqueue(group)
                return status.with_plugin(plugin.name) if status.is_rejected else status

            status = combine.enqueueable(self.enqueue_tiers, ask)
            if status.is_rejected:
                return status
            for plugin in self.enqueue_plugins:
                plugin.enqueued(group)
            return Status.success()
        finally:
            self._timed("Enqueue", started)

    def run_enqueued(self, group: GroupInfo) -> None:
        """``group`` is Inqueue already (found so: enqueued by a previous leader or before a restart):
        every enqueue plugin reserves for it as if this scheduler had admitted it."""
        for plugin in self.enqueue_plugins:
            plugin.enqueued(group)

    @contextmanager
    def enqueue_pass(self) -> Iterator[None]:
        """One pass of the enqueue action (:meth:`EnqueuePlugin.enqueue_pass` before and after)."""
        for plugin in self.enqueue_plugins:
            plugin.enqueue_pass(True)
        try:
            yield
        finally:
            for plugin in self.enqueue_plugins:
                plugin.enqueue_pass(False)

    def run_dequeued(self, group: GroupInfo) -> None:
        for plugin in self.enqueue_plugins:
            plugin.dequeued(group)

    # -- pre-enqueue ------------------------------------------------------------------------------
    def run_pre_enqueue(self, pod: PodInfo) -> Status:
        """kube-scheduler's PreEnqueue: the first refusal (with its plugin), else Success."""
        started = time.perf_counter()
        try:
            for plugin in self.pre_enqueue_plugins:
                status = plugin.pre_enqueue(pod)
                if not status.is_success:
                    return status.with_plugin(plugin.name)
            return Status.success()
        finally:
            self._timed("PreEnqueue", started)

    # -- filter -----------------------------------------------------------------------------------
    def run_pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        started = time.perf_counter()
        try:
            for plugin in self.pre_filter_plugins:
                try:
                    status = plugin.pre_filter(state, pod)
                except InvalidValue as err:
                    raise PluginInputError(plugin.name, "PreFilter", err) from err
                if status.is_skip:
                    state.skip_filter.add(plugin.name)
                elif not status.is_success:
                    return status.with_plugin(plugin.name)
            return Status.success()
        finally:
            self._timed("PreFilter", started)

    def run_filter(self, state: CycleState, pod: PodInfo) -> FilterOutcome:
        started = time.perf_counter()
        cluster = self.cluster
        n = cluster.n
        alive = cluster.alive[:n]
        feasible: BoolArray = alive.copy()
        verdicts: list[tuple[str, FilterResult]] = []
        count_nonzero = np.count_nonzero
        state.feasible = feasible
        for plugin in self.filter_plugins:
            if plugin.name in state.skip_filter or not count_nonzero(feasible):
                continue
            result = plugin.filter(state, pod)
            feasible &= result.passed
            verdicts.append((plugin.name, result))
        state.feasible = None
        # Which plugin rejected which row first is worked out only when somebody reads it: a failed
        # attempt (its message, PostFilter), a Reserve that refuses, or a kept explanation.
        if self.keep_outcomes:
            # Kept past the attempt: copy the verdicts and their reasons out of the plugins' caches
            # and live state now, as they stand at Filter time.
            verdicts = [(name, _frozen(result)) for name, result in verdicts]
            alive = alive.copy()
        count = int(count_nonzero(feasible))
        outcome = FilterOutcome(feasible, pending=(alive, tuple(verdicts)), feasible_count=count)
        if self.keep_outcomes or not count:
            outcome.results  # noqa: B018 - worked out while the plugins' arrays are current
        self._timed("Filter", started)
        return outcome

    def run_post_filter(self, state: CycleState, pod: PodInfo, outcome: FilterOutcome) -> PostFilterResult:
        started = time.perf_counter()
        try:
            # Skip when every plugin skipped: nobody answered for the pod (Volcano's preempt then may).
            last = PostFilterResult(Status.skip())
            for plugin in self.post_filter_plugins:
                result = plugin.post_filter(state, pod, outcome)
                if result.status.is_success:
                    return result
                if result.status.code is not Code.SKIP:
                    last = result
            return last
        finally:
            self._timed("PostFilter", started)

    # -- score ------------------------------------------------------------------------------------
    def run_score(
        self, state: CycleState, pod: PodInfo, feasible: BoolArray
    ) -> tuple[FloatArray, dict[str, FloatArray]]:
        """The total over all node rows and each plugin's own scores (for explanations)."""
        started = time.perf_counter()
        for pre in self.pre_score_plugins:
            status = pre.pre_score(state, pod, feasible)
            if status.is_skip:
                state.skip_score.add(pre.name)
        self._timed("PreScore", started)
        started = time.perf_counter()
        total: FloatArray = np.zeros(feasible.shape[0], dtype=np.float64)
        per_plugin: dict[str, FloatArray] = {}
        for plugin in self.score_plugins:
            if plugin.name in state.skip_score:
                continue
            scores = plugin.score(state, pod, feasible)
            total += scores
            per_plugin[plugin.name] = scores.copy() if self.keep_outcomes else scores
        self._timed("Score", started)
        return total, per_plugin

    # -- reserve / permit -------------------------------------------------------------------------
    def run_reserve(self, state: CycleState, pod: PodInfo, row: int) -> Status:
        started = time.perf_counter()
        try:
            for i, plugin in enumerate(self.reserve_plugins):
                status = plugin.reserve(state, pod, row)
                if not status.is_success:
                    for done in reversed(self.reserve_plugins[:i]):
                        done.unreserve(state, pod, row)
                    return status.with_plugin(plugin.name)
            return Status.success()
        finally:
            self._timed("Reserve", started)

    def run_unreserve(self, state: CycleState, pod: PodInfo, row: int) -> None:
        started = time.perf_counter()
        for plugin in reversed(self.reserve_plugins):
            plugin.unreserve(state, pod, row)
        self._timed("Unreserve", started)

    def run_permit(self, state: CycleState, pod: PodInfo, row: int) -> Status:
        started = time.perf_counter()
        try:
            waiting: list[Status] = []
            for plugin in self.permit_plugins:
                status = plugin.permit(state, pod, row)
                if status.is_wait:
                    waiting.append(status.with_plugin(plugin.name))
                elif not status.is_success:
                    return status.with_plugin(plugin.name)
            if not waiting:
                return Status.success()
            # The pod waits as long as the most impatient plugin allows (kube-scheduler's timeout
            # per Permit plugin: the first that expires rejects it).
            timeouts = [w.timeout for w in waiting if w.timeout is not None]
            first = waiting[0]
            return Status.wait(first.message, first.plugin, min(timeouts) if timeouts else None)
        finally:
            self._timed("Permit", started)

    # -- pre-bind -----------------------------------------------------------------------------------
    def run_pre_bind(self, state: CycleState, pod: PodInfo, row: int) -> tuple[list[PreBindPlan], Status]:
        """Each PreBind plugin's plan for the assumed ``pod`` on ``row``, in order (Skip: none), or the
        first rejection with its plugin (the binding then fails)."""
        started = time.perf_counter()
        plans: list[PreBindPlan] = []
        try:
            for plugin in self.pre_bind_plugins:
                answer = plugin.pre_bind(state, pod, row)
                if isinstance(answer, PreBindPlan):
                    plans.append(answer)
                elif answer.is_rejected:
                    return plans, answer.with_plugin(plugin.name)
            return plans, Status.success()
        finally:
            self._timed("PreBind", started)


def _frozen(result: FilterResult) -> FilterResult:
    """``result`` as it stands now, detached from the plugin's caches and live state."""
    reasons = tuple((mask.copy(), message) for mask, message in result.reasons())
    unresolvable = None if result.unresolvable is None else result.unresolvable.copy()
    return FilterResult(result.passed.copy(), lambda: reasons, unresolvable, result.detail)
