"""The cycle's gangs waiting in Permit that cannot reach their quorum: rolled back as a whole.

A gang's pods that Permit answered Wait for stay reserved and assumed in the cluster state (the
framework's :class:`~scheduler.framework.waiting.WaitingPods`) until the gang reaches minMember. The
gang is rolled back (unreserved, its pods parked, design.md "Data flow" step 2):

* when a member finds no node and no preemption room and the members placed and those still to be
  tried cannot reach minMember (:meth:`GangCycle.member_failed`; the rule is
  :func:`common.model.gang.rollback_on_failure`; Volcano discards a job not ready at its session's
  end, scheduler-plugins coscheduling rejects the waiting pods in its PostFilter);
* past its Permit timeout (:meth:`GangCycle.expire_waiting`: the cluster scheduler's tick);
* at the end of a simulation round (:meth:`GangCycle.reject_waiting` of every gang).

A rollback wakes at once the parked pods its release can help (those of other gangs), so a gang that
fits takes the room before the one that does not.

:class:`~scheduler.cycle.Scheduler` owns one and calls it from the scheduling step.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.gang import quorum_missed, rollback_on_failure, task_minimums
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cluster.state import ClusterState
from gpuq_k8s.scheduler.failure import FailureHandler
from gpuq_k8s.scheduler.framework.interfaces import ClusterEvent, GroupInfo
from gpuq_k8s.scheduler.framework.runtime import Framework
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.framework.waiting import WaitingPod
from gpuq_k8s.scheduler.groups import GroupTracker
from gpuq_k8s.scheduler.queue import SchedulingQueue

log = logging.getLogger(__name__)


class Explained(Protocol):
    """What a rollback rewrites of a kept attempt (:class:`scheduler.cycle.Attempt`)."""

    status: Status
    node: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GangCycle:
    """Rolls back the waiting gangs of the scheduler's ``framework`` (its cluster state, PodGroup
    bookkeeping, queue and failure reports given); ``attempts`` are the scheduler's kept attempts
    (``--explain``), told of the rollback."""

    framework: Framework
    cluster: ClusterState
    podgroups: GroupTracker
    queue: SchedulingQueue
    failures: FailureHandler
    attempts: Mapping[str, Explained]

    def member_failed(self, pod: PodInfo) -> None:
        """A gang member no node takes now, nor a preemption made room for: its waiting siblings are
        rolled back at once when the rule says so (common/model/gang.py :func:`rollback_on_failure`:
        the members placed and those still to be tried now, in the active queue, cannot reach
        minMember), instead of holding their nodes and quotas until the Permit timeout while other
        pods wait for that room (found by the day in the life: waiting gang members held GPUs of the
        ElasticQuotas' guaranteed pool that fitting pods waited 90 s for). Here: the rule's inputs
        counted, and the rollback."""
        group = self.podgroups.group_of(pod)
        if group is None:
            return
        waiting = self.framework.waiting.count(group.key)
        if not waiting:
            return  # nothing to roll back (the rule's answer too): the members are not counted
        queue, counted = self.queue, self.cluster.pods
        to_try = 0
        for key in self.podgroups.members.get(group.key, ()):
            queued = queue.get(key)
            if key != pod.key and key not in counted and queued is not None and queued.pool == "active":
                to_try += 1
        placed = self.podgroups.ready_members(group)
        decision = rollback_on_failure(
            f"PodGroup {group.key}",
            min_member=group.min_member,
            placed=placed,
            waiting=waiting,
            to_try=to_try,
        )
        if decision.reject:
            log.debug("%s (after %s failed)", decision.reason, pod.key)
            self.reject_waiting([group.key])

    def reject_waiting(self, keys: Iterable[str] | None = None) -> int:
        """Roll back waiting gangs (all, or those in ``keys``): unreserve and forget their pods, wake
        at once the parked pods the release can help (those of other gangs: the rolled-back ones give
        way), then park their pods; returns how many pods were rolled back."""
        waiting = self.framework.waiting
        rolled: list[tuple[str, GroupInfo | None, list[WaitingPod]]] = []
        for key in waiting.gangs() if keys is None else sorted(keys):
            members = waiting.reject(key)
            for member in members:
                self.framework.run_unreserve(member.state, member.pod, member.row)
                self.cluster.remove_pod(member.pod.key)
            rolled.append((key, self.podgroups.groups.get(key), members))
        if any(members for _, _, members in rolled):
            gone = {member.pod.key for _, _, members in rolled for member in members}
            groups = {id(group) for _, group, _ in rolled if group is not None}
            group_of = self.podgroups.group_of

            def helped(pod: PodInfo) -> bool:
                return pod.key not in gone and id(group_of(pod)) not in groups

            self.queue.on_event(ClusterEvent.POD_DELETED, only=helped, at_once=True)
        count = 0
        for key, group, members in rolled:
            message = ""
            if group is not None:
                minimums = (
                    task_minimums(group.min_member, group.model.spec.minTaskMember) if group.model else {}
                )
                placed = [member.pod for member in members]
                message = quorum_missed(f"PodGroup {key}", group.min_member, minimums, placed)
            for member in members:
                pod = member.pod.with_node_name("")
                reason = message if group is not None else f"Permit did not allow {pod.key}"
                self.failures.park(pod, reason, {plugin_names.GANG})
                if pod.key in self.attempts:
                    attempt = self.attempts[pod.key]
                    attempt.status = Status.unschedulable(reason, plugin=plugin_names.GANG)
                    attempt.node = ""
                    attempt.message = reason
                count += 1
        return count

    def expire_waiting(self, now: float, timeout: float) -> int:
        """Roll back gangs that have waited longer than their Permit's timeout, or ``timeout`` when
        it set none (a cluster's Permit timeout); returns how many pods were rolled back."""
        expired = self.framework.waiting.expired(now, timeout)
        return self.reject_waiting(expired) if expired else 0
