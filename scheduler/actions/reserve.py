"""Volcano's ``reserve`` action, with ``elect`` folded in (both sunset by Volcano in 2022; design.md
Semantics 15): nodes locked for a starving target job, so that smaller jobs stop taking the room it waits
for.

Volcano ran elect (choose a target job when there is none) and reserve (lock one more node while the
target job is not ready; drop the target and its locks once it is ready or gone) once per session. gpuq
runs one *reserve step* where a Volcano session would begin: when the pod queue has run dry (``gpuq
simulate``: once per round; ``gpuq scheduler``: once per second at most, Volcano's default schedule
period), wherever ``reserve`` stands in the actions list. A step:

1. releases the lock when its target job is ready (minMember pods placed; a pod without a PodGroup:
   bound), gone, or its lock is older than the reservation plugin's ``lockTimeoutSeconds`` (a job whose
   lock timed out goes behind every other candidate at the next election);
2. elects a target job when there is none (the TargetJob plugins: the highest priority, then the
   longest waiting), among the jobs with a pod of gpuq's that has failed an attempt with a refusal that
   freed room can cure (Unschedulable, not UnschedulableAndUnresolvable: no lock helps a pod no node can
   ever take);
3. locks one more node for it (the ReservedNodes plugins: the unlocked node with the most idle
   resources), until every node is locked.

The locked nodes take no pod of another job (the reservation plugin's Filter); the target job's pods
may go anywhere. Releasing the lock retries at once the pods it kept out (``NODES_UNLOCKED``).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from enum import Enum

from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.reservation import Candidate, Lock, waiting_since
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.framework.handle import GroupInfo
from gpuq_k8s.scheduler.framework.runtime import Framework
from gpuq_k8s.scheduler.plugins.priority import pod_priority, podgroup_priority


def job_ref(group: GroupInfo | None, pod: PodInfo) -> str:
    """A job as the lock names it: its PodGroup (``PodGroup/ns/name``), else the pod (``Pod/ns/name``)."""
    return group.ref if group is not None else pod.ref


class Target(Enum):
    """What became of the target job since the last step."""

    WAITING = "waiting"
    READY = "ready"
    GONE = "gone"


def candidates(
    pending: Mapping[str, PodInfo],
    failed: Container[str],
    group_of: Callable[[PodInfo], GroupInfo | None],
    objects: ObjectStore,
) -> list[Candidate]:
    """The jobs that may be elected: those with a pending pod in ``failed`` (refused by an attempt that
    freed room could cure), each with its priority and since when it waits."""
    jobs: dict[str, tuple[GroupInfo | None, list[PodInfo]]] = {}
    for key, pod in pending.items():
        if key not in failed:
            continue
        group = group_of(pod)
        jobs.setdefault(job_ref(group, pod), (group, []))[1].append(pod)
    out: list[Candidate] = []
    for key, (group, pods) in jobs.items():
        value = podgroup_priority(group, objects) if group is not None else None
        priority = value if value is not None else max(pod_priority(pod) for pod in pods)
        stamps: Iterable[str] = (pod.creation_timestamp for pod in pods)
        if group is not None and group.model is not None:
            stamps = [*stamps, str(group.model.metadata.creationTimestamp or "")]
        out.append(Candidate(key, priority, waiting_since(stamps)))
    return out


class Reserve:
    """The reserve action's state across steps: the jobs whose lock timed out (the lock itself is the
    framework's ``reservation_lock``, which the reservation Filter reads)."""

    def __init__(self, framework: Framework) -> None:
        self.framework = framework
        self.passed_over: set[str] = set()

    def step(self, now: float, target: Callable[[str], Target], jobs: Callable[[], list[Candidate]]) -> bool:
        """One step (see the module doc); True when a lock was released (its pods are to be retried)."""
        framework = self.framework
        lock = framework.reservation_lock
        released = False
        if lock is not None:
            became = target(lock.target)
            if became is not Target.WAITING:
                self.passed_over.discard(lock.target)
                lock, released = None, True
            elif lock.expired(now):
                self.passed_over.add(lock.target)
                lock, released = None, True
        if lock is None:
            waiting = jobs()
            self.passed_over &= {c.key for c in waiting}
            elected = framework.target_job(waiting, self.passed_over)
            if elected is not None:
                candidate, timeout = elected
                lock = Lock(candidate.key, now, timeout)
        if lock is not None:
            lock = framework.reserved_nodes(lock)
        framework.reservation_lock = lock
        return released
