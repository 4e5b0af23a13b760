"""The cycle's side of the reserve action (Semantics 15): which refused pods are candidates, what became
of the target job, and one step of the action.

The action itself (elect a target job, lock nodes for it, release the lock) is
:class:`scheduler.actions.reserve.Reserve`; this module feeds it from the scheduler's state:

* a pod whose last attempt was refused with a reason freed room could cure is *curable*
  (:meth:`ReserveCycle.refused`, :func:`curable`): an Unschedulable status, and, when Filter decided,
  a node some plugin refused resolvably; its job may be elected;
* the target job is ready once minMember of its PodGroup's pods are placed (a pod without a PodGroup:
  once bound), gone once its PodGroup or pod is (:meth:`ReserveCycle.target`);
* a released lock retries at once the pods it kept out (``NODES_UNLOCKED``, :meth:`ReserveCycle.step`).

:class:`~scheduler.cycle.Scheduler` owns one when ``reserve`` is among the configured actions and calls
it from the scheduling step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.reservation import Candidate
from gpuq_k8s.scheduler.actions.reserve import Reserve, Target, candidates
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.cluster.state import ClusterState
from gpuq_k8s.scheduler.framework.interfaces import ClusterEvent, FilterOutcome
from gpuq_k8s.scheduler.framework.status import Code, Status
from gpuq_k8s.scheduler.groups import GroupTracker
from gpuq_k8s.scheduler.queue import SchedulingQueue


@dataclass(frozen=True, slots=True, kw_only=True)
class ReserveCycle:
    """The reserve ``action`` over the scheduler's ``pending`` pods (by key), its PodGroup bookkeeping,
    API objects, cluster state and queue; ``curable``: the pods whose last refusal freed room could
    cure."""

    action: Reserve
    pending: Mapping[str, PodInfo]
    podgroups: GroupTracker
    objects: ObjectStore
    cluster: ClusterState
    queue: SchedulingQueue
    curable: set[str] = field(default_factory=set)

    def step(self, now: float) -> bool:
        """One step of the reserve action (scheduler/actions/reserve.py); True when it released a lock
        (the pods the lock kept out are then ready to be tried at once)."""
        pending, curable, podgroups, objects = self.pending, self.curable, self.podgroups, self.objects

        def jobs() -> list[Candidate]:
            return candidates(pending, curable, podgroups.group_of, objects)

        released = self.action.step(now, self.target, jobs)
        if released:
            self.queue.on_event(ClusterEvent.NODES_UNLOCKED, at_once=True)
        return released

    def target(self, ref: str) -> Target:
        """What became of the target job ``ref`` (``PodGroup/ns/name``, or ``Pod/ns/name``)."""
        kind, _, key = ref.partition("/")
        if kind == kinds.POD_GROUP.kind:
            group = self.podgroups.groups.get(key)
            if group is None:
                return Target.GONE
            return Target.READY if self.podgroups.ready_members(group) >= group.min_member else Target.WAITING
        if key in self.pending:
            return Target.WAITING
        return Target.READY if key in self.cluster.pods else Target.GONE

    def refused(self, key: str, status: Status, outcome: FilterOutcome | None) -> None:
        """The pod ``key``'s attempt failed with ``status`` (``outcome``: Filter's, when it ran)."""
        if curable(status, outcome):
            self.curable.add(key)
        else:
            self.curable.discard(key)

    def forget(self, key: str) -> None:
        """The pod ``key`` is bound or gone: no longer a candidate."""
        self.curable.discard(key)


def curable(status: Status, outcome: FilterOutcome | None) -> bool:
    """Whether room freed on some node could cure the refusal (the reserve action's candidates): an
    Unschedulable status, and, when Filter decided, a node some plugin refused resolvably."""
    if status.code is not Code.UNSCHEDULABLE:
        return False
    if outcome is None or not outcome.results:
        return True
    for _, result, first in outcome.results:
        hopeless = result.unresolvable
        if (first if hopeless is None else first & ~hopeless).any():
            return True
    return False
