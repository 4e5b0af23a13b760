"""Nomination: the room a preemption made, held for its preemptor (design.md Semantics 18).

A preemption does not free room at once: its victims are deleted with their grace period and go on
running, holding their node's resources and their quotas, until they are gone. Their preemptor is
*nominated* to the node (``status.nominatedNodeName``) and waits. Two rules, as kube-scheduler's:

- **The room is the preemptor's.** While a pod is nominated to a node, every other pod of lower or
  equal priority is scheduled as if the nominated pod already ran there (kube-scheduler's
  ``addGENominatedPods``, run in ``RunFilterPluginsWithNominatedPods``): its request counts on the
  node and on its quotas, so the room its victims leave goes to it, not to whoever comes first.
  A pod of higher priority does not see it (it may take the room; the preemptor then preempts again).
  :func:`holds_room_for`.
- **Never preempted for twice.** A nominated pod whose nominated node still has a pod terminating
  because of a preemption (lower priority than the preemptor) is not eligible to preempt again: its
  victims are on their way out (kube-scheduler's ``PodEligibleToPreemptOthers``). It is eligible
  again when the nominated node became unresolvable for it (a taint, a deleted node): its victims can
  no longer help it. :func:`eligible_to_preempt`.

Pure functions of :class:`~common.model.pods.PodInfo` values; the scheduler's nominator
(``scheduler/nominator.py``) keeps the nominations and applies these rules in the cycle.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import Final

from gpuq_k8s.common.model.pods import PodInfo

NOT_ELIGIBLE: Final = "not eligible to preempt again: a pod it preempted is still terminating on node"
PREEMPT_NEVER: Final = "not eligible to preempt: preemptionPolicy is Never"


def priority(pod: PodInfo) -> int:
    return pod.priority or 0


def holds_room_for(nominated: PodInfo, pod: PodInfo) -> bool:
    """Whether ``nominated``'s request counts as placed on its nominated node while ``pod`` is
    scheduled: another pod (by key and UID) of priority at least ``pod``'s."""
    if nominated.key == pod.key:
        return False
    return priority(nominated) >= priority(pod)


def terminating_by_preemption(pod: PodInfo, evicting: Container[str] = ()) -> bool:
    """A pod on its way out because a scheduler preempted it: deleting with the DisruptionTarget
    condition (kube-scheduler's ``podTerminatingByPreemption``), or one this scheduler has asked to
    evict whose deletion the watch has not shown yet (``evicting``: pod keys)."""
    return (pod.deleting and pod.preempted_by_scheduler) or pod.key in evicting


def eligible_to_preempt(
    pod: PodInfo,
    nominated_node: str,
    on_nominated_node: Iterable[PodInfo],
    *,
    nominated_node_unresolvable: bool = False,
    evicting: Container[str] = (),
) -> str | None:
    """None when ``pod`` may preempt now; otherwise why not (kube-scheduler's
    ``PodEligibleToPreemptOthers``). ``nominated_node`` is the node the pod is nominated to ("" for
    none), ``on_nominated_node`` the pods bound there, ``nominated_node_unresolvable`` whether the
    last Filter found that node unschedulable-and-unresolvable for the pod."""
    if pod.preemption_policy == "Never":
        return PREEMPT_NEVER
    if not nominated_node or nominated_node_unresolvable:
        return None
    own = priority(pod)
    for other in on_nominated_node:
        if priority(other) < own and terminating_by_preemption(other, evicting):
            return f"{NOT_ELIGIBLE} {nominated_node} ({other.ref})"
    return None
