"""``proportion``: Volcano's queue shares, thin glue over :mod:`common.model.proportion`.

It tracks, per Queue, what bound pods hold (allocated), what bound and pending pods ask (request)
and what Inqueue PodGroups reserve (their minResources), and the cluster's allocatable total; the
deserved shares are recomputed when one of those changed and a verdict is asked. Pods of a queue
with no Queue object are not subject to proportion (design.md Semantics 7).

Extension points: queue order (higher ``spec.priority`` first, then lower share), overused
(nothing new for a queue at its deserved share), allocatable (within its real capability), job
enqueueable (minResources within the real capability), reclaimable (pods of queues above their
deserved share).

A pending pod's DRA claims count in its Queue's request as the resources ``deviceClassMappings``
names; a claim made or changed after the pod is counted again before the next verdict
(:mod:`scheduler.plugins.device_demand`).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model import proportion as model
from gpuq_k8s.common.model.crd import Queue
from gpuq_k8s.common.model.elastic.args import ProportionArgs
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.framework.interfaces import (
    AllocatablePlugin,
    EnqueuePlugin,
    GroupInfo,
    Handle,
    OverusedPlugin,
    QueueOrderPlugin,
    ReclaimablePlugin,
    read_or_warn,
)
from gpuq_k8s.scheduler.framework.registry import PluginSettings, plugin_args
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.plugins.device_charges import ClassRequests
from gpuq_k8s.scheduler.plugins.device_demand import StaleDemand


class Proportion(QueueOrderPlugin, OverusedPlugin, AllocatablePlugin, EnqueuePlugin, ReclaimablePlugin):
    name = plugin_names.PROPORTION

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        args = plugin_args(settings, ProportionArgs) or ProportionArgs()
        # DRA claims counted as the resources deviceClassMappings names, and the devices of the mapped
        # classes as part of the cluster's total (docs/design.md "Quota over devices").
        self.devices = ClassRequests(handle, args.classes)
        self._stale = StaleDemand(handle, on_stale=self._mark_dirty)  # pending pods' claims changed
        self._queues: dict[str, Queue] = {}
        self._nodes: dict[int, dict[str, int]] = {}
        self._bound: dict[str, tuple[str, dict[str, int]]] = {}  # pod key -> (queue, request)
        self._pending: dict[str, tuple[str, dict[str, int]]] = {}
        self._inqueue: dict[str, tuple[str, dict[str, int]]] = {}  # PodGroup key -> (queue, minResources)
        self._attrs: dict[str, model.QueueAttr] = {}
        self._dirty = True
        for namespace, name, obj in handle.objects.list(kinds.QUEUE):
            self._object(kinds.QUEUE, namespace, name, obj)
        handle.objects.subscribe(self._object)
        handle.cluster.subscribe(self)

    # -- inputs ---------------------------------------------------------------------------------------
    def _object(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        if kind != kinds.QUEUE:
            return
        queue = None if obj is None else read_or_warn(self.handle, f"Queue/{name}", Queue.from_dict, obj)
        if queue is None:
            self._queues.pop(name, None)
        else:
            self._queues[name] = queue
        self._dirty = True

    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        if new is None:
            self._nodes.pop(row, None)
        else:
            self._nodes[row] = dict(new.allocatable)
        self._dirty = True

    def pod_added(self, pod: PodInfo, row: int) -> None:
        self._bound[pod.key] = (self.handle.queue_of(pod), dict(self.devices.pod(pod).requests))
        self._stale.forget(pod.key)
        self._dirty = True

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        self._bound.pop(pod.key, None)
        self._dirty = True

    def pending_pod_added(self, pod: PodInfo) -> None:
        self._pending[pod.key] = (self.handle.queue_of(pod), dict(self.devices.pod(pod).requests))
        if self.devices.mapping and pod.claim_sources:
            self._stale.track(pod)
        self._dirty = True

    def pending_pod_removed(self, pod: PodInfo) -> None:
        self._pending.pop(pod.key, None)
        self._stale.forget(pod.key)
        self._dirty = True

    def _mark_dirty(self) -> None:
        self._dirty = True

    # -- the shares -------------------------------------------------------------------------------------
    def attrs(self) -> dict[str, model.QueueAttr]:
        """Every Queue's proportion state, recomputed if anything changed since the last call."""
        for pod in self._stale.take():  # a claim of a pending pod made or changed since it was counted
            self.devices.forget(pod)
            self._pending[pod.key] = (self.handle.queue_of(pod), dict(self.devices.pod(pod).requests))
        if not self._dirty:
            return self._attrs
        attrs: dict[str, model.QueueAttr] = {}
        for name, queue in sorted(self._queues.items()):
            spec = queue.spec
            attrs[name] = model.QueueAttr(
                name,
                weight=spec.weight,
                priority=spec.priority,
                capability=dict(spec.capability),
                guarantee=dict(spec.guarantee.resource),
                reclaimable=spec.reclaimable is not False,
            )
        for key, (queue_name, request) in self._bound.items():
            attr = attrs.get(queue_name)
            if attr is not None:
                model.add(attr.allocated, request)
                if key not in self._pending:
                    model.add(attr.request, request)
        for queue_name, request in self._pending.values():
            attr = attrs.get(queue_name)
            if attr is not None:
                model.add(attr.request, request)
        for queue_name, min_resources in self._inqueue.values():
            attr = attrs.get(queue_name)
            if attr is not None:
                model.add(attr.inqueue, min_resources)
        total: dict[str, int] = {}
        for allocatable in self._nodes.values():
            model.add(total, allocatable)
        model.add(total, self.devices.totals())  # the mapped DeviceClasses' devices
        model.add(total, self.devices.extended_totals())  # the extended resources DRA serves
        model.deserve(list(attrs.values()), total)
        self._attrs, self._dirty = attrs, False
        return attrs

    # -- extension points -------------------------------------------------------------------------------
    def compare_queues(self, left: str, right: str) -> int:
        attrs = self.attrs()
        if left not in attrs or right not in attrs:
            return 0
        return model.compare_queues(attrs[left], attrs[right])

    def overused(self, queue: str) -> bool:
        attr = self.attrs().get(queue)
        return attr is not None and model.overused(attr)

    def allocatable(self, queue: str, pod: PodInfo) -> bool:
        attr = self.attrs().get(queue)
        return attr is None or model.allocatable(attr, self.devices.pod(pod).requests)

    def enqueue(self, group: GroupInfo) -> Status:
        attr = self.attrs().get(group.queue)
        if attr is None:
            return Status.skip()  # a queue with no Queue object is not proportion's (Semantics 7)
        minimum = group.model.spec.minResources if group.model is not None else None
        if minimum is None:
            return Status.success()
        if model.enqueueable(attr, minimum):
            return Status.success()
        return Status.unschedulable(f"queue {group.queue} resource quota insufficient (proportion)")

    def enqueued(self, group: GroupInfo) -> None:
        minimum = group.model.spec.minResources if group.model is not None else None
        if minimum:
            self._inqueue[group.key] = (group.queue, dict(minimum))
            self._dirty = True

    def dequeued(self, group: GroupInfo) -> None:
        if self._inqueue.pop(group.key, None) is not None:
            self._dirty = True

    def rules_out(self, reclaimer: PodInfo) -> bool:
        """No other queue holds more than it deserves: there is nothing to take back."""
        mine = self.handle.queue_of(reclaimer)
        return all(model.less_equal(a.allocated, a.deserved) for n, a in self.attrs().items() if n != mine)

    def reclaimable(self, reclaimer: PodInfo, candidates: Sequence[PodInfo]) -> Sequence[PodInfo] | None:
        attrs = self.attrs()
        entries = [
            (self._bound.get(p.key, (self.handle.queue_of(p), {}))[0], dict(self.devices.pod(p).requests))
            for p in candidates
        ]
        return [candidates[i] for i in model.reclaimable(entries, attrs)]
