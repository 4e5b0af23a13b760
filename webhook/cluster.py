"""The webhook's :class:`~webhook.view.ClusterView` over the shared informers (``common.kube``).

Watches Nodes (kept as labels and allocatable only: that is all card discovery and the guaranteed
pool read, and a Node's status is otherwise mostly images and conditions), Queues, PodGroups,
ElasticQuotas and GPUResourceQuotas. Quotas are indexed per namespace by informer handlers; the card
catalog is rebuilt lazily, and only when some node's set of card types changed (node heartbeats change
nothing), and so is the nodes' allocatable total, when some node's allocatable changed.

``ready`` (``/readyz``) is True only while every watch is live (Semantics 13), not merely once synced.
A Queue or PodGroup lookup the cache cannot answer is recorded; :meth:`InformerView.fetch` reads such
objects live (one GET each, bounded by ``live_timeout``) and keeps what it found for ``fetched_ttl``
seconds, by when the watch has normally delivered it (:class:`webhook.admission.Admission` uses this
before it refuses).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from gpuq_k8s.common.kube.diff import Change, strip_managed_fields
from gpuq_k8s.common.kube.errors import RequestFailed
from gpuq_k8s.common.kube.informer import Informer, InformerSet
from gpuq_k8s.common.kube.status import call
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.cards.catalog import CardCatalog
from gpuq_k8s.common.model.cards.discovery import NodeCards
from gpuq_k8s.common.model.devices.allocator import Allocator
from gpuq_k8s.common.model.gpu_share.devices import NodeGPUs
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.wire import Obj, section
from gpuq_k8s.webhook.view import (
    Miss,
    device_allocator,
    node_allocatable,
    node_cards,
    node_shared_gpus,
    summed,
)

log = logging.getLogger(__name__)
WATCHED: Final = kinds.WEBHOOK_WATCHES
LIVE: Final = {kind.kind: kind for kind in (kinds.QUEUE, kinds.POD_GROUP)}


def slim_node(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    status = section(obj, "status")
    return {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": kinds.NODE.kind,
        "metadata": {
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": meta.get("labels") or {},
        },
        "status": {"allocatable": status.get("allocatable") or {}},
    }


class InformerView:
    """A live, read-only view; ``synced`` once every informer has listed, ``ready`` while all watch."""

    def __init__(
        self,
        api_client: Any,
        *,
        live_timeout: float = 1.0,
        fetched_ttl: float = 10.0,
        **informer_options: Any,
    ) -> None:
        self._api = api_client
        self.live_timeout = live_timeout
        self.fetched_ttl = fetched_ttl
        self.live_reads = 0
        self._misses: list[Miss] = []
        self._fetched: dict[Miss, tuple[Obj, float]] = {}
        self._by_namespace: dict[str, dict[str, dict[str, Obj]]] = {
            kinds.ELASTIC_QUOTA.kind: {},
            kinds.GPU_RESOURCE_QUOTA.kind: {},
        }
        self._node_cards: dict[str, NodeCards] = {}
        self._shared: dict[str, NodeGPUs] = {}  # node -> its shareable GPUs (tensor-fusion pods')
        self._catalog: CardCatalog | None = None
        self._allocatable: dict[str, Mapping[str, int]] = {}
        self._capacity: dict[str, int] | None = None
        self._devices: Allocator | None = None
        informers = []
        for kind in WATCHED:
            handlers = []
            if kind is kinds.NODE:
                handlers.append(self._on_node)
            elif kind.kind in self._by_namespace:
                handlers.append(self._indexer(kind.kind))
            elif kind in (kinds.DEVICE_CLASS, kinds.RESOURCE_SLICE):
                handlers.append(self._on_device)
            transform = slim_node if kind is kinds.NODE else strip_managed_fields
            informers.append(
                Informer(api_client, kind, handlers=handlers, transform=transform, **informer_options)
            )
        self.informers = InformerSet(informers)

    @property
    def synced(self) -> bool:
        return self.informers.synced

    @property
    def ready(self) -> bool:
        return self.informers.watching

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
        gpus = None if change.type == "delete" else node_shared_gpus(change.obj)
        if gpus is None:
            self._shared.pop(name, None)
        else:
            self._shared[name] = gpus
        allocatable = None if change.type == "delete" else node_allocatable(change.obj)
        if self._allocatable.get(name) != allocatable:
            if allocatable is None:
                self._allocatable.pop(name, None)
            else:
                self._allocatable[name] = allocatable
            self._capacity = None

    def _on_device(self, change: Change) -> None:
        self._devices = None  # parsed again on the next claim's review

    # --- ClusterView -----------------------------------------------------------------------------
    def queue(self, name: str) -> Obj | None:
        return self.informers[kinds.QUEUE.kind].get("", name) or self._missed(kinds.QUEUE, "", name)

    def pod_group(self, namespace: str, name: str) -> Obj | None:
        found = self.informers[kinds.POD_GROUP.kind].get(namespace, name)
        return found or self._missed(kinds.POD_GROUP, namespace, name)

    def elastic_quotas(self, namespace: str) -> Sequence[Obj]:
        return list(self._by_namespace[kinds.ELASTIC_QUOTA.kind].get(namespace, {}).values())

    def all_elastic_quotas(self) -> Sequence[Obj]:
        by_namespace = self._by_namespace[kinds.ELASTIC_QUOTA.kind]
        return [obj for namespace in sorted(by_namespace) for obj in by_namespace[namespace].values()]

    def node_capacity(self) -> Mapping[str, int]:
        if self._capacity is None:
            self._capacity = summed(self._allocatable.values())
        return self._capacity

    def gpu_resource_quotas(self, namespace: str) -> Sequence[Obj]:
        return list(self._by_namespace[kinds.GPU_RESOURCE_QUOTA.kind].get(namespace, {}).values())

    def card_catalog(self) -> CardCatalog:
        if self._catalog is None:
            self._catalog = CardCatalog.build(self._node_cards.values())
        return self._catalog

    def shared_gpus(self) -> Sequence[NodeGPUs]:
        return list(self._shared.values())

    def all_queues(self) -> Sequence[Obj]:
        items = self.informers[kinds.QUEUE.kind].items()
        return [items[key] for key in sorted(items)]

    def devices(self) -> Allocator:
        if self._devices is None:
            self._devices = device_allocator(
                self.informers[kinds.DEVICE_CLASS.kind].items().values(),
                self.informers[kinds.RESOURCE_SLICE.kind].items().values(),
            )
        return self._devices

    # --- live lookups (webhook.view.LiveLookups) -------------------------------------------------
    def _missed(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        key = (kind.kind, namespace, name)
        entry = self._fetched.get(key)
        if entry is not None:
            if entry[1] > time.monotonic():
                return entry[0]
            del self._fetched[key]
        self._misses.append(key)
        return None

    def take_misses(self) -> list[Miss]:
        misses, self._misses = self._misses, []
        return misses

    async def fetch(self, misses: Sequence[Miss]) -> bool:
        """GET each missed object once; True when any exists (it is then served for ``fetched_ttl``)."""
        found = False
        now = time.monotonic()
        if len(self._fetched) > 1024:
            self._fetched = {k: v for k, v in self._fetched.items() if v[1] > now}
        for kind_name, namespace, name in dict.fromkeys(misses):
            path = LIVE[kind_name].object_path(namespace, name)
            self.live_reads += 1
            try:
                async with asyncio.timeout(self.live_timeout):
                    reply = await call(self._api, "GET", path)
            except (RequestFailed, TimeoutError) as err:  # TimeoutError: live_timeout
                log.warning("live read of %s failed: %s", path, err or type(err).__name__)
                continue
            if reply.ok:
                obj = strip_managed_fields(dict(reply.body))
                self._fetched[(kind_name, namespace, name)] = (obj, time.monotonic() + self.fetched_ttl)
                found = True
        return found
