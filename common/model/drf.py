"""drf: dominant resource fairness, the job order of Volcano's ``drf`` plugin (volcano-sh/volcano
``pkg/scheduler/plugins/drf``).

A job's share of a resource is what its allocated pods hold of it over the cluster's total
allocatable; its *dominant share* is the largest of those over the resources the cluster has. Jobs
with a smaller dominant share go first. A job is a PodGroup (what its bound pods hold); a pod without
one is its own job. As in Volcano, a pod counts one ``pods`` unit besides its requests, and the
cluster's ``pods`` allocatable is a resource like the others.

Not implemented (refused at start-up by the configuration): the hierarchical mode
(``enableHierarchy``, Volcano's hdrf over queue hierarchy annotations).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

# Volcano's shareDelta: shares closer than this are equal when choosing preemption victims.
SHARE_DELTA: Final = 0.000001


def dominant_share(allocated: Mapping[str, int], total: Mapping[str, int]) -> tuple[str, float]:
    """``(dominant resource, share)``: the largest ``allocated[r] / total[r]`` over the resources the
    cluster has (``total[r] > 0``), ``("", 0.0)`` when nothing is allocated.

    Ties keep the first resource in ``total``'s order (Volcano: cpu, memory, then the others).
    """
    best = 0.0
    dominant = ""
    for resource, capacity in total.items():
        if capacity <= 0:
            continue
        share = allocated.get(resource, 0) / capacity
        if share > best:
            best, dominant = share, resource
    return dominant, best


def preemptable(preemptor_share: float, victim_share_after: float) -> bool:
    """Volcano's drf preemptable rule: a victim may go when the preemptor's share with the task is
    below (or within SHARE_DELTA of) the victim job's share without the victim."""
    return preemptor_share < victim_share_after or abs(preemptor_share - victim_share_after) <= SHARE_DELTA
