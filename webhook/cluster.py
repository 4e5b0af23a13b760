"""The webhook's :class:`~webhook.view.ClusterView` over the shared informers (``common.kube``).

Watches Nodes (kept as labels and allocatable only: that is all card discovery reads, and a Node's
status is otherwise mostly images and conditions), Queues, PodGroups, ElasticQuotas and
GPUResourceQuotas. Quotas are indexed per namespace by informer handlers; the card catalog is rebuilt
lazily, and only when some node's set of card types changed (node heartbeats change nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from common.kube import resources as kinds
from common.kube.diff import Change, strip_managed_fields
from common.kube.informer import Informer, InformerSet
from common.model.cards.catalog import CardCatalog
from common.model.cards.discovery import NodeCards
from webhook.view import Obj, node_cards

WATCHED = (kinds.NODES, kinds.QUEUES, kinds.POD_GROUPS, kinds.ELASTIC_QUOTAS, kinds.GPU_RESOURCE_QUOTAS)


def slim_node(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    return {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": "Node",
        "metadata": {
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": meta.get("labels") or {},
        },
        "status": {"allocatable": status.get("allocatable") or {}},
    }


class InformerView:
    """A live, read-only view; ``synced`` once every informer has listed."""

    def __init__(self, api_client: Any, **informer_options: Any) -> None:
        self._by_namespace: dict[str, dict[str, dict[str, Obj]]] = {
            kinds.ELASTIC_QUOTAS.kind: {},
            kinds.GPU_RESOURCE_QUOTAS.kind: {},
        }
        self._node_cards: dict[str, NodeCards] = {}
        self._catalog: CardCatalog | None = None
        informers = []
        for kind in WATCHED:
            handlers = []
            if kind is kinds.NODES:
                handlers.append(self._on_node)
            elif kind.kind in self._by_namespace:
                handlers.append(self._indexer(kind.kind))
            transform = slim_node if kind is kinds.NODES else strip_managed_fields
            informers.append(
                Informer(api_client, kind, handlers=handlers, transform=transform, **informer_options)
            )
        self.informers = InformerSet(informers)

    @property
    def synced(self) -> bool:
        return self.informers.synced

    def _indexer(self, kind: str) -> Any:
        index = self._by_namespace[kind]

        def handle(change: Change) -> None:
            namespace, name = change.key
            if change.type == "delete":
                index.get(namespace, {}).pop(name, None)
            else:
                index.setdefault(namespace, {})[name] = change.obj

        return handle

    def _on_node(self, change: Change) -> None:
        name = change.key[1]
        before = self._node_cards.get(name)
        if change.type == "delete":
            self._node_cards.pop(name, None)
            after = None
        else:
            after = node_cards(change.obj)
            if after is None:
                self._node_cards.pop(name, None)
            else:
                self._node_cards[name] = after
        if (before.cards if before else None) != (after.cards if after else None):
            self._catalog = None

    # --- ClusterView -----------------------------------------------------------------------------
    def queue(self, name: str) -> Obj | None:
        return self.informers[kinds.QUEUES.kind].get("", name)

    def pod_group(self, namespace: str, name: str) -> Obj | None:
        return self.informers[kinds.POD_GROUPS.kind].get(namespace, name)

    def elastic_quotas(self, namespace: str) -> Sequence[Obj]:
        return list(self._by_namespace[kinds.ELASTIC_QUOTAS.kind].get(namespace, {}).values())

    def gpu_resource_quotas(self, namespace: str) -> Sequence[Obj]:
        return list(self._by_namespace[kinds.GPU_RESOURCE_QUOTAS.kind].get(namespace, {}).values())

    def card_catalog(self) -> CardCatalog:
        if self._catalog is None:
            self._catalog = CardCatalog.build(self._node_cards.values())
        return self._catalog
