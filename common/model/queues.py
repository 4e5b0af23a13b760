"""Which queue a pod is in (design.md Semantics 7), and which PodGroup.

The Queue and PodGroup objects themselves are in :mod:`common.model.crd`.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuq_k8s.common.model.annotations import DEFAULT_QUEUE, GROUP_NAME, QUEUE_NAME
from gpuq_k8s.common.model.crd import PodGroup
from gpuq_k8s.common.model.pods import PodInfo


def podgroup_key_of(pod: PodInfo) -> str | None:
    """``<namespace>/<group>`` from the pod's ``scheduling.k8s.io/group-name`` annotation, if any."""
    group = pod.annotations.get(GROUP_NAME)
    return f"{pod.namespace}/{group}" if group else None


def queue_of(pod: PodInfo, podgroups: Mapping[str, PodGroup]) -> str:
    """The queue a pod's usage counts against (design.md Semantics 7).

    Its PodGroup's ``spec.queue`` (the group named by ``scheduling.k8s.io/group-name``, looked up in
    ``podgroups`` by ``<namespace>/<name>``), else its ``scheduling.volcano.sh/queue-name``
    annotation, else ``default``. A group-name annotation naming a PodGroup that does not exist (yet)
    falls through to the annotation: the pod is not held hostage by a missing object.
    """
    key = podgroup_key_of(pod)
    if key is not None:
        group = podgroups.get(key)
        if group is not None:
            return group.queue
    return pod.annotations.get(QUEUE_NAME) or DEFAULT_QUEUE
