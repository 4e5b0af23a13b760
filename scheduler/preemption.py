"""Preemption: PostFilter's answer acted on (kube-scheduler's DefaultPreemption, ``prepareCandidate``),
and Volcano's preempt and reclaim actions.

When no node fits, the PostFilter plugins may nominate a node and name the running pods whose
eviction makes room there (design.md "Data flow"): that is capacity-scheduling's ElasticQuota
preemption, the ``preempt`` action for every pod it answers for. If they name none, the configured
``preempt`` (only for a pod no PostFilter plugin answered for) and ``reclaim`` actions
(:mod:`scheduler.actions.preempt`, :mod:`scheduler.actions.reclaim`) are tried, in the order the
configuration lists them; the first that finds a node and victims wins. Pods of a namespace an
ElasticQuota governs are never their victims while capacity-scheduling is enabled.

The preemptor is nominated to the node (:class:`~scheduler.nominator.Nominator`, design.md
Semantics 18) and the victims are evicted through the :class:`~scheduler.backend.ClusterBackend`,
remembered as preempted meanwhile (the report's ``Preempted`` phase; the eligibility rule below), with
a Preempted event naming the preemptor. A victim deleted with a grace period goes on counting, on
its node and its quotas, until its delete is seen; one the backend reports gone at once (``gpuq
simulate``) is forgotten then. A nominated pod whose victims are still terminating is not eligible
to preempt again (:func:`common.model.nomination.eligible_to_preempt`): it waits for them.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.events import PREEMPTED, EventRecord
from gpuq_k8s.common.model.nomination import eligible_to_preempt
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.actions.preempt import preempt
from gpuq_k8s.scheduler.actions.reclaim import reclaim
from gpuq_k8s.scheduler.actions.victims import Choice
from gpuq_k8s.scheduler.backend import ClusterBackend, Outcome, Result
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.results import FilterOutcome, PostFilterResult
from gpuq_k8s.scheduler.framework.runtime import PREEMPT, RECLAIM, Framework
from gpuq_k8s.scheduler.framework.status import Code, Status
from gpuq_k8s.scheduler.nominator import Nominator

Action = Callable[[Framework, PodInfo, Callable[[PodInfo], bool], FilterOutcome | None], Choice | None]
_ACTIONS: dict[str, Action] = {PREEMPT: preempt, RECLAIM: reclaim}


class Preemption:
    """Runs PostFilter for a pod no node fits, nominates it and evicts the victims named.

    ``preempted`` (pod key -> victim) is the scheduler's; ``forget`` removes a victim the backend
    reports gone from the scheduler's state (:meth:`scheduler.cycle.Scheduler.delete_pod`); ``ours``
    says whether a running pod is this scheduler's (only those are preempt and reclaim victims).
    """

    def __init__(
        self,
        framework: Framework,
        backend: ClusterBackend,
        preempted: dict[str, PodInfo],
        nominator: Nominator,
        *,
        forget: Callable[[str], None],
        ours: Callable[[PodInfo], bool] = lambda pod: True,
    ) -> None:
        self.framework = framework
        self.backend = backend
        self.preempted = preempted
        self.nominator = nominator
        self.forget = forget
        self.ours = ours
        self.actions = tuple((name, _ACTIONS[name]) for name in framework.actions if name in _ACTIONS)

    def post_filter(
        self, state: CycleState, pod: PodInfo, outcome: FilterOutcome, pre: Status | None
    ) -> PostFilterResult:
        """PostFilter after a failed PreFilter (``pre``) or Filter; victims named are evicted now and
        the pod nominated; a preemption that finds nothing clears the pod's nomination."""
        if pre is not None and pre.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            # No node can be helped: the pod holds no room any more (kube-scheduler clears the
            # nomination of a pod preemption finds no candidate for). A nomination left here would
            # hold its room for a pod that cannot use it, for as long as it waits.
            self.nominator.clear(pod.key)
            return PostFilterResult(Status.unresolvable())
        why_not = self._not_eligible(pod, outcome)
        if why_not is not None:
            return PostFilterResult(Status.unschedulable(), message=f"preemption: {why_not}.")
        result = self._post_filter(state, pod, outcome)
        if result.status.is_success and result.victims:
            self.nominator.nominate(pod, result.nominated_node)
            for victim in result.victims:
                self._evict(victim, pod, result.nominated_node)
        elif self.framework.post_filter_plugins or self.actions:
            self.nominator.clear(pod.key)  # kube-scheduler: no candidate clears nominatedNodeName
        return result

    def _not_eligible(self, pod: PodInfo, outcome: FilterOutcome) -> str | None:
        """Why ``pod`` may not preempt now: its nominated node still has victims terminating."""
        node = self.nominator.node_of(pod.key)
        if not node:
            return None
        cluster = self.framework.cluster
        row = cluster.row_of.get(node)
        unresolvable = row is None or not cluster.alive[row]
        if not unresolvable and row is not None:
            for _, result, _ in outcome.results:
                if result.unresolvable is not None and row < len(result.unresolvable):
                    unresolvable = unresolvable or bool(result.unresolvable[row])
        on_node = cluster.pods_on_node(node)
        return eligible_to_preempt(
            pod, node, on_node, nominated_node_unresolvable=unresolvable, evicting=self.preempted
        )

    def _post_filter(self, state: CycleState, pod: PodInfo, outcome: FilterOutcome) -> PostFilterResult:
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
        """Evict ``victim`` (not again when it is being deleted already: its room is on its way).
        It counts until its delete is seen (the backend's DONE); GONE: deleted at once, forgotten."""
        if victim.deleting or victim.key in self.preempted:
            return
        self.preempted[victim.key] = victim

        def done(outcome: Outcome) -> None:
            if outcome.result not in (Result.DONE, Result.GONE):
                self.preempted.pop(victim.key, None)  # the DELETE failed: the victim stays
                return
            self.framework.record(
                EventRecord(victim.ref, "Normal", PREEMPTED, f"Preempted by {preemptor.key} on node {node}")
            )
            if outcome.result is Result.GONE:
                self.forget(victim.key)

        self.backend.evict(victim, f"preempted by {preemptor.ref}", done)
