"""Volcano's ``preempt`` action: a starving job takes room from other jobs of its own queue.

A pod no node fits, or that its queue's own capability keeps out (Volcano #3161: allocatable fails
while a node has room), may evict running pods of the same queue that belong to another job (its
PodGroup, or the pod alone), that are gpuq's to schedule, not marked ``volcano.sh/preemptable:
"false"``, and that the enabled preemptable plugins allow (priority: lower priority only; gang: a job
keeps minMember; conformance: never critical or kube-system pods). Victims are taken until the pod
fits the node *and* its queue may be charged it (Volcano's ``preemptorFitsOnNode``: the allocatable
plugins, not the overused ones: preempt takes room within the queue, so whether the queue holds its
deserved share does not stop it, a BestEffort preemptor's included). A pod without requests never
evicts one with requests. Only a starving job preempts (the job-starving plugins), and a pod whose
``preemptionPolicy`` is ``Never`` never does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuq_k8s.common.model.action_args import PREEMPT, CandidateLimits
from gpuq_k8s.common.model.annotations import PREEMPTABLE
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.actions.backfill import best_effort
from gpuq_k8s.scheduler.actions.victims import Choice, find_victims
from gpuq_k8s.scheduler.framework.results import FilterOutcome
from gpuq_k8s.scheduler.framework.runtime import Framework

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})


def evictable(pod: PodInfo) -> bool:
    """``volcano.sh/preemptable`` (annotation, else label) as Go's ParseBool reads it: absent is
    true, an unreadable value false (as Volcano's ``GetPodPreemptable``)."""
    value = pod.annotations.get(PREEMPTABLE, pod.labels.get(PREEMPTABLE))
    return value is None or value in _TRUE


def job_of(framework: Framework, pod: PodInfo) -> str:
    group = framework.group_of(pod)
    return group.key if group is not None else pod.key


def starving(framework: Framework, pod: PodInfo) -> bool:
    """Volcano's JobStarving for the pod's job; a pod without a PodGroup is a job of one pending pod
    (starving whenever a job-starving plugin is enabled, as Volcano's would find it)."""
    group = framework.group_of(pod)
    if group is None:
        return bool(framework.starving_tiers)
    return framework.job_starving(group)


def may_evict(pod: PodInfo) -> bool:
    return pod.preemption_policy != "Never"


def preempt(
    framework: Framework,
    pod: PodInfo,
    ours: Callable[[PodInfo], bool],
    outcome: FilterOutcome | None = None,
) -> Choice | None:
    if not may_evict(pod) or not framework.preemptable_tiers or framework.preemption_ruled_out(pod):
        return None
    if not starving(framework, pod):
        return None
    queue = framework.queue_of(pod)
    job = job_of(framework, pod)
    pod_best_effort = best_effort(pod)

    def candidates(preemptor: PodInfo, running: Sequence[PodInfo]) -> list[PodInfo]:
        return [
            p
            for p in running
            if ours(p)
            and evictable(p)
            and framework.queue_of(p) == queue
            and job_of(framework, p) != job
            and not (pod_best_effort and not best_effort(p))
        ]

    def allocatable(preemptor: PodInfo) -> bool:
        return framework.not_allocatable_by(queue, preemptor) is None

    limits = CandidateLimits.of(framework.action_arguments(PREEMPT))
    return find_victims(
        framework, pod, candidates, framework.preemptable, outcome, limits=limits, queue_ok=allocatable
    )
