"""Volcano's ``reclaim`` action: a queue below what it deserves takes back from other queues.

A pod no node fits, of a starving job in an open queue that is not overused (the overused plugins:
proportion's deserved share), may evict running pods of *other* queues whose Queue is reclaimable
(``spec.reclaimable`` not false), that are gpuq's to schedule and not marked
``volcano.sh/preemptable: "false"``, as far as the enabled reclaimable plugins allow (proportion:
pods of queues above their deserved share; gang: a job keeps minMember; conformance: never critical
or kube-system pods). A pod whose ``preemptionPolicy`` is ``Never`` never reclaims.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.crd import Queue
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.actions.preempt import evictable, may_evict, starving
from gpuq_k8s.scheduler.actions.victims import Choice, find_victims
from gpuq_k8s.scheduler.framework.interfaces import FilterOutcome
from gpuq_k8s.scheduler.framework.runtime import Framework


def _queue(framework: Framework, name: str) -> Queue | None:
    obj = framework.objects.get(kinds.QUEUE, "", name)
    if obj is None:
        return None
    try:
        return Queue.from_dict(obj)
    except GpuqError:
        return None  # the plugins reading Queues already warned about it (Semantics 3)


def reclaim(
    framework: Framework,
    pod: PodInfo,
    ours: Callable[[PodInfo], bool],
    outcome: FilterOutcome | None = None,
) -> Choice | None:
    if not may_evict(pod) or not framework.reclaimable_tiers or framework.reclaim_ruled_out(pod):
        return None
    if not starving(framework, pod):
        return None
    queue_name = framework.queue_of(pod)
    queue = _queue(framework, queue_name)
    if queue is None or not queue.open or framework.overused(queue_name):
        return None
    reclaimable: dict[str, bool] = {}

    def gives_back(name: str) -> bool:
        if name not in reclaimable:
            other = _queue(framework, name)
            reclaimable[name] = other is not None and other.spec.reclaimable is not False
        return reclaimable[name]

    def candidates(reclaimer: PodInfo, running: Sequence[PodInfo]) -> list[PodInfo]:
        out = []
        for p in running:
            other = framework.queue_of(p)
            if other != queue_name and ours(p) and evictable(p) and gives_back(other):
                out.append(p)
        return out

    return find_victims(framework, pod, candidates, framework.reclaimable, outcome)
