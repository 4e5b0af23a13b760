"""API objects other than Nodes and Pods (Queue, PodGroup, ElasticQuota, GPUResourceQuota,
PriorityClass, Namespace), kept as the API returns them (JSON-like mappings).

Plugins parse them with their engine's models; this store only indexes them and tells subscribers
what changed, so a quota change can wake up the pods it rejected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from gpuq_k8s.common.model import wire

QUEUE: Final = "Queue"
POD_GROUP: Final = "PodGroup"
ELASTIC_QUOTA: Final = "ElasticQuota"
GPU_RESOURCE_QUOTA: Final = "GPUResourceQuota"
PRIORITY_CLASS: Final = "PriorityClass"
NAMESPACE: Final = "Namespace"
KINDS: Final = (QUEUE, POD_GROUP, ELASTIC_QUOTA, GPU_RESOURCE_QUOTA, PRIORITY_CLASS, NAMESPACE)
CLUSTER_SCOPED: Final = frozenset({QUEUE, PRIORITY_CLASS, NAMESPACE})

Obj = Mapping[str, Any]
ObjectListener = Callable[[str, str, str, Obj | None], None]


def object_ref(kind: str, namespace: str, name: str) -> str:
    """``Kind/namespace/name``, or ``Kind/name`` for a cluster-scoped kind (``Queue/q``)."""
    return wire.object_ref(kind, "" if kind in CLUSTER_SCOPED else namespace, name)


class ObjectStore:
    def __init__(self) -> None:
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {kind: {} for kind in KINDS}
        self._listeners: list[ObjectListener] = []

    def subscribe(self, listener: ObjectListener) -> None:
        self._listeners.append(listener)

    def put(self, obj: Obj) -> None:
        kind = str(obj.get("kind") or "")
        meta = obj.get("metadata") or {}
        namespace = "" if kind in CLUSTER_SCOPED else str(meta.get("namespace") or "default")
        name = str(meta.get("name") or "")
        self._objects.setdefault(kind, {})[(namespace, name)] = obj
        for listener in self._listeners:
            listener(kind, namespace, name, obj)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        if self._objects.get(kind, {}).pop((namespace, name), None) is not None:
            for listener in self._listeners:
                listener(kind, namespace, name, None)

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        return self._objects.get(kind, {}).get(("" if kind in CLUSTER_SCOPED else namespace, name))

    def list(self, kind: str) -> Iterator[tuple[str, str, Obj]]:
        """``(namespace, name, object)`` sorted by namespace then name, for deterministic output."""
        for (namespace, name), obj in sorted(self._objects.get(kind, {}).items()):
            yield namespace, name, obj

    def set_status(self, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Replace an object's status (what a status patch does in a cluster).

        Subscribers are not told: status is what gpuq itself writes, and waking pods on our own
        bookkeeping would only spin.
        """
        obj = self.get(kind, namespace, name)
        if obj is None:
            return
        updated = dict(obj)
        updated["status"] = dict(status)
        key = ("" if kind in CLUSTER_SCOPED else namespace, name)
        self._objects[kind][key] = updated
