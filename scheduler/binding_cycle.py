"""The binding step (kube-scheduler's ``bindingCycle``): PreBind's plans carried out, then the Bind, and
the one place a bind's outcome acts on the ledger and the queue.

The scheduling step (scheduler/cycle.py) has reserved the pod and assumed it on its node; Permit let it
through (or its gang's last member completed the gang: the waiting members are bound with it). The
binds go through the :class:`~scheduler.backend.ClusterBackend` with completion callbacks, so the same
step runs against the in-memory backend (``gpuq simulate``) and the Kubernetes one. A plan that fails
(or a PreBind plugin that refuses) fails the binding; a binding that fails after the plans rolls them
back; a failed binding unreserves the assumption and retries the pod (design.md "Data flow").

:class:`~scheduler.cycle.Scheduler` owns one and calls it from the scheduling step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuq_k8s.common.model.events import SCHEDULED, EventRecord
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.backend import ClusterBackend, Outcome, Result
from gpuq_k8s.scheduler.cluster.state import ClusterState
from gpuq_k8s.scheduler.failure import FailureHandler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.runtime import Framework
from gpuq_k8s.scheduler.groups import GroupTracker
from gpuq_k8s.scheduler.queue import SchedulingQueue
from gpuq_k8s.scheduler.reserve_cycle import ReserveCycle


@dataclass(frozen=True, slots=True, kw_only=True)
class BindingCycle:
    """Binds through ``backend`` the pods the scheduler's ``framework`` placed; a bind's outcome acts on
    its cluster state, ``pending`` pods (by key), queue, last PodScheduled ``reasons``, PodGroup
    bookkeeping, failure reports and the reserve action (when configured); ``forget`` is told of a pod
    gone."""

    framework: Framework
    backend: ClusterBackend
    cluster: ClusterState
    pending: dict[str, PodInfo]
    queue: SchedulingQueue
    reasons: dict[str, str]
    podgroups: GroupTracker
    failures: FailureHandler
    reserve: ReserveCycle | None
    forget: Callable[[str], None]

    def run(self, state: CycleState, assumed: PodInfo, row: int) -> None:
        """Bind the pod Permit let through, then, if it completed its gang, the gang's waiting pods."""
        group = self.podgroups.group_of(assumed)
        self.bind(assumed, row, state)
        if group is not None:
            for waiting in self.framework.waiting.release(group.key):
                self.bind(waiting.pod, waiting.row, waiting.state)

    def bind(self, pod: PodInfo, row: int, state: CycleState) -> None:
        """PreBind, then Bind (kube-scheduler's ``bindingCycle``): the PreBind plugins' plans are
        carried out by the backend before the binding is sent; a plan that fails (or a plugin that
        refuses) fails the binding, and a binding that fails after the plans rolls them back."""
        plans, refused = self.framework.run_pre_bind(state, pod, row)
        if not refused.is_success:
            message = f'running PreBind plugin "{refused.plugin}": {refused.message}'
            self.bind_done(pod, row, state, Outcome(Result.NOT_BOUND, message))
            return
        if not plans:
            self.backend.bind(pod, pod.node_name, lambda outcome: self.bind_done(pod, row, state, outcome))
            return

        def bound(outcome: Outcome) -> None:
            if not outcome.ok:
                self.backend.roll_back(pod, plans)
            self.bind_done(pod, row, state, outcome)

        def pre_bound(outcome: Outcome) -> None:
            if outcome.ok:
                self.backend.bind(pod, pod.node_name, bound)
            else:
                self.bind_done(pod, row, state, outcome)

        self.backend.pre_bind(pod, pod.node_name, plans, pre_bound)

    def bind_done(self, pod: PodInfo, row: int, state: CycleState, outcome: Outcome) -> None:
        """The one place a bind's outcome acts on the ledger and the queue (``pod`` is assumed on
        ``row``): bound here stays charged; anything else unreserves our assumption, unless the
        watch has meanwhile put the pod where it really is (then that is the truth, left alone).
        Only a pod that is still there and unbound is retried; only that one gets PodScheduled=False."""
        key = pod.key
        if outcome.result is Result.DONE:
            if self.reserve is not None:
                self.reserve.forget(key)
            self.pending.pop(key, None)
            self.queue.done(key)
            self.reasons.pop(key, None)
            self.framework.record(
                EventRecord(pod.ref, "Normal", SCHEDULED, f"Successfully assigned {key} to {pod.node_name}")
            )
            self.podgroups.pod_bound(pod)
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
            self.forget(key)
        else:
            self.pending.pop(key, None)
