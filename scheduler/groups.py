"""PodGroup bookkeeping: the scheduler's view of every PodGroup and of the pods that name one.

Volcano's JobInfo reduced to what the cycle needs: each PodGroup's phase (Pending -> Inqueue ->
Running -> Completed, design.md "Data flow" and Semantics 18: the enqueue action admits, then the
phase follows the members as Volcano's jobStatus decides, :mod:`common.model.podgroup_status`), its
member pods and which of them finished, the pods held until the enqueue action admits their group
(kube-scheduler's "gated" pods), why a group is still Pending or could not be read, and which groups
changed since the last status sync (one PodGroup status patch per sync, never one per pod; each
Queue's PodGroups by phase likewise).

The tracker answers the PodGroup queries of the plugins' :class:`~scheduler.framework.interfaces.Handle`
(the framework hands them out) and runs the enqueue action's loop through the framework's Enqueue
plugins; it moves pods into the scheduling queue when their group is admitted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cmp_to_key
from typing import Any

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.annotations import DEFAULT_QUEUE, GROUP_NAME, QUEUE_NAME
from gpuq_k8s.common.model.crd import PodGroup
from gpuq_k8s.common.model.elastic.enqueue import GATED, PARKED, TRYING, MemberState, reserves
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.podgroup_status import (
    INQUEUE,
    PENDING,
    QUEUE_COUNTED,
    RUNNING,
    Members,
    podgroup_counts,
    podgroup_phase,
    queue_counts,
)
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.cluster.state import ClusterState
from gpuq_k8s.scheduler.containment import Containment
from gpuq_k8s.scheduler.framework.handle import GroupInfo
from gpuq_k8s.scheduler.framework.runtime import Framework
from gpuq_k8s.scheduler.framework.status_sync import StatusPatch
from gpuq_k8s.scheduler.queue import GATED as GATED_POOL
from gpuq_k8s.scheduler.queue import UNSCHEDULABLE, SchedulingQueue

log = logging.getLogger(__name__)


class GroupTracker:
    """PodGroups by ``namespace/name``, their members, held pods, phases and pending status writes.

    ``pending`` is the scheduler's map of the pods it still has to schedule (read here, written by
    the scheduler); ``not_ready`` tells the pods the cluster state holds that are not ready members:
    the nominated pods it holds only for an attempt (:mod:`scheduler.nominator`), and preemption
    victims whose eviction is on its way (their deletion is not seen yet). The framework and the
    queue are built after the tracker (the framework's Handle reads it): :meth:`connect` hands them
    over before anything is fed.
    """

    _framework: Framework
    _queue: SchedulingQueue

    def __init__(
        self,
        cluster: ClusterState,
        pending: Mapping[str, PodInfo],
        not_ready: Callable[[str], bool] = lambda key: False,
        nominated: Callable[[str], bool] = lambda key: False,
    ) -> None:
        self.cluster = cluster
        self.pending = pending
        self.not_ready = not_ready
        self.nominated = nominated
        self.groups: dict[str, GroupInfo] = {}
        self.members: dict[str, set[str]] = {}  # group key -> pod keys naming it (pending and bound)
        self.finished: dict[str, PodInfo] = {}  # member pod key -> the pod, Succeeded or Failed
        self.held: dict[str, set[str]] = {}  # group key -> pods waiting for the group to be Inqueue
        self.enqueue_refusals: dict[str, str] = {}  # PodGroup key -> why it is still Pending
        self.invalid: dict[str, str] = {}  # PodGroup key -> why it could not be read
        self.failed: set[str] = set()  # PodGroups whose enqueue met an error of gpuq's own, until they change
        self._dirty: set[str] = set()

    def connect(self, framework: Framework, queue: SchedulingQueue, contain: Containment) -> None:
        """The Enqueue plugins' framework, the queue admitted pods go to, and where an error of
        gpuq's own met while enqueueing one PodGroup is contained (:mod:`scheduler.containment`)."""
        self._framework = framework
        self._queue = queue
        self._contain = contain

    # -- queries (the Handle's) ---------------------------------------------------------------------
    def group_of(self, pod: PodInfo) -> GroupInfo | None:
        name = pod.annotations.get(GROUP_NAME)
        return self.groups.get(f"{pod.namespace}/{name}") if name else None

    def group_members(self, group: GroupInfo) -> Sequence[PodInfo]:
        """Every known pod of the group: pending, bound, and finished (a gang whose pod succeeded
        still counts it, as Volcano's job counts its Succeeded tasks)."""
        out: list[PodInfo] = []
        for key in sorted(self.members.get(group.key, ())):
            pod = self.pending.get(key) or self.cluster.pods.get(key) or self.finished.get(key)
            if pod is not None:
                out.append(pod)
        return out

    def ready_members(self, group: GroupInfo) -> int:
        """Pods bound, binding or waiting in Permit (all assumed in the cluster state), and those
        finished (Volcano's ReadyTaskNum counts Succeeded tasks: a gang whose first pods already
        finished may place the rest). Not ready: a pod being deleted or evicted (Volcano's
        Releasing: found by the day in the life, a gang whose terminating victims still counted
        gave up one more member to each preemption, down below minMember) and a nominated pod the
        cluster state holds only for an attempt."""
        return sum(1 for key in self.members.get(group.key, ()) if self._ready(key))

    def _ready(self, key: str) -> bool:
        if key in self.finished:
            return True
        pod = self.cluster.pods.get(key)
        return pod is not None and not pod.deleting and not self.not_ready(key)

    def reserves(self, group: GroupInfo) -> bool:
        """Whether the Inqueue ``group`` still reserves what its members not placed yet need
        (:func:`common.model.elastic.enqueue.reserves`: not once every one of them was tried and
        parked unschedulable, none nominated, being tried or due for a retry)."""
        queue, pods, finished = self._queue, self.cluster.pods, self.finished
        states: list[MemberState] = []
        for key in self.members.get(group.key, ()):
            if key in finished or key in pods:
                continue  # placed (it charges what it holds), or done
            queued = queue.get(key)
            if queued is None or self.nominated(key):
                states.append(TRYING)  # not queued yet (just admitted), or room is being made for it
            elif queued.pool == UNSCHEDULABLE:
                states.append(PARKED)
            else:
                states.append(GATED if queued.pool == GATED_POOL else TRYING)
        return reserves(states)

    def partially_placed(self, pod: PodInfo) -> bool:
        """Whether ``pod`` belongs to a gang some of whose pods are placed but fewer than minMember
        (a leader lost between a gang's binds leaves one so: its pending pods go first)."""
        group = self.group_of(pod)
        if group is None or group.min_member <= 1:
            return False
        ready = self.ready_members(group)
        return 0 < ready < group.min_member

    def member_counts(self, group: GroupInfo) -> Members:
        """The group's pods as Volcano's jobStatus counts them (:class:`Members`)."""
        placed = running = succeeded = failed = 0
        pods, finished = self.cluster.pods, self.finished
        for key in self.members.get(group.key, ()):
            done = finished.get(key)
            if done is not None:
                succeeded += done.phase == "Succeeded"
                failed += done.phase == "Failed"
            else:
                pod = pods.get(key)
                if pod is not None and not pod.deleting and not self.not_ready(key):
                    placed += 1
                    running += pod.phase == "Running"
        return Members(placed, running, succeeded, failed)

    def phases(self) -> Mapping[str, str]:
        return {k: g.phase for k, g in self.groups.items()}

    # -- pods ---------------------------------------------------------------------------------------
    def add_member(self, pod: PodInfo) -> None:
        name = pod.annotations.get(GROUP_NAME)
        if name:
            self.members.setdefault(f"{pod.namespace}/{name}", set()).add(pod.key)

    def bound_at_once(self, pods: Iterable[PodInfo]) -> None:
        """:meth:`add_member` then :meth:`pod_bound` of each of ``pods``, bound pods none of which
        moves its PodGroup's phase (Scheduler.add_bound_pods checks it with :meth:`counted_with`):
        the start's bound pods, a page at a time."""
        members, finished, groups, dirty = self.members, self.finished, self.groups, self._dirty
        for pod in pods:
            name = pod.annotations.get(GROUP_NAME)
            if name:  # a group not known (yet) counts its members when it comes
                key = f"{pod.namespace}/{name}"
                members.setdefault(key, set()).add(pod.key)
                if key in groups:
                    dirty.add(key)  # its counts changed (_follow, whose phase stays)
            finished.pop(pod.key, None)

    def counted_with(self, group: GroupInfo, counts: Members, pod: PodInfo) -> tuple[Members, str]:
        """``counts`` of ``group`` (:meth:`member_counts`) with ``pod`` counted too, a new bound member
        not finished before, and the phase :meth:`pod_bound` would then move the group to: what it
        finds after that pod without walking the members again (a group's pods fed one by one
        walked them all for each: quadratic in the group's size)."""
        placed, running = counts.placed, counts.running
        if not pod.deleting and not self.not_ready(pod.key):
            placed += 1
            running += pod.phase == "Running"
        after = Members(placed, running, counts.succeeded, counts.failed)
        return after, podgroup_phase(group.phase, group.min_member, after)

    def follow(self, group_key: str) -> None:
        """The group's phase after its members changed (what :meth:`pod_bound` does after a pod)."""
        self._follow(group_key)

    def forget_pod(self, key: str) -> None:
        for held in self.held.values():
            held.discard(key)
        self.finished.pop(key, None)
        for group_key, members in self.members.items():
            if key in members:
                members.discard(key)
                self._follow(group_key)

    def gate(self, pod: PodInfo) -> None:
        """Queue ``pod`` unless its PodGroup still waits for enqueue."""
        group = self.group_of(pod)
        if group is not None and self._framework.enqueue_enabled and group.phase == PENDING:
            self.held.setdefault(group.key, set()).add(pod.key)
            return
        self._queue.add(pod)

    def _gate_members(self, group: GroupInfo) -> None:
        """A PodGroup that appears after some of its pods: those queued meanwhile wait for enqueue
        like the rest (until then gang's PreFilter kept them from being scheduled alone)."""
        if not self._framework.enqueue_enabled or group.phase != PENDING:
            return
        for pod_key in sorted(self.members.get(group.key, ())):
            if pod_key in self.pending:
                self._queue.delete(pod_key)
                self.held.setdefault(group.key, set()).add(pod_key)

    def _release_held(self, group_key: str) -> None:
        """Queue the pending pods held for the enqueue of PodGroup ``group_key``."""
        for pod_key in sorted(self.held.pop(group_key, set())):
            pod = self.pending.get(pod_key)
            if pod is not None:
                self._queue.add(pod)

    def pod_bound(self, pod: PodInfo) -> None:
        """``pod`` is bound (or a bound pod changed: running, being deleted): its group runs once
        minMember of its pods are."""
        self.finished.pop(pod.key, None)
        group = self.group_of(pod)
        if group is not None:
            held = self.held.get(group.key)
            if held:
                held.discard(pod.key)  # placed (by another leader while this replica stood by)
            self._follow(group.key)

    def pod_finished(self, pod: PodInfo) -> None:
        """``pod`` succeeded or failed: its group completes once all its placed pods have."""
        self.finished[pod.key] = pod
        group = self.group_of(pod)
        if group is not None:
            self._follow(group.key)

    def _follow(self, group_key: str) -> None:
        """The group's phase after a change of its members (Volcano's jobStatus)."""
        group = self.groups.get(group_key)
        if group is None:
            return
        self._dirty.add(group_key)  # its counts may have changed
        self._set_phase(group, podgroup_phase(group.phase, group.min_member, self.member_counts(group)))

    # -- PodGroup objects ---------------------------------------------------------------------------
    def podgroup_changed(self, namespace: str, name: str, obj: Obj | None) -> None:
        """A PodGroup was stored (``obj``) or deleted (None); an invalid one raises its GpuqError."""
        key = f"{namespace}/{name}"
        self.failed.discard(key)  # changed: its enqueue is tried afresh
        if obj is None:
            gone = self.groups.pop(key, None)
            self.invalid.pop(key, None)
            if gone is not None and gone.phase in (INQUEUE, RUNNING):
                # What the enqueue plugins reserved for it goes with it (a job deleted Inqueue would
                # otherwise hold its queue's and its ElasticQuota's room for good).
                self._framework.run_dequeued(gone)
            self._release_held(key)  # back to the queue, where gang says why they wait
            return
        try:
            model = PodGroup.from_dict(obj)
        except GpuqError as err:
            # Semantics 3: say so (the caller records the Warning) and lose nothing: a group
            # read before keeps its last valid version; its pods are told why they wait.
            self.invalid[key] = str(err)
            raise
        self.invalid.pop(key, None)
        previous = self.groups.get(key)
        phase = model.phase if previous is None else previous.phase
        group = self.groups[key] = GroupInfo(namespace, name, model.spec.minMember, model.queue, phase, model)
        if previous is None:
            self._gate_members(group)
            if phase == INQUEUE and self._framework.enqueue_enabled:
                # Admitted by a previous leader (or before a restart): it reserves here too, as it
                # would had this scheduler enqueued it.
                self._framework.run_enqueued(group)

    def adopt_admitted(self, phases: Mapping[str, str]) -> list[str]:
        """On taking the Lease (``phases``: each PodGroup's ``status.phase`` as the API holds it):
        the groups the previous leader admitted (Inqueue) that this replica, standing by, holds
        Pending are Inqueue here too, as a fresh start reads them (:meth:`podgroup_changed`): they
        reserve in every enqueue plugin and their held pods are queued. A standby follows its
        groups' members, not the leader's enqueue decisions (a phase is the leader's output, not an
        input: :func:`scheduler.kube.feed.object_update_matters`); without this it would enqueue
        again, by its own reckoning, jobs the old leader admitted and may have preempted for.
        Returns the keys adopted, in order."""
        adopted: list[str] = []
        for key in sorted(phases):
            group = self.groups.get(key)
            if group is None or phases[key] != INQUEUE or group.phase != PENDING:
                continue
            self.enqueue_refusals.pop(key, None)
            self.failed.discard(key)
            self._set_phase(group, INQUEUE)  # queues its held pods
            if self._framework.enqueue_enabled:
                self._framework.run_enqueued(group)
            adopted.append(key)
        return adopted

    # -- the enqueue action ---------------------------------------------------------------------------
    def run_enqueue(self) -> int:
        """Move Pending PodGroups to Inqueue when the enqueue plugins allow; returns how many moved.

        Volcano's enqueue order: queues by the queue-order plugins (a queue's share), then jobs by the
        job-order plugins (priority), then by key, so the same input enqueues in the same order.

        An error of gpuq's own while enqueueing one PodGroup is contained to it (logged, counted, a
        Warning on it): it stays Pending, and is not tried again until it changes; the others go on.
        """
        framework = self._framework
        moved = 0
        waiting = [
            self.groups[key]
            for key in sorted(self.groups)
            if self.groups[key].phase == PENDING and key not in self.failed
        ]
        if len(waiting) > 1 and (framework.queue_order_tiers or framework.job_order_tiers):
            try:
                waiting.sort(key=cmp_to_key(self._compare))
            except Exception:
                # No one PodGroup to blame: enqueue in key order rather than not at all.
                log.exception("ordering PodGroups for enqueue failed (an error in gpuq); using key order")
        if not waiting:
            return 0
        with framework.enqueue_pass():
            for group in waiting:
                if group.phase != PENDING:
                    continue
                try:
                    moved += self._enqueue(group)
                except Exception as err:
                    self.failed.add(group.key)
                    self.enqueue_refusals[group.key] = (
                        f"PodGroup {group.key} could not be enqueued: an error in gpuq ({type(err).__name__})"
                    )
                    self._contain(group.ref, "enqueue", err, "it stays Pending until it changes")
        return moved

    def _enqueue(self, group: GroupInfo) -> int:
        """Enqueue ``group`` if the enqueue plugins allow; 1 when it moved to Inqueue."""
        key = group.key
        if self._framework.enqueue_enabled:
            status = self._framework.run_enqueue(group)
            if not status.is_success:
                self.enqueue_refusals[key] = status.message
                return 0
        self.enqueue_refusals.pop(key, None)
        self._set_phase(group, INQUEUE)
        self._release_held(key)
        return 1

    def _compare(self, left: GroupInfo, right: GroupInfo) -> int:
        if left.queue != right.queue:
            verdict = self._framework.compare_queues(left.queue, right.queue)
            if verdict:
                return verdict
        verdict = self._framework.compare_jobs(left, right)
        if verdict:
            return verdict
        return -1 if left.key < right.key else (1 if left.key > right.key else 0)

    def queue_of(self, pod: PodInfo) -> str:
        """The pod's queue (Semantics 7): its PodGroup's, else its queue-name annotation, else default."""
        group = self.group_of(pod)
        if group is not None:
            return group.queue
        return pod.annotations.get(QUEUE_NAME) or DEFAULT_QUEUE

    def _set_phase(self, group: GroupInfo, phase: str) -> None:
        if group.phase == phase:
            return
        left = group.phase
        group.phase = phase
        if left in (INQUEUE, RUNNING):
            # After the phase is set, so plugins see where the group went (Running keeps a
            # reservation; Completed and Pending hold none).
            self._framework.run_dequeued(group)
        if phase == PENDING:
            self._gate_members(group)  # fell below minMember: its waiting pods wait for enqueue again
        else:
            # Pods are held only while their group is Pending: a group that left it by its members
            # (Running, Completed: bound by another leader while this replica stood by, or before it
            # restarted) no longer waits for the enqueue action, and neither do its pods.
            self._release_held(group.key)
        self._dirty.add(group.key)

    # -- status sync ----------------------------------------------------------------------------------
    def take_status(self) -> list[StatusPatch]:
        """The status of every PodGroup whose phase changed since the last call."""
        patches: list[StatusPatch] = []
        for key in sorted(self._dirty):
            group = self.groups.get(key)
            if group is None:
                continue
            status: dict[str, Any] = {}
            if group.model is not None:
                status = group.model.status.model_dump(exclude_defaults=True)
            for count in ("running", "succeeded", "failed"):
                status.pop(count, None)
            status["phase"] = group.phase
            status.update(podgroup_counts(self.member_counts(group)))
            patches.append(StatusPatch(kinds.POD_GROUP, group.namespace, group.name, status))
        self._dirty.clear()
        return patches

    def take_queue_status(self, queues: Mapping[str, Mapping[str, Any]]) -> list[StatusPatch]:
        """The status of every Queue (``queues``: name -> its current status) whose PodGroups by
        phase differ from what it holds (Volcano's queue controller's counts)."""
        phases: dict[str, list[str]] = {name: [] for name in queues}
        for group in self.groups.values():
            if group.queue in phases:
                phases[group.queue].append(group.phase)
        patches: list[StatusPatch] = []
        for name in sorted(queues):
            counts = queue_counts(phases[name])
            current = queues[name]
            if all(current.get(k, 0) == v for k, v in counts.items()):
                continue
            status = {k: v for k, v in current.items() if k not in QUEUE_COUNTED.values()}
            status.update(counts)
            patches.append(StatusPatch(kinds.QUEUE, "", name, status))
        return patches
