"""``gang``: a PodGroup's pods start together or not at all (Volcano's gang, coscheduling's Permit).

PreFilter refuses a pod whose group has fewer pods than ``minMember`` (nothing could complete the
gang), and a pod whose PodGroup does not exist (yet). Permit holds each placed pod, reserved, until
``minMember`` of the group are bound or waiting, then releases them all. The cycle rolls back a
gang whose quorum never comes (a timeout in a cluster, the end of the queue in ``gpuq simulate``).

As Volcano's gang it also guards evictions (preempt and reclaim): a running gang gives up only its
pods beyond minMember (a pod without a PodGroup is no gang and is not guarded), and a job is
starving while fewer than minMember of its pods run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from gpuq_k8s.common.model.annotations import GROUP_NAME
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
from gpuq_k8s.scheduler.framework.registry import PluginSettings
from gpuq_k8s.scheduler.framework.status import Status

NAME: Final = "gang"


class Gang(PreFilterPlugin, PermitPlugin, PreemptablePlugin, ReclaimablePlugin, JobStarvingPlugin):
    name = NAME

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)

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
        if group.min_member <= 1:
            return Status.skip()
        members = len(self.handle.group_members(group))
        if members < group.min_member:
            return Status.unresolvable(
                f"PodGroup {group.key} has {members} pod(s), fewer than minMember {group.min_member}"
            )
        return Status.success()

    def permit(self, state: CycleState, pod: PodInfo, row: int) -> Status:
        group = self.handle.group_of(pod)
        if group is None or group.min_member <= 1:
            return Status.success()
        ready = self.handle.ready_members(group)  # this pod included: it is assumed already
        if ready >= group.min_member:
            self.handle.allow_group(group)
            return Status.success()
        return Status.wait(f"waiting for {group.min_member - ready} more pod(s) of PodGroup {group.key}")

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
