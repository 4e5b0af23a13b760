"""What admission reads of the cluster: a read-only view over Queues, PodGroups and namespace quotas.

Objects are the API's JSON dicts. In the webhook the view reads the informer caches
(:class:`webhook.cluster.InformerView`); ``gpuq simulate --admission`` and the unit tests use
:class:`StaticView` over the objects they hold. Admission never reads Pods or Nodes: whatever depends on
current usage is the scheduler's call, and a webhook that cached every Pod of a large cluster would pay
memory and watch traffic for warnings only. Nodes are read only for their cards (the
:class:`~common.model.cards.catalog.CardCatalog` tells which resource each card type name stands for)
and their allocatable total (the guaranteed pool an ElasticQuota's min is warned against). DeviceClasses
and ResourceSlices are read for the card types a ResourceClaim's requests could take.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.cards.catalog import CardCatalog
from gpuq_k8s.common.model.cards.discovery import NodeCards, discover_cards
from gpuq_k8s.common.model.devices.allocator import Allocator
from gpuq_k8s.common.model.devices.classes import DeviceClass
from gpuq_k8s.common.model.devices.ledger import DeviceLedger
from gpuq_k8s.common.model.devices.pools import Inventory
from gpuq_k8s.common.model.devices.slices import ResourceSlice
from gpuq_k8s.common.model.errors import GpuqError, InvalidValue
from gpuq_k8s.common.model.gpu_share.devices import NodeGPUs, node_gpus
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.wire import Obj


class ClusterView(Protocol):
    """Read-only lookups admission needs; every method is O(1) or O(objects in one namespace)."""

    def queue(self, name: str) -> Obj | None: ...

    def pod_group(self, namespace: str, name: str) -> Obj | None: ...

    def elastic_quotas(self, namespace: str) -> Sequence[Obj]: ...

    def all_elastic_quotas(self) -> Sequence[Obj]:
        """Every ElasticQuota of every namespace (O(quotas): read on an ElasticQuota's review only)."""
        ...

    def node_capacity(self) -> Mapping[str, int]:
        """What every Node has allocatable, summed per resource (gpuq's units)."""
        ...

    def gpu_resource_quotas(self, namespace: str) -> Sequence[Obj]: ...

    def card_catalog(self) -> CardCatalog: ...

    def shared_gpus(self) -> Sequence[NodeGPUs]:
        """Every node's shareable GPUs (tensor-fusion pods', design.md Semantics 19)."""
        ...

    def all_queues(self) -> Sequence[Obj]:
        """Every Queue (O(queues): read on a ResourceClaim's review only)."""
        ...

    def devices(self) -> Allocator:
        """The published DRA devices (DeviceClasses, ResourceSlices), nothing allocated."""
        ...


Miss = tuple[str, str, str]  # kind, namespace, name of an object a lookup did not find


class LiveLookups(Protocol):
    """A view whose cache can lag the apiserver (:class:`webhook.cluster.InformerView`): it records the
    objects a lookup did not find, and can read them live, once, before a decision refuses."""

    def take_misses(self) -> list[Miss]: ...

    async def fetch(self, misses: Sequence[Miss]) -> bool: ...


def node_cards(obj: Obj) -> NodeCards | None:
    """The card types of a Node object; None for a Node that does not parse."""
    try:
        return discover_cards(NodeInfo.from_dict(obj))
    except InvalidValue:
        return None


def node_shared_gpus(obj: Obj) -> NodeGPUs | None:
    """A Node object's shareable GPUs; None for a node without them or that does not parse."""
    try:
        return node_gpus(NodeInfo.from_dict(obj))
    except InvalidValue:
        return None


def node_allocatable(obj: Obj) -> Mapping[str, int] | None:
    """A Node object's allocatable in gpuq's units; None for a Node that does not parse."""
    try:
        return NodeInfo.from_dict(obj).allocatable
    except InvalidValue:
        return None


def summed(amounts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for each in amounts:
        for resource, amount in each.items():
            total[resource] = total.get(resource, 0) + amount
    return total


def name_of(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class StaticView:
    """A :class:`ClusterView` over a fixed set of objects (simulate, tests)."""

    def __init__(self, objects: Iterable[Obj] = ()) -> None:
        self._queues: dict[str, Obj] = {}
        self._pod_groups: dict[tuple[str, str], Obj] = {}
        self._elastic: dict[str, list[Obj]] = {}
        self._gpu: dict[str, list[Obj]] = {}
        self._nodes: dict[str, NodeCards] = {}
        self._shared: dict[str, NodeGPUs] = {}
        self._allocatable: dict[str, Mapping[str, int]] = {}
        self._catalog: CardCatalog | None = None
        self._device_objects: dict[tuple[str, str], Obj] = {}
        self._devices: Allocator | None = None
        for obj in objects:
            self.add(obj)

    def add(self, obj: Obj) -> None:
        kind = kinds.of(obj)
        namespace, name = name_of(obj)
        namespace = namespace or "default"
        if kind is kinds.NODE:
            cards = node_cards(obj)
            if cards is not None:
                self._nodes[name] = cards
                self._catalog = None
            allocatable = node_allocatable(obj)
            if allocatable is not None:
                self._allocatable[name] = allocatable
            gpus = node_shared_gpus(obj)
            if gpus is not None:
                self._shared[name] = gpus
        elif kind is kinds.QUEUE:
            self._queues[name] = obj
        elif kind is kinds.POD_GROUP:
            self._pod_groups[(namespace, name)] = obj
        elif kind is kinds.ELASTIC_QUOTA:
            self._replace(self._elastic.setdefault(namespace, []), name, obj)
        elif kind is kinds.GPU_RESOURCE_QUOTA:
            self._replace(self._gpu.setdefault(namespace, []), name, obj)
        elif kind in (kinds.DEVICE_CLASS, kinds.RESOURCE_SLICE):
            self._device_objects[(kind.kind, name)] = obj
            self._devices = None

    @staticmethod
    def _replace(items: list[Obj], name: str, obj: Obj) -> None:
        items[:] = [o for o in items if name_of(o)[1] != name]
        items.append(obj)

    def queue(self, name: str) -> Obj | None:
        return self._queues.get(name)

    def pod_group(self, namespace: str, name: str) -> Obj | None:
        return self._pod_groups.get((namespace, name))

    def elastic_quotas(self, namespace: str) -> Sequence[Obj]:
        return self._elastic.get(namespace, ())

    def all_elastic_quotas(self) -> Sequence[Obj]:
        return [obj for namespace in sorted(self._elastic) for obj in self._elastic[namespace]]

    def node_capacity(self) -> Mapping[str, int]:
        return summed(self._allocatable.values())

    def gpu_resource_quotas(self, namespace: str) -> Sequence[Obj]:
        return self._gpu.get(namespace, ())

    def card_catalog(self) -> CardCatalog:
        if self._catalog is None:
            self._catalog = CardCatalog.build(self._nodes.values())
        return self._catalog

    def shared_gpus(self) -> Sequence[NodeGPUs]:
        return list(self._shared.values())

    def all_queues(self) -> Sequence[Obj]:
        return [self._queues[name] for name in sorted(self._queues)]

    def devices(self) -> Allocator:
        if self._devices is None:
            objects = self._device_objects
            self._devices = device_allocator(
                (o for (k, _), o in objects.items() if k == kinds.DEVICE_CLASS.kind),
                (o for (k, _), o in objects.items() if k == kinds.RESOURCE_SLICE.kind),
            )
        return self._devices


def device_allocator(classes: Iterable[Obj], slices: Iterable[Obj]) -> Allocator:
    """The devices the cluster publishes, for the claim checks (:mod:`common.model.devices.admission`):
    DeviceClasses and ResourceSlices parsed (one that does not parse is left out, as the scheduler
    leaves it out), with nothing allocated."""
    parsed_classes: dict[str, DeviceClass] = {}
    for obj in classes:
        try:
            device_class = DeviceClass.from_dict(obj)
        except GpuqError:
            continue
        parsed_classes[device_class.name] = device_class
    parsed_slices = []
    for obj in slices:
        try:
            parsed_slices.append(ResourceSlice.from_dict(obj))
        except GpuqError:
            continue
    return Allocator(Inventory.build(parsed_slices), parsed_classes, DeviceLedger())
