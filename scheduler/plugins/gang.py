"""``gang``: a PodGroup's pods start together or not at all (Volcano's gang, coscheduling's Permit).

PreFilter refuses a pod whose group has fewer pods than ``minMember`` (nothing could complete the
gang), one whose group lacks pods of a task that ``spec.minTaskMember`` requires (Volcano's
``CheckTaskValid``), and a pod whose PodGroup does not exist (yet). Permit holds each placed pod,
reserved, until ``minMember`` of the group are bound or waiting and every task has its minimum of them
(Volcano's ``CheckTaskReady``), then releases them all; it holds them at most the
``permitWaitingTimeSeconds`` argument (default 60). The cycle rolls back a gang whose quorum never
comes (that timeout in a cluster, the end of a round in ``gpuq simulate``) and wakes the pods its
release can help at once, so a gang that does not fit gives way to one that does (the per-task and
argument rules: :mod:`common.model.gang`).

As Volcano's gang it also guards evictions (preempt and reclaim): a running gang gives up only its
pods beyond minMember (a pod without a PodGroup is no gang and is not guarded), and a job is
starving while fewer than minMember of its pods run (per-task minimums play no part in either, as in
Volcano's gang plugin).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.annotations import GROUP_NAME
from gpuq_k8s.common.model.gang import GangArgs, task_minimums, task_shortfalls
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quoting import cut
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    GroupInfo,
    Handle,
    JobStarvingPlugin,
    PermitPlugin,
    PreemptablePlugin,
    PreFilterPlugin,
    ReclaimablePlugin,
)
from gpuq_k8s.scheduler.framework.registry import PluginSettings, plugin_args
from gpuq_k8s.scheduler.framework.status import Status


class Gang(PreFilterPlugin, PermitPlugin, PreemptablePlugin, ReclaimablePlugin, JobStarvingPlugin):
    name = plugin_names.GANG

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        self.args = plugin_args(settings, GangArgs) or GangArgs()

    @staticmethod
    def _task_minimums(group: GroupInfo) -> Mapping[str, int]:
        if group.model is None:
            return {}
        return task_minimums(group.min_member, group.model.spec.minTaskMember)

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        group = self.handle.group_of(pod)
        if group is None:
            name = pod.annotations.get(GROUP_NAME)
            if name:
                # Its PodGroup is not here yet (created after the pod, or its watch event is behind
                # the pod's), or cannot be read: scheduling it alone would bypass the gang and the
                # enqueue check, so it waits, as Volcano and coscheduling make it. Retried when a
                # PodGroup changes.
                key = f"{pod.namespace}/{name}"
                problem = self.handle.group_problem(key)
                if problem is not None:
                    return Status.unresolvable(
                        f"PodGroup {key} is invalid: {problem}; its pods wait for a valid one"
                    )
                # The name is the pod's annotation, of any length: cut in the message.
                return Status.unresolvable(f"PodGroup {cut(key)} not found: its pods wait for it")
            return Status.skip()
        if group.min_member <= 1 and not self._task_minimums(group):
            return Status.skip()
        members = self.handle.group_members(group)
        if len(members) < group.min_member:
            return Status.unresolvable(
                f"PodGroup {group.key} has {len(members)} pod(s), fewer than minMember {group.min_member}"
            )
        minimums = self._task_minimums(group)
        if minimums:
            short = task_shortfalls(minimums, members)
            if short:
                return Status.unresolvable(
                    f"PodGroup {group.key} has not enough pods of each task for gang-scheduling: "
                    + ", ".join(str(s) for s in short)
                )
        return Status.success()

    def permit(self, state: CycleState, pod: PodInfo, row: int) -> Status:
        group = self.handle.group_of(pod)
        if group is None:
            return Status.success()
        minimums = self._task_minimums(group)
        if group.min_member <= 1 and not minimums:
            return Status.success()
        timeout = self.args.permit_waiting_time
        ready = self.handle.ready_members(group)  # this pod included: it is assumed already
        if ready < group.min_member:
            return Status.wait(
                f"waiting for {group.min_member - ready} more pod(s) of PodGroup {group.key}", timeout=timeout
            )
        if minimums:
            pods = self.handle.cluster.pods
            placed = [p for p in self.handle.group_members(group) if p.key in pods]
            short = task_shortfalls(minimums, placed)
            if short:
                return Status.wait(
                    f"waiting for PodGroup {group.key}'s tasks: " + ", ".join(str(s) for s in short),
                    timeout=timeout,
                )
        self.handle.allow_group(group)
        return Status.success()

    def _spare(self, candidates: Sequence[PodInfo]) -> list[PodInfo]:
        """Volcano's gang preemptable/reclaimable: each job keeps minMember of its running pods."""
        occupied: dict[str, int] = {}
        victims: list[PodInfo] = []
        for pod in candidates:
            group = self.handle.group_of(pod)
            if group is None:
                victims.append(pod)
                continue
            if group.key not in occupied:
                occupied[group.key] = self.handle.ready_members(group)
            if occupied[group.key] > group.min_member:
                occupied[group.key] -= 1
                victims.append(pod)
        return victims

    def preemptable(self, preemptor: PodInfo, candidates: Sequence[PodInfo]) -> Sequence[PodInfo] | None:
        return self._spare(candidates)

    def reclaimable(self, reclaimer: PodInfo, candidates: Sequence[PodInfo]) -> Sequence[PodInfo] | None:
        return self._spare(candidates)

    def job_starving(self, group: GroupInfo) -> bool:
        return self.handle.ready_members(group) < max(group.min_member, 1)
