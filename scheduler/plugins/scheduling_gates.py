"""SchedulingGates (kube-scheduler's plugin of that name, PreEnqueue): a pod with ``spec.schedulingGates``
is never attempted (:mod:`common.model.placement.scheduling_gates`).

The framework always runs it, whatever the configuration names (``scheduler/plugins/members.py``
``with_safety_rules``): the apiserver refuses to bind a gated pod, so no configuration could make
trying one useful. A gated pod waits in the queue's gated set (``scheduler/queue.py``) with
kube-scheduler's message, gets no PodScheduled condition or event of gpuq's (the apiserver set
``SchedulingGated`` when it was created), and leaves the set on the update that removes its last
gate: the queue asks PreEnqueue again on every update of the pod, so the plugin registers no cluster
event (kube-scheduler's UpdatePodSchedulingGatesEliminated of the pod itself).
"""

from __future__ import annotations

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.placement.scheduling_gates import waiting_for
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.interfaces import ClusterEvent, PreEnqueuePlugin
from gpuq_k8s.scheduler.framework.status import Status


class SchedulingGates(PreEnqueuePlugin):
    name = plugin_names.SCHEDULING_GATES
    events: frozenset[ClusterEvent] = frozenset()

    def pre_enqueue(self, pod: PodInfo) -> Status:
        if not pod.scheduling_gates:
            return Status.success()
        return Status.unresolvable(waiting_for(pod.scheduling_gates))
