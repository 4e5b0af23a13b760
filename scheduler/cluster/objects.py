"""API objects other than Nodes and Pods (Queue, PodGroup, ElasticQuota, GPUResourceQuota,
PriorityClass, Namespace, the storage objects: PersistentVolumeClaim, PersistentVolume,
StorageClass, CSINode; PodDisruptionBudgets; the Services, ReplicationControllers, ReplicaSets and
StatefulSets topology spread's system defaults select pods by), kept as the API returns them
(JSON-like mappings), by kind (:mod:`common.model.kinds`).

Plugins parse them with their engine's models; this store only indexes them and tells subscribers
what changed, so a quota change can wake up the pods it rejected. Plugins that read the same kinds
share one parsed view of them (:meth:`ObjectStore.shared`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, TypeVar

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.wire import Obj

# The kinds the store keeps (their names are unique among them: an object is filed by its ``kind``).
KINDS: Final = (
    kinds.QUEUE,
    kinds.POD_GROUP,
    kinds.ELASTIC_QUOTA,
    kinds.GPU_RESOURCE_QUOTA,
    kinds.PRIORITY_CLASS,
    kinds.NAMESPACE,
    kinds.STORAGE_CLASS,
    kinds.CSI_NODE,
    kinds.PERSISTENT_VOLUME,
    kinds.PERSISTENT_VOLUME_CLAIM,
    kinds.SERVICE,
    kinds.REPLICATION_CONTROLLER,
    kinds.REPLICA_SET,
    kinds.STATEFUL_SET,
    kinds.POD_DISRUPTION_BUDGET,
)
_BY_NAME: Final = {kind.kind: kind for kind in KINDS}

ObjectListener = Callable[[Kind, str, str, Obj | None], None]
# (kind, namespace, name, the object before, the object after): None for an absent side.
ChangeListener = Callable[[Kind, str, str, Obj | None, Obj | None], None]
V = TypeVar("V")


def stored_kind(name: str) -> Kind | None:
    """The kind the store files an object whose ``kind`` is ``name`` under; None when it keeps none."""
    return _BY_NAME.get(name)


class ObjectStore:
    def __init__(self) -> None:
        self._objects: dict[Kind, dict[tuple[str, str], Obj]] = {kind: {} for kind in KINDS}
        self._listeners: list[ObjectListener] = []
        self._watchers: list[ChangeListener] = []
        self._shared: dict[Callable[[ObjectStore], Any], Any] = {}

    def shared(self, factory: Callable[[ObjectStore], V]) -> V:
        """The one ``factory(self)`` of this store: a view derived from its objects (parsed, indexed)
        that every plugin reading those kinds shares, made by the first that asks."""
        view = self._shared.get(factory)
        if view is None:
            view = self._shared[factory] = factory(self)
        return view

    def subscribe(self, listener: ObjectListener) -> None:
        self._listeners.append(listener)

    def watch(self, listener: ChangeListener) -> None:
        """Tell ``listener`` every put and delete with the object before and after, once every
        :meth:`subscribe` listener has seen it (the scheduler's cluster events)."""
        self._watchers.append(listener)

    def put(self, obj: Obj) -> None:
        kind = stored_kind(str(obj.get("kind") or ""))
        if kind is None:
            raise ValueError(f"the object store keeps no {obj.get('kind')!r}")
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default") if kind.namespaced else ""
        name = str(meta.get("name") or "")
        old = self._objects[kind].get((namespace, name))
        self._objects[kind][(namespace, name)] = obj
        for listener in self._listeners:
            listener(kind, namespace, name, obj)
        for watcher in self._watchers:
            watcher(kind, namespace, name, old, obj)

    def delete(self, kind: Kind, namespace: str, name: str) -> None:
        old = self._objects[kind].pop((namespace if kind.namespaced else "", name), None)
        if old is not None:
            for listener in self._listeners:
                listener(kind, namespace, name, None)
            for watcher in self._watchers:
                watcher(kind, namespace, name, old, None)

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        return self._objects[kind].get((namespace if kind.namespaced else "", name))

    def list(self, kind: Kind) -> Iterator[tuple[str, str, Obj]]:
        """``(namespace, name, object)`` sorted by namespace then name, for deterministic output."""
        for (namespace, name), obj in sorted(self._objects[kind].items()):
            yield namespace, name, obj

    def refresh(self, obj: Obj) -> None:
        """Replace a stored object by a newer copy that changes nothing its readers decide on (only
        its resourceVersion, managed fields or the status gpuq writes moved): readers that compare
        versions see the latest, and subscribers are not woken."""
        kind = stored_kind(str(obj.get("kind") or ""))
        if kind is None:
            raise ValueError(f"the object store keeps no {obj.get('kind')!r}")
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default") if kind.namespaced else ""
        self._objects[kind][(namespace, str(meta.get("name") or ""))] = obj

    def set_status(self, kind: Kind, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Replace an object's status (what a status patch does in a cluster).

        Subscribers are not told: status is what gpuq itself writes, and waking pods on our own
        bookkeeping would only spin.
        """
        obj = self.get(kind, namespace, name)
        if obj is None:
            return
        updated = dict(obj)
        updated["status"] = dict(status)
        key = (namespace if kind.namespaced else "", name)
        self._objects[kind][key] = updated
