"""Resource pools: which slices count, and which devices a node can reach (the inventory).

A pool is one driver's ``spec.pool.name``. Its slices carry a ``generation`` and a
``resourceSliceCount``: only slices of the pool's **newest generation** count, and the pool is
**complete** when that many of them exist. An incomplete pool is never allocated from (a driver is
republishing it) and makes ``allocationMode: All`` unsatisfiable, since "all" is unknown. A pool is
**invalid** when two of its devices share a name, two counter sets share a name, or a device
consumes a counter set or counter the pool does not define; nothing is allocated from it and the
reason is reported.

Where gpuq differs from the structured allocator (docs/design.md "DRA devices"): kube-scheduler
first looks only at the slices relevant to the node and takes an older generation as current when
those alone are complete (its tests ``multi-host-resource-pool-complete-update-from-node-*`` keep a
note that it would rather not). gpuq sees every slice of the pool, so a pool that a driver is moving
between nodes is judged by its newest generation only, and device names are checked across the whole
pool, as the API defines them unique per pool.

The :class:`Inventory` is built from all slices once (and rebuilt from the changed pools on slice
events); :meth:`Inventory.node_pools` answers per node, cached per node name and labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from gpuq_k8s.common.model.devices.device import Device
from gpuq_k8s.common.model.devices.slices import ResourceSlice

PoolID = tuple[str, str]  # driver, pool
_NO_DEVICES: Final[tuple[int, ...]] = ()


@dataclass(slots=True, eq=False)
class Pool:
    """One pool's current generation. ``device_slices`` are sorted by name (the allocator's
    first-fit order); ``devices`` finds a device (and its slice) by name."""

    driver: str
    name: str
    generation: int
    slice_count: int
    slices: tuple[ResourceSlice, ...]
    complete: bool
    invalid: str = ""
    counter_sets: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    device_slices: tuple[ResourceSlice, ...] = ()
    devices: Mapping[str, tuple[ResourceSlice, Device]] = field(default_factory=dict)
    binding_conditions: bool = False

    @property
    def id(self) -> PoolID:
        return (self.driver, self.name)

    @property
    def label(self) -> str:
        return f"{self.driver}/{self.name}"


def build_pool(driver: str, name: str, slices: Iterable[ResourceSlice]) -> Pool:
    """The pool from all of its slices (any generation)."""
    every = list(slices)
    generation = max(s.generation for s in every)
    current = sorted((s for s in every if s.generation == generation), key=lambda s: s.name)
    count = current[0].slice_count
    pool = Pool(driver, name, generation, count, tuple(current), complete=len(current) == count)
    pool.device_slices = tuple(s for s in current if not s.shared_counters)
    counter_sets: dict[str, Mapping[str, int]] = {}
    devices: dict[str, tuple[ResourceSlice, Device]] = {}
    for s in current:
        for set_name, counters in s.shared_counters:
            if set_name in counter_sets:
                pool.invalid = f"duplicate counter set name {set_name}"
            counter_sets[set_name] = counters
    for s in pool.device_slices:
        for device in s.devices:
            if device.name in devices and not pool.invalid:
                pool.invalid = f"duplicate device name {device.name}"
            devices[device.name] = (s, device)
            if device.binding_conditions:
                pool.binding_conditions = True
    for _, device in devices.values():
        for consumption in device.consumes:
            defined = counter_sets.get(consumption.counter_set)
            if defined is None:
                pool.invalid = pool.invalid or f"counter set {consumption.counter_set} not found"
                continue
            for counter in consumption.counters:
                if counter not in defined:
                    pool.invalid = (
                        pool.invalid
                        or f"counter {counter} not found in counter set {consumption.counter_set}"
                    )
    pool.counter_sets = counter_sets
    pool.devices = devices
    return pool


@dataclass(frozen=True, slots=True)
class NodePool:
    """A pool as one node sees it: for each device slice, the indices of the devices it reaches."""

    pool: Pool
    reach: tuple[tuple[ResourceSlice, tuple[int, ...]], ...]


def _reach(s: ResourceSlice, name: str, labels: Mapping[str, str]) -> tuple[int, ...] | None:
    if s.node_name:
        return tuple(range(len(s.devices))) if s.node_name == name else None
    if s.all_nodes:
        return tuple(range(len(s.devices)))
    if s.node_selector is not None:
        return tuple(range(len(s.devices))) if s.node_selector.matches(name, labels) else None
    if s.per_device:
        reached = tuple(
            i
            for i, d in enumerate(s.devices)
            if (
                d.node_name == name
                if d.node_name
                else d.all_nodes or (d.node_selector is not None and d.node_selector.matches(name, labels))
            )
        )
        return reached or None
    return None  # no node selection: an unknown future extension, as upstream skips it


class Inventory:
    """Every pool of the cluster and, per node, the pools and devices it reaches."""

    __slots__ = ("_by_node", "_node_cache", "_shared", "pools")

    def __init__(self, pools: Mapping[PoolID, Pool]) -> None:
        self.pools = dict(pools)
        self._by_node: dict[str, list[Pool]] = {}
        self._shared: list[Pool] = []
        for pool in self.pools.values():
            nodes = {s.node_name for s in pool.device_slices}
            if len(nodes) == 1 and "" not in nodes:
                self._by_node.setdefault(next(iter(nodes)), []).append(pool)
            elif pool.device_slices:
                self._shared.append(pool)
        self._node_cache: dict[str, tuple[Mapping[str, str], tuple[NodePool, ...]]] = {}

    @classmethod
    def build(cls, slices: Iterable[ResourceSlice]) -> Inventory:
        grouped: dict[PoolID, list[ResourceSlice]] = {}
        for s in slices:
            grouped.setdefault((s.driver, s.pool), []).append(s)
        return cls({pid: build_pool(pid[0], pid[1], group) for pid, group in grouped.items()})

    def updated(self, changed: Iterable[ResourceSlice], removed: Iterable[str] = ()) -> Inventory:
        """A new inventory with ``changed`` slices added or replaced (by name within their pool) and the
        slices named in ``removed`` gone; untouched pools are shared with this one."""
        pools = dict(self.pools)
        gone = set(removed)
        touched: dict[PoolID, list[ResourceSlice]] = {}
        new = list(changed)
        names = {s.name for s in new} | gone
        for pid, pool in self.pools.items():
            if any(s.name in names for s in pool.slices):
                touched[pid] = [s for s in pool.slices if s.name not in names]
        for s in new:
            touched.setdefault(
                (s.driver, s.pool),
                list(self.pools[(s.driver, s.pool)].slices) if (s.driver, s.pool) in self.pools else [],
            ).append(s)
        for pid, group in touched.items():
            if group:
                pools[pid] = build_pool(pid[0], pid[1], group)
            else:
                pools.pop(pid, None)
        return Inventory(pools)

    def node_pools(self, name: str, labels: Mapping[str, str]) -> tuple[NodePool, ...]:
        """The pools ``name`` reaches, in allocation order: by driver and pool name, pools with binding
        conditions last (as the structured allocator orders them)."""
        cached = self._node_cache.get(name)
        if cached is not None and cached[0] == labels:
            return cached[1]
        found: list[NodePool] = []
        for pool in (*self._by_node.get(name, ()), *self._shared):
            reach = []
            for s in pool.device_slices:
                reached = _reach(s, name, labels)
                if reached is not None:
                    reach.append((s, reached))
            if reach:
                found.append(NodePool(pool, tuple(reach)))
        found.sort(key=lambda np: (np.pool.binding_conditions, np.pool.driver, np.pool.name))
        result = tuple(found)
        self._node_cache[name] = (dict(labels), result)
        return result

    def device(self, driver: str, pool: str, name: str) -> tuple[ResourceSlice, Device] | None:
        found = self.pools.get((driver, pool))
        return found.devices.get(name) if found is not None else None
