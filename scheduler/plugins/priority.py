"""``priority``: queue order (Volcano's priority plugin, kube's PrioritySort).

Higher PriorityClass value first (the job's, then the pod's); the framework then orders by earlier
creationTimestamp, then namespace/name, so the same input always schedules in the same order
(design.md "gpuq simulate").

As Volcano's priority plugin it also orders jobs (PodGroups: the value of their
``priorityClassName``), lets a preemptor evict only pods of lower priority (of a lower-priority job,
or lower-priority pods of its own job), and calls a job starving while some of its pods are not
running.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.framework.interfaces import (
    GroupInfo,
    Handle,
    JobOrderPlugin,
    JobStarvingPlugin,
    PreemptablePlugin,
    QueueSortPlugin,
)
from gpuq_k8s.scheduler.framework.registry import PluginSettings


def resolve_priority(pod: PodInfo, objects: ObjectStore) -> int:
    """``spec.priority`` if set (admission resolved it), else the PriorityClass value, else the
    globalDefault class, else 0. A named class that does not exist is an error, as admission makes it."""
    if pod.priority is not None:
        return pod.priority
    if pod.priority_class_name:
        obj = objects.get(kinds.PRIORITY_CLASS, "", pod.priority_class_name)
        if obj is None:
            raise InvalidValue(
                "spec.priorityClassName",
                pod.priority_class_name,
                "the name of an existing PriorityClass",
                pod.ref,
            )
        return _value(obj)
    for _, _, obj in objects.list(kinds.PRIORITY_CLASS):
        if obj.get("globalDefault") is True:
            return _value(obj)
    return 0


def _value(obj: Any) -> int:
    value = obj.get("value")
    if isinstance(value, bool) or not isinstance(value, int):
        name = (obj.get("metadata") or {}).get("name", "")
        raise InvalidValue("value", value, "an integer", kinds.PRIORITY_CLASS.ref("", name))
    return value


def podgroup_priority(group: GroupInfo, objects: ObjectStore) -> int | None:
    """The value of the PodGroup's ``priorityClassName``; None without one (or an unknown class)."""
    name = group.model.spec.priorityClassName if group.model is not None else ""
    obj = objects.get(kinds.PRIORITY_CLASS, "", name) if name else None
    try:
        return _value(obj) if obj is not None else None
    except InvalidValue:
        return None


def pod_priority(pod: PodInfo) -> int:
    return pod.priority or 0


class Priority(QueueSortPlugin, JobOrderPlugin, PreemptablePlugin, JobStarvingPlugin):
    name = plugin_names.PRIORITY

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        # Job priorities of the bound pods, per Queue (value -> count), and each pod's entry: a
        # preemptor with no lower-priority job in its queue is answered without a node walk.
        self._bound: dict[str, tuple[str, int]] = {}
        self._by_queue: dict[str, Counter[int]] = {}
        handle.cluster.subscribe(self)

    # -- ClusterListener --------------------------------------------------------------------------
    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        return None

    def pod_added(self, pod: PodInfo, row: int) -> None:
        self.pod_removed(pod, row)
        entry = self._bound[pod.key] = (self.handle.queue_of(pod), self._job_priority(pod)[1])
        self._by_queue.setdefault(entry[0], Counter())[entry[1]] += 1

    def pods_added(self, pods: Sequence[PodInfo], rows: Sequence[int]) -> None:
        """:meth:`pod_added` of each (a BulkPodListener: the start's new bound pods a page at a time),
        the counts added together."""
        bound, queue_of, job_priority = self._bound, self.handle.queue_of, self._job_priority
        added: Counter[tuple[str, int]] = Counter()
        for pod in pods:
            key = pod.key
            if key in bound:
                self.pod_removed(pod, 0)
            entry = bound[key] = (queue_of(pod), job_priority(pod)[1])
            added[entry] += 1
        for (queue, priority), count in added.items():
            self._by_queue.setdefault(queue, Counter())[priority] += count

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        entry = self._bound.pop(pod.key, None)
        if entry is not None:
            counts = self._by_queue[entry[0]]
            counts[entry[1]] -= 1
            if not counts[entry[1]]:
                del counts[entry[1]]

    def rules_out(self, preemptor: PodInfo) -> bool:
        priority = self._job_priority(preemptor)[1]
        counts = self._by_queue.get(self.handle.queue_of(preemptor))
        if counts and min(counts) < priority:
            return False
        group = self.handle.group_of(preemptor)
        if group is None:
            return True
        own = pod_priority(preemptor)
        return not any(p.bound and pod_priority(p) < own for p in self.handle.group_members(group))

    def sort_key(self, pod: PodInfo) -> tuple[Any, ...]:
        # Volcano's job order, then task order: pods of a higher-priority job first (a PodGroup's
        # priorityClassName, else the pod's own priority), then by the pod's priority.
        return (-self._job_priority(pod)[1], -pod_priority(pod))

    def group_priority(self, group: GroupInfo) -> int | None:
        return podgroup_priority(group, self.handle.objects)

    def _job_priority(self, pod: PodInfo) -> tuple[str, int]:
        """The pod's job (its PodGroup, else the pod alone) and that job's priority (the pod's own
        when its PodGroup names no PriorityClass)."""
        group = self.handle.group_of(pod)
        if group is None:
            return pod.key, pod_priority(pod)
        value = self.group_priority(group)
        return group.key, pod_priority(pod) if value is None else value

    def compare_jobs(self, left: GroupInfo, right: GroupInfo) -> int:
        lp, rp = self.group_priority(left), self.group_priority(right)
        if lp is None or rp is None or lp == rp:
            return 0
        return -1 if lp > rp else 1

    def preemptable(self, preemptor: PodInfo, candidates: Sequence[PodInfo]) -> Sequence[PodInfo] | None:
        job, priority = self._job_priority(preemptor)
        victims: list[PodInfo] = []
        for pod in candidates:
            other, other_priority = self._job_priority(pod)
            if other != job:
                if other_priority < priority:
                    victims.append(pod)
            elif pod_priority(pod) < pod_priority(preemptor):
                victims.append(pod)
        return victims

    def job_starving(self, group: GroupInfo) -> bool:
        return self.handle.ready_members(group) < len(self.handle.group_members(group))
