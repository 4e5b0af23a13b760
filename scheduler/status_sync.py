"""The batched status sync: every dirty custom-resource status written once (PodGroup phases and
conditions, Volcano Queue status, the quota plugins' usage and conditions with their events).

Called after a batch of cycles (the simulator after each round, the cluster scheduler on a timer,
scheduler/service.py), never per pod: a hundred pods bound in one namespace make one status patch.
Patches to the same object are merged first (:func:`scheduler.framework.interfaces.merge_status_patches`
against the object's current status). :meth:`scheduler.cycle.Scheduler.sync_status` runs it on the
scheduler's parts.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.wire import section
from gpuq_k8s.scheduler.backend import ClusterBackend
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.framework.interfaces import merge_status_patches
from gpuq_k8s.scheduler.framework.runtime import Framework
from gpuq_k8s.scheduler.groups import GroupTracker


def sync_status(
    podgroups: GroupTracker,
    objects: ObjectStore,
    framework: Framework,
    backend: ClusterBackend,
    wall_clock: Callable[[], datetime],
) -> int:
    """Write every dirty status once (``podgroups``' and the ``framework``'s status sources', dated by
    ``wall_clock``) through ``backend``; returns how many objects were patched."""
    queues = {name: section(obj, "status") for _, name, obj in objects.list(kinds.QUEUE)}
    patches = podgroups.take_status() + podgroups.take_queue_status(queues)
    now = wall_clock()
    for source in framework.status_sources:
        more, events = source.take_status(now)
        patches.extend(more)
        for event in events:
            framework.record(event)
    merged = merge_status_patches(patches, lambda *ref: section(objects.get(*ref), "status"))
    for patch in merged:
        backend.patch_status(patch.kind, patch.namespace, patch.name, patch.status)
    return len(merged)
