"""``overcommit``: the enqueue check of Volcano's overcommit plugin, thin glue over
:mod:`common.model.overcommit`.

Like Volcano's session, the cluster's total allocatable, what its pods use and what the PodGroups in
the queue hold are taken once (here: again whenever a pod was bound or released, or a PodGroup
changed), and each PodGroup the enqueue action lets in adds its minimum to the queue's at once
(Volcano's JobEnqueued), so one enqueue round admits no more than the factor allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model import overcommit as engine
from gpuq_k8s.common.model.events import EventRecord
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.resources import EMPTY
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.framework.interfaces import ClusterEvent, EnqueuePlugin, GroupInfo, Handle
from gpuq_k8s.scheduler.framework.registry import PluginSettings, plugin_args
from gpuq_k8s.scheduler.framework.status import Status

# Volcano's PodGroupUnschedulableType: the reason of the PodGroup event a refusal records.
UNSCHEDULABLE: Final = "Unschedulable"
_INQUEUE: Final = "Inqueue"
_RUNNING: Final = "Running"


class Overcommit(EnqueuePlugin):
    name = plugin_names.OVERCOMMIT
    events = frozenset({ClusterEvent.POD_DELETED, ClusterEvent.NODE_ADDED, ClusterEvent.NODE_CHANGED})

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        self.args = plugin_args(settings, engine.OvercommitArgs) or engine.OvercommitArgs.parse({})
        self._snapshot: tuple[dict[str, int], dict[str, int], dict[str, int]] | None = None
        self._generation = -1
        self._refused: dict[str, str] = {}  # PodGroup key -> last refusal recorded
        handle.objects.subscribe(self._object)

    def _object(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        if kind == kinds.POD_GROUP:
            self._snapshot = None
            if obj is None:
                self._refused.pop(f"{namespace}/{name}", None)

    def _take_snapshot(self) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        """(total allocatable, used, inqueue), as Volcano's OnSessionOpen takes them."""
        cluster = self.handle.cluster
        if self._snapshot is not None and self._generation == cluster.generation:
            return self._snapshot
        n = cluster.n
        alive = cluster.alive[:n]
        total_column = cluster.allocatable[:n][alive].sum(axis=0)
        used_column = cluster.requested[:n][alive].sum(axis=0)
        names = cluster.columns.names
        total = {r: int(total_column[c]) for c, r in enumerate(names)}
        used = {r: int(used_column[c]) for c, r in enumerate(names)}
        inqueue: dict[str, int] = {}
        handle = self.handle
        for namespace, name, _ in handle.objects.list(kinds.POD_GROUP):
            group = handle.group(f"{namespace}/{name}")
            if group is None or group.model is None or group.model.spec.minResources is None:
                continue
            minimum = group.model.spec.minResources
            if group.phase == _INQUEUE:
                _add(inqueue, minimum)
            elif group.phase == _RUNNING:
                members = [p for p in handle.group_members(group) if p.key in cluster.pods]
                if len(members) >= group.min_member:
                    allocated: dict[str, int] = {}
                    for pod in members:
                        _add(allocated, pod.requests_with_pod_count)
                    _add(inqueue, engine.reserved_while_running(minimum, allocated))
        self._snapshot = (total, used, inqueue)
        self._generation = cluster.generation
        return self._snapshot

    def enqueue(self, group: GroupInfo) -> Status:
        if group.model is None or group.model.spec.minResources is None:
            return Status.success()  # best effort: Volcano permits it
        total, used, inqueue = self._take_snapshot()
        overused = engine.overused(group.model.spec.minResources, inqueue, total, used, self.args.factor)
        if not overused:
            self._refused.pop(group.key, None)
            return Status.success()
        message = engine.refusal_message(overused)
        if self._refused.get(group.key) != message:
            self._refused[group.key] = message
            self.handle.record(EventRecord(group.ref, "Normal", UNSCHEDULABLE, message))
        return Status.unschedulable(message)

    def enqueued(self, group: GroupInfo) -> None:
        if self._snapshot is not None and group.model is not None:
            _add(self._snapshot[2], group.model.spec.minResources or EMPTY)

    def dequeued(self, group: GroupInfo) -> None:
        self._snapshot = None


def _add(into: dict[str, int], amounts: Mapping[str, int]) -> None:
    for resource, amount in amounts.items():
        into[resource] = into.get(resource, 0) + amount
