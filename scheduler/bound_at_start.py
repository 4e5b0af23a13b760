"""The start's bound pods counted at once: the same state as the scheduler's ``add_pod`` for each pod in
order, without its per-pod work where that work has nothing to act on.

At a start (or a take-over) the feed (scheduler/kube/feed.py ``Feed.load``) hands the scheduler every
bound pod of the cluster. While nothing is pending (no queued pod a bind could move, no nomination to
forget), the pods the cluster state takes at once (:meth:`ClusterState.can_add_at_once`: new, bound,
on known nodes) and that belong to no known PodGroup or keep its phase are counted together
(:meth:`ClusterState.add_pods`, :meth:`GroupTracker.bound_at_once`), without the queue's per-pod
events; a pod that moves its PodGroup's phase ends the run, its group then followed as ``add_pod``
follows it (its counts kept through the run: :meth:`GroupTracker.counted_with`); any other pod goes
through ``add_pod`` in its turn (tests/unit/scheduler/kube/test_feed_bulk.py compares the two).
:meth:`scheduler.cycle.Scheduler.add_bound_pods` runs it on the scheduler's parts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuq_k8s.common.model.podgroup_status import Members
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cluster.state import ClusterState
from gpuq_k8s.scheduler.groups import GroupTracker


def add_bound_pods(
    pods: Sequence[PodInfo],
    cluster: ClusterState,
    podgroups: GroupTracker,
    add_pod: Callable[[PodInfo], None],
    *,
    busy: bool,
) -> None:
    """``add_pod`` for each of ``pods`` in order, the runs that can be counted together counted at once
    in ``cluster`` and ``podgroups``; all through ``add_pod`` when the scheduler is ``busy`` (a pod
    pending, queued or nominated)."""
    if busy:
        for pod in pods:
            add_pod(pod)
        return
    run: list[PodInfo] = []
    keys: set[str] = set()
    counts: dict[str, Members] = {}  # group key -> its member counts with the run's pods

    def flush() -> None:
        cluster.add_pods(run)
        podgroups.bound_at_once(run)  # as add_pod: none of them moved its group's phase
        run.clear()
        keys.clear()
        counts.clear()

    can_add_at_once, group_of = cluster.can_add_at_once, podgroups.group_of
    for pod in pods:
        key = pod.key
        group = group_of(pod)
        if key in keys or not can_add_at_once(pod) or (group is not None and key in podgroups.finished):
            flush()
            add_pod(pod)
            continue
        run.append(pod)
        keys.add(key)
        if group is None:
            continue
        before = counts.get(group.key)
        after, phase = podgroups.counted_with(
            group, podgroups.member_counts(group) if before is None else before, pod
        )
        counts[group.key] = after
        if phase != group.phase:  # counted (with the pods before it), then its group followed
            flush()
            podgroups.follow(group.key)
    flush()
