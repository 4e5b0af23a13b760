"""Volcano's ``reclaim`` action: a queue below what it deserves takes back from other queues.

A pod no node fits, of a starving job in an open queue that is not overused (the overused plugins:
proportion's deserved share), may evict running pods of *other* queues whose Queue is reclaimable
(``spec.reclaimable`` not false), that are gpuq's to schedule and not marked
``volcano.sh/preemptable: "false"``, as far as the enabled reclaimable plugins allow (proportion:
pods of queues above their deserved share, whatever the reclaimer asks; gang: a job keeps
minMember; conformance: never critical or kube-system pods). The node's idle resources count towards
what the reclaimer needs (victims are taken only until they and the idle fit it), and the pods of the
queue that orders last go first (Volcano's victim queue order). A pod whose ``preemptionPolicy`` is
``Never`` never reclaims.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cmp_to_key

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.crd import Queue
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.actions.preempt import evictable, may_evict, starving
from gpuq_k8s.scheduler.actions.victims import Choice, find_victims, victim_order
from gpuq_k8s.scheduler.framework.results import FilterOutcome
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

    def order(victims: Sequence[PodInfo]) -> list[PodInfo]:
        """Volcano's victims order (``BuildVictimsPriorityQueue``): the pods of the queue that orders
        last (the lower spec.priority, then the higher share) first; within a queue, those of the job
        that orders last (the job-order plugins: the lower PodGroup priority); then lowest priority
        first, then the most recently created (:func:`victim_order`)."""
        ranked = victim_order(victims)
        position = {p.key: i for i, p in enumerate(ranked)}

        def compare(left: PodInfo, right: PodInfo) -> int:
            ql, qr = framework.queue_of(left), framework.queue_of(right)
            if ql != qr:
                verdict = framework.compare_queues(ql, qr)
                if verdict:
                    return -verdict
            gl, gr = framework.group_of(left), framework.group_of(right)
            if gl is not None and gr is not None and gl is not gr:
                verdict = framework.compare_jobs(gl, gr)
                if verdict:
                    return -verdict
            return position[left.key] - position[right.key]

        return sorted(ranked, key=cmp_to_key(compare))

    return find_victims(framework, pod, candidates, framework.reclaimable, outcome, order=order)
