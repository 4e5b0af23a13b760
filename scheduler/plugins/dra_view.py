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

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.devices.allocator import Allocator
from gpuq_k8s.common.model.devices.claims import ResourceClaim
from gpuq_k8s.common.model.devices.classes import DeviceClass
from gpuq_k8s.common.model.devices.extended import ExtendedResourceClasses
from gpuq_k8s.common.model.devices.ledger import DeviceLedger
from gpuq_k8s.common.model.devices.plan import Alternative
from gpuq_k8s.common.model.devices.pools import Inventory
from gpuq_k8s.common.model.devices.slices import ResourceSlice
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.cluster.state import ClusterState

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
_MAX_COUNTS: Final = 256  # request shapes whose per-row counts are kept

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
        # Per request shape (an Alternative's static key): per node row, how many of its devices the
        # request could take now, and whether the row has devices that count is not exact for
        # (shared devices, devices consuming counters): :meth:`free_counts`.
        self._counts: dict[tuple[object, ...], tuple[IntArray, BoolArray]] = {}
        self._counts_key: tuple[object, ...] = ()
        self._alternatives: dict[tuple[object, ...], Alternative] = {}
        self._inventory_generation = 0
        self._extended: tuple[int, ExtendedResourceClasses] | None = None
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
            old = self._claims.get(key)
            same_spec = old is not None and old[0].get("spec") == obj.get("spec")
            claim = ResourceClaim.from_dict(obj, old[1].spec if old is not None and same_spec else None)
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
            self._inventory_generation += 1
            self.allocator.prune(self._slices.values())
        return self.allocator.inventory

    def free_counts(self, alternative: Alternative, cluster: ClusterState) -> tuple[IntArray, BoolArray]:
        """Per node row ``[:cluster.n]``: how many devices ``alternative`` could take there now (usable
        by its class, selectors, tolerations and capacity, in a complete and valid pool, not in use),
        and whether the row has a usable device this count is not exact for (a device that allows
        multiple allocations, or one consuming shared counters: the exact search decides those rows).

        Kept per request shape and recomputed only for the rows whose pools' allocated state changed
        since (the ledger's ``touched`` pools), or all of them when the slices, the nodes or the rows
        changed: a burst of template pods pays for every row once, then for the row each pod took.
        Read-only arrays."""
        inventory = self.inventory
        ledger = self.ledger
        key = (self._inventory_generation, cluster.static_generation, cluster.n)
        touched = ledger.touched
        ledger.touched = set()
        if key != self._counts_key or touched is None:
            self._counts.clear()
            self._alternatives.clear()
            self._counts_key = key
        elif touched and self._counts:
            rows = self._rows_of(touched, cluster, inventory)
            for shape, (counts, mixed) in list(self._counts.items()):
                alternative_of = self._alternatives.get(shape)
                if alternative_of is None or rows is None:
                    del self._counts[shape]
                    continue
                counts.flags.writeable = True
                mixed.flags.writeable = True
                for row in rows:
                    counts[row], mixed[row] = self._count_row(alternative_of, cluster, row)
                counts.flags.writeable = False
                mixed.flags.writeable = False
        shape = alternative.static_key
        found = self._counts.get(shape)
        if found is not None:
            return found
        if len(self._counts) >= _MAX_COUNTS:
            self._counts.clear()
            self._alternatives.clear()
        n = cluster.n
        counts = np.zeros(n, dtype=np.int64)
        mixed = np.zeros(n, dtype=np.bool_)
        for row in range(n):
            if cluster.nodes[row] is not None:
                counts[row], mixed[row] = self._count_row(alternative, cluster, row)
        counts.flags.writeable = False
        mixed.flags.writeable = False
        self._alternatives[shape] = alternative
        found = self._counts[shape] = (counts, mixed)
        return found

    def _rows_of(
        self, pools: set[tuple[str, str]], cluster: ClusterState, inventory: Inventory
    ) -> list[int] | None:
        """The rows of the nodes whose devices ``pools`` hold; None when a pool is not one node's."""
        rows: list[int] = []
        for pid in pools:
            pool = inventory.pools.get(pid)
            if pool is None:
                continue
            nodes = {s.node_name for s in pool.device_slices}
            if len(nodes) != 1 or "" in nodes:
                return None
            row = cluster.row_of.get(next(iter(nodes)))
            if row is not None and row < cluster.n:
                rows.append(row)
        return rows

    def _count_row(self, alternative: Alternative, cluster: ClusterState, row: int) -> tuple[int, bool]:
        node = cluster.nodes[row]
        if node is None:
            return 0, False
        allocator = self.allocator
        ledger = self.ledger
        count, mixed = 0, False
        for node_pool in self.allocator.inventory.node_pools(node.name, node.labels):
            pool = node_pool.pool
            if not pool.complete or pool.invalid:
                continue
            for s, reach in node_pool.reach:
                usable = allocator.static_view(alternative, s).usable
                for index in reach:
                    if index not in usable:
                        continue
                    device = s.devices[index]
                    if device.allow_multiple or device.consumes:
                        mixed = True
                    elif not ledger.in_use((pool.driver, pool.name, device.name)):
                        count += 1
        return count, mixed

    def extended_classes(self) -> ExtendedResourceClasses:
        """Extended resource name -> the DeviceClass serving it, as the classes stand now."""
        cached = self._extended
        if cached is None or cached[0] != self.generation:
            cached = self._extended = (self.generation, ExtendedResourceClasses(self.classes.values()))
        return cached[1]

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
