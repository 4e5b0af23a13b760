"""``priority``: queue order (Volcano's priority plugin, kube's PrioritySort).

Higher PriorityClass value first, then earlier creationTimestamp, then namespace/name, so the same
input always schedules in the same order (design.md "gpuq simulate").
"""

from __future__ import annotations

from typing import Any, Final

from common.model.errors import InvalidValue
from common.model.pods import PodInfo
from common.model.wire import object_ref
from scheduler.cluster.objects import PRIORITY_CLASS, ObjectStore
from scheduler.framework.interfaces import Handle, QueueSortPlugin
from scheduler.framework.registry import PluginSettings

NAME: Final = "priority"


def resolve_priority(pod: PodInfo, objects: ObjectStore) -> int:
    """``spec.priority`` if set (admission resolved it), else the PriorityClass value, else the
    globalDefault class, else 0. A named class that does not exist is an error, as admission makes it."""
    if pod.priority is not None:
        return pod.priority
    if pod.priority_class_name:
        obj = objects.get(PRIORITY_CLASS, "", pod.priority_class_name)
        if obj is None:
            raise InvalidValue(
                "spec.priorityClassName",
                pod.priority_class_name,
                "the name of an existing PriorityClass",
                pod.ref,
            )
        return _value(obj)
    for _, _, obj in objects.list(PRIORITY_CLASS):
        if obj.get("globalDefault") is True:
            return _value(obj)
    return 0


def _value(obj: Any) -> int:
    value = obj.get("value")
    if isinstance(value, bool) or not isinstance(value, int):
        name = (obj.get("metadata") or {}).get("name", "")
        raise InvalidValue("value", value, "an integer", object_ref("PriorityClass", "", name))
    return value


def pod_priority(pod: PodInfo) -> int:
    return pod.priority or 0


class Priority(QueueSortPlugin):
    name = NAME

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)

    def sort_key(self, pod: PodInfo) -> tuple[Any, ...]:
        return (-pod_priority(pod), pod.creation_timestamp, pod.namespace, pod.name)
