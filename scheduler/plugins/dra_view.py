"""The DRA objects of the object store, parsed and kept current, for the DynamicResources plugin and
whoever else reads devices (the quota plugins, ``gpuq simulate``'s report): one :class:`DraView` per
store (``ObjectStore.shared``).

* DeviceClasses by name (:class:`~common.model.devices.classes.DeviceClass`, selectors compiled once);
* the ResourceSlices as the :class:`~common.model.devices.pools.Inventory` (pools, generations, what
  each node reaches), updated from the changed slices only, when next read after a change;
* the allocated state, :class:`~common.model.devices.ledger.DeviceLedger`: every claim's
  ``status.allocation`` observed as the store changes (so after a start or a leader's re-list the
  replayed claims rebuild it: nothing is persisted elsewhere), plus the allocations in flight that
  Reserve adds and Unreserve drops;
* the :class:`~common.model.devices.allocator.Allocator` over the three.

A malformed object is left out and its reason kept (``invalid``): a slice that cannot be read offers
no devices, a class that cannot be read does not exist for the requests naming it, and a claim that
cannot be read is reported on the pod that uses it (its allocation, unreadable, is not charged).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.devices.allocator import Allocator
from gpuq_k8s.common.model.devices.claims import ResourceClaim
from gpuq_k8s.common.model.devices.classes import DeviceClass
from gpuq_k8s.common.model.devices.ledger import DeviceLedger
from gpuq_k8s.common.model.devices.pools import Inventory
from gpuq_k8s.common.model.devices.slices import ResourceSlice
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.cluster.objects import ObjectStore

DRA_KINDS: Final = frozenset({kinds.DEVICE_CLASS, kinds.RESOURCE_SLICE, kinds.RESOURCE_CLAIM})


class DraView:
    def __init__(self, objects: ObjectStore) -> None:
        self._objects = objects
        self.classes: dict[str, DeviceClass] = {}
        self.ledger = DeviceLedger()
        self._slices: dict[str, ResourceSlice] = {}
        self._changed: dict[str, ResourceSlice] = {}
        self._removed: set[str] = set()
        self._claims: dict[str, tuple[Obj, ResourceClaim]] = {}
        self.invalid: dict[str, str] = {}  # object ref -> why it could not be read
        self.allocator = Allocator(Inventory.build(()), self.classes, self.ledger)
        self.generation = 0  # moves with every change of a DRA object
        for kind in (kinds.DEVICE_CLASS, kinds.RESOURCE_SLICE, kinds.RESOURCE_CLAIM):
            for namespace, name, obj in list(objects.list(kind)):
                self._apply(kind, namespace, name, obj)
        objects.subscribe(self._apply)

    # -- the store's changes ----------------------------------------------------------------------------
    def _apply(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        if kind not in DRA_KINDS:
            return
        self.generation += 1
        ref = kind.ref(namespace, name)
        self.invalid.pop(ref, None)
        if kind is kinds.RESOURCE_CLAIM:
            self._claim(namespace, name, obj, ref)
            return
        try:
            if kind is kinds.DEVICE_CLASS:
                if obj is None:
                    self.classes.pop(name, None)
                else:
                    self.classes[name] = DeviceClass.from_dict(obj)
                return
            if obj is None:
                self._slice_gone(name)
            else:
                parsed = ResourceSlice.from_dict(obj)
                self._changed[name] = parsed
                self._removed.discard(name)
        except GpuqError as err:
            self.invalid[ref] = str(err)
            if kind is kinds.DEVICE_CLASS:
                self.classes.pop(name, None)
            else:
                self._slice_gone(name)

    def _slice_gone(self, name: str) -> None:
        self._changed.pop(name, None)
        if name in self._slices:
            self._removed.add(name)

    def _claim(self, namespace: str, name: str, obj: Obj | None, ref: str) -> None:
        key = f"{namespace}/{name}"
        if obj is None:
            self._claims.pop(key, None)
            self.ledger.forget(key)
            return
        try:
            claim = ResourceClaim.from_dict(obj)
        except GpuqError as err:
            self.invalid[ref] = str(err)
            self._claims.pop(key, None)
            self.ledger.forget(key)
            return
        self._claims[key] = (obj, claim)
        self.ledger.observe(claim)

    # -- reads ------------------------------------------------------------------------------------------
    @property
    def inventory(self) -> Inventory:
        """The slices as pools, with every change applied."""
        if self._changed or self._removed:
            changed, removed = list(self._changed.values()), set(self._removed)
            self._changed.clear()
            self._removed.clear()
            for s in changed:
                self._slices[s.name] = s
            for name in removed:
                self._slices.pop(name, None)
            self.allocator.inventory = self.allocator.inventory.updated(changed, removed)
            self.allocator.prune(self._slices.values())
        return self.allocator.inventory

    def ready_allocator(self) -> Allocator:
        """The allocator with the inventory current."""
        _ = self.inventory
        return self.allocator

    def claim(self, obj: Obj) -> ResourceClaim:
        """``obj`` (a ResourceClaim of the store) parsed; :class:`~common.model.errors.InvalidValue`
        when it is malformed."""
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
        hit = self._claims.get(key)
        if hit is not None and hit[0] is obj:
            return hit[1]
        return ResourceClaim.from_dict(obj)

    def rebuild(self) -> None:
        """The committed state again from every claim the store holds (the in-flight ones kept)."""
        claims = []
        for _, _, obj in self._objects.list(kinds.RESOURCE_CLAIM):
            try:
                claims.append(self.claim(obj))
            except GpuqError:
                continue
        self.ledger.rebuild(claims)


def dra_view(objects: ObjectStore) -> DraView:
    """The store's one :class:`DraView`."""
    return objects.shared(DraView)
