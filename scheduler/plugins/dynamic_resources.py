"""DynamicResources (kube-scheduler's plugin of that name), as a guard until gpuq allocates
ResourceClaims: a pod with ``spec.resourceClaims`` is never bound.

Binding such a pod without allocating its claims would leave it on a node with no device, where the
kubelet never starts it. So PreFilter refuses it, UnschedulableAndUnresolvable (no preemption can help),
with a reason that says why; the pod stays pending with that reason in its PodScheduled condition, its
FailedScheduling event, ``gpuq simulate``, ``gpuq explain`` and ``kubectl gpuq pending``. Nothing in the
cluster can change that (its claims are immutable), so it registers no event.

A member of ``predicates`` switched by ``predicate.DynamicResourceAllocationEnable`` (false: pods with
claims are placed as if they had none, and no device is allocated for them). A configuration without a
``predicates`` entry gets the guard all the same (``with_safety_rules`` in scheduler/plugins/members.py).
"""

from __future__ import annotations

from typing import Final

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import ClusterEvent, PreFilterPlugin
from gpuq_k8s.scheduler.framework.status import Status

NOT_ALLOCATED: Final = "which gpuq does not allocate yet"


def uses_claims(claims: tuple[str, ...]) -> str:
    """The reason a pod with the resource claims ``claims`` waits."""
    return f"pod uses DRA resource claims ({', '.join(claims)}), {NOT_ALLOCATED}"


class DynamicResources(PreFilterPlugin):
    name = plugin_names.DYNAMIC_RESOURCES
    events: frozenset[ClusterEvent] = frozenset()

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        if not pod.resource_claims:
            return Status.success()
        return Status.unresolvable(uses_claims(pod.resource_claims))
