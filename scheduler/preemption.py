"""Preemption: PostFilter's answer acted on (kube-scheduler's DefaultPreemption, ``prepareCandidate``),
and Volcano's preempt and reclaim actions.

When no node fits, the PostFilter plugins may nominate a node and name the running pods whose
eviction makes room there (design.md "Data flow"): that is capacity-scheduling's ElasticQuota
preemption, the ``preempt`` action for every pod it answers for. If they name none, the configured
``preempt`` (only for a pod no PostFilter plugin answered for) and ``reclaim`` actions
(:mod:`scheduler.actions.preempt`, :mod:`scheduler.actions.reclaim`) are tried, in the order the
configuration lists them; the first that finds a node and victims wins. Pods of a namespace an
ElasticQuota governs are never their victims while capacity-scheduling is enabled. The
victims are evicted through the
:class:`~scheduler.backend.ClusterBackend`; once an eviction is done the victim is remembered as
preempted (the report's ``Preempted`` phase; the Kubernetes feed ignores the updates its deletion
causes until the DELETE arrives), a Preempted event names the preemptor, and the scheduler forgets
the pod so the preemptor's retry sees the room.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.events import PREEMPTED, EventRecord
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.actions.preempt import preempt
from gpuq_k8s.scheduler.actions.reclaim import reclaim
from gpuq_k8s.scheduler.actions.victims import Choice
from gpuq_k8s.scheduler.backend import ClusterBackend, Outcome
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import FilterOutcome, PostFilterResult
from gpuq_k8s.scheduler.framework.runtime import PREEMPT, RECLAIM, Framework
from gpuq_k8s.scheduler.framework.status import Code, Status

Action = Callable[[Framework, PodInfo, Callable[[PodInfo], bool], FilterOutcome | None], Choice | None]
_ACTIONS: dict[str, Action] = {PREEMPT: preempt, RECLAIM: reclaim}


class Preemption:
    """Runs PostFilter for a pod no node fits and evicts the victims it names.

    ``preempted`` (pod key -> victim) is the scheduler's; ``forget`` removes an evicted pod from the
    scheduler's state (:meth:`scheduler.cycle.Scheduler.delete_pod`); ``ours`` says whether a running
    pod is this scheduler's (only those are preempt and reclaim victims).
    """

    def __init__(
        self,
        framework: Framework,
        backend: ClusterBackend,
        preempted: dict[str, PodInfo],
        forget: Callable[[str], None],
        ours: Callable[[PodInfo], bool] = lambda pod: True,
    ) -> None:
        self.framework = framework
        self.backend = backend
        self.preempted = preempted
        self.forget = forget
        self.ours = ours
        self.actions = tuple((name, _ACTIONS[name]) for name in framework.actions if name in _ACTIONS)

    def post_filter(
        self, state: CycleState, pod: PodInfo, outcome: FilterOutcome, pre: Status | None
    ) -> PostFilterResult:
        """PostFilter after a failed PreFilter (``pre``) or Filter; victims named are evicted now."""
        if pre is not None and pre.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return PostFilterResult(Status.unresolvable())
        result = PostFilterResult(Status.unschedulable())
        answered = False
        if self.framework.post_filter_plugins:
            result = self.framework.run_post_filter(state, pod, outcome)
            answered = not result.status.is_skip
            if not answered:
                result = PostFilterResult(Status.unschedulable())
        actions = [(n, a) for n, a in self.actions if not (n == PREEMPT and answered)]
        # (capacity-scheduling's ElasticQuota preemption is the preempt of a pod it answered for.)
        if actions and not result.status.is_success:
            ours = self._ours_outside_elastic_quotas()
            for name, action in actions:
                choice = action(self.framework, pod, ours, outcome)
                if choice is not None:
                    message = f"{name}: {len(choice.victims)} pod(s) evicted on node {choice.node}."
                    result = PostFilterResult(
                        Status.success(plugin=name), choice.node, choice.victims, message
                    )
                    break
        if result.status.is_success and result.victims:
            for victim in result.victims:
                self._evict(victim, pod, result.nominated_node)
        return result

    def _ours_outside_elastic_quotas(self) -> Callable[[PodInfo], bool]:
        """Who Volcano's preempt and reclaim may evict: pods of this scheduler, and, with
        capacity-scheduling enabled, none of a namespace an ElasticQuota governs (its min is a
        guarantee only capacity-scheduling's preemption may weigh, design.md Semantics 4)."""
        ours = self.ours
        if self.framework.plugin(plugin_names.CAPACITY_SCHEDULING) is None:
            return ours
        governed = {namespace for namespace, _, _ in self.framework.objects.list(kinds.ELASTIC_QUOTA)}
        if not governed:
            return ours
        return lambda pod: pod.namespace not in governed and ours(pod)

    def _evict(self, victim: PodInfo, preemptor: PodInfo, node: str) -> None:
        def done(outcome: Outcome) -> None:
            if outcome.ok:
                self.preempted[victim.key] = victim
                self.framework.record(
                    EventRecord(
                        victim.ref, "Normal", PREEMPTED, f"Preempted by {preemptor.key} on node {node}"
                    )
                )
                self.forget(victim.key)

        self.backend.evict(victim, f"preempted by {preemptor.ref}", done)
