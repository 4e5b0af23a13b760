"""API objects other than Nodes and Pods (Queue, PodGroup, ElasticQuota, GPUResourceQuota,
PriorityClass, Namespace, PodDisruptionBudget), kept as the API returns them (JSON-like mappings), by kind
(:mod:`common.model.kinds`).

Plugins parse them with their engine's models; this store only indexes them and tells subscribers
what changed, so a quota change can wake up the pods it rejected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

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
    kinds.POD_DISRUPTION_BUDGET,
)
_BY_NAME: Final = {kind.kind: kind for kind in KINDS}

ObjectListener = Callable[[Kind, str, str, Obj | None], None]


def stored_kind(name: str) -> Kind | None:
    """The kind the store files an object whose ``kind`` is ``name`` under; None when it keeps none."""
    return _BY_NAME.get(name)


class ObjectStore:
    def __init__(self) -> None:
        self._objects: dict[Kind, dict[tuple[str, str], Obj]] = {kind: {} for kind in KINDS}
        self._listeners: list[ObjectListener] = []

    def subscribe(self, listener: ObjectListener) -> None:
        self._listeners.append(listener)

    def put(self, obj: Obj) -> None:
        kind = stored_kind(str(obj.get("kind") or ""))
        if kind is None:
            raise ValueError(f"the object store keeps no {obj.get('kind')!r}")
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default") if kind.namespaced else ""
        name = str(meta.get("name") or "")
        self._objects[kind][(namespace, name)] = obj
        for listener in self._listeners:
            listener(kind, namespace, name, obj)

    def delete(self, kind: Kind, namespace: str, name: str) -> None:
        if self._objects[kind].pop((namespace if kind.namespaced else "", name), None) is not None:
            for listener in self._listeners:
                listener(kind, namespace, name, None)

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        return self._objects[kind].get((namespace if kind.namespaced else "", name))

    def list(self, kind: Kind) -> Iterator[tuple[str, str, Obj]]:
        """``(namespace, name, object)`` sorted by namespace then name, for deterministic output."""
        for (namespace, name), obj in sorted(self._objects[kind].items()):
            yield namespace, name, obj

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
