"""The allocated state: which devices are taken, how much of each shared device's capacity is
consumed, and so which counters are used (the structured allocator's ``AllocatedState``).

Kept per claim, from two sources, with the project's ledger vocabulary (docs/design.md "Quota
model"):

* **committed**: claims whose ``status.allocation`` the API shows. :meth:`rebuild` derives them all
  from a list of claims (at start, after a re-list or a leader switch: nothing is persisted
  elsewhere), :meth:`observe` follows one claim event, :meth:`forget` a deleted claim;
* **in flight**: allocations the scheduler made for a pod (Reserve) but has not written yet
  (PreBind). :meth:`reserve` adds one atomically and refuses, naming the device, anything that
  would give a device twice (a dedicated device in use, a share over the device's capacity, a
  counter over its set); :meth:`unreserve` drops it (idempotent). When the claim's allocation
  shows up in the API the in-flight entry is replaced by the committed one, never counted twice.

``adminAccess`` results are recorded but never charged: an admin may use a device that is in use,
and does not keep it from anybody. A result with a ``shareID`` is a share of a device that allows
multiple allocations; one without is the whole device.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuq_k8s.common.model.devices.amounts import format_amount
from gpuq_k8s.common.model.devices.claims import ResourceClaim
from gpuq_k8s.common.model.devices.counters import remaining
from gpuq_k8s.common.model.devices.device import Device
from gpuq_k8s.common.model.devices.pools import Inventory, PoolID
from gpuq_k8s.common.model.devices.results import ClaimAllocation, DeviceID, DeviceResult
from gpuq_k8s.common.model.errors import GpuqError


@dataclass(eq=False, repr=False)
class DeviceConflict(GpuqError):
    """An allocation that would give a device (or capacity, or counters) twice."""

    claim: str
    device: str
    reason: str

    def __post_init__(self) -> None:
        super().__init__(f"{self.claim}: device {self.device} {self.reason}")


def _charged(allocation: ClaimAllocation) -> tuple[DeviceResult, ...]:
    return tuple(r for r in allocation.results if not r.admin_access)


class DeviceLedger:
    """Committed and in-flight allocations, with the per-device indexes the allocator reads."""

    __slots__ = (
        "_by_pool",
        "_capacity",
        "_committed",
        "_dedicated",
        "_in_flight",
        "_shares",
        "revision",
        "touched",
    )

    def __init__(self) -> None:
        self._committed: dict[str, ClaimAllocation] = {}
        self._in_flight: dict[str, ClaimAllocation] = {}
        self._dedicated: Counter[DeviceID] = Counter()
        self._shares: dict[DeviceID, int] = {}
        self._capacity: dict[DeviceID, dict[str, int]] = {}
        self._by_pool: dict[PoolID, Counter[str]] = {}
        self.revision = 0
        # The pools whose allocated state changed since a reader last cleared it (the scheduler's
        # per-node counts of free devices recompute only those nodes); None: everything changed.
        self.touched: set[PoolID] | None = set()

    # --- reads -----------------------------------------------------------------------------------

    def dedicated(self, device: DeviceID) -> bool:
        """Taken whole by some allocation."""
        return self._dedicated[device] > 0

    def shared(self, device: DeviceID) -> bool:
        """Has at least one share (a multi-allocation device in use)."""
        return device in self._shares

    def in_use(self, device: DeviceID) -> bool:
        return self._dedicated[device] > 0 or device in self._shares

    def used_capacity(self, device: DeviceID) -> Mapping[str, int]:
        """The capacity its shares consume, summed."""
        return self._capacity.get(device, {})

    def allocated_in_pool(self, pool: PoolID) -> Iterable[str]:
        """Names of the pool's devices that are in use (their counters are consumed)."""
        return self._by_pool.get(pool, Counter()).keys()

    def allocation(self, key: str) -> ClaimAllocation | None:
        """The claim's committed allocation, else its in-flight one."""
        return self._committed.get(key) or self._in_flight.get(key)

    def in_flight(self, key: str) -> bool:
        return key in self._in_flight

    # --- the index ------------------------------------------------------------------------------------

    def _apply(self, allocation: ClaimAllocation, sign: int) -> None:
        self.revision += 1
        for result in _charged(allocation):
            did = result.device_id
            if self.touched is not None:
                self.touched.add((result.driver, result.pool))
            pool = self._by_pool.setdefault((result.driver, result.pool), Counter())
            pool[result.device] += sign
            if pool[result.device] <= 0:
                del pool[result.device]
            if result.share_id is None:
                self._dedicated[did] += sign
                if self._dedicated[did] <= 0:
                    del self._dedicated[did]
                continue
            count = self._shares.get(did, 0) + sign
            if count > 0:
                self._shares[did] = count
            else:
                self._shares.pop(did, None)
            used = self._capacity.setdefault(did, {})
            for name, value in (result.consumed_capacity or {}).items():
                used[name] = used.get(name, 0) + sign * value
                if used[name] == 0:
                    del used[name]
            if not used:
                del self._capacity[did]

    # --- committed -------------------------------------------------------------------------------

    def rebuild(self, claims: Iterable[ResourceClaim]) -> None:
        """Committed state from every claim the API holds; in-flight entries of claims now allocated
        are dropped, the others kept (their PreBind is still to come)."""
        self._committed = {c.key: c.allocation for c in claims if c.allocation is not None}
        self._in_flight = {k: a for k, a in self._in_flight.items() if k not in self._committed}
        self._dedicated.clear()
        self._shares.clear()
        self._capacity.clear()
        self._by_pool.clear()
        self.touched = None
        for allocation in (*self._committed.values(), *self._in_flight.values()):
            self._apply(allocation, +1)

    def observe(self, claim: ResourceClaim) -> None:
        """A claim was added or updated: its allocation (or none) is now the committed one."""
        old = self._committed.pop(claim.key, None)
        if old is not None:
            self._apply(old, -1)
        if claim.allocation is not None:
            flying = self._in_flight.pop(claim.key, None)
            if flying is not None:
                self._apply(flying, -1)
            self._committed[claim.key] = claim.allocation
            self._apply(claim.allocation, +1)

    def forget(self, key: str) -> None:
        """A claim was deleted."""
        for table in (self._committed, self._in_flight):
            old = table.pop(key, None)
            if old is not None:
                self._apply(old, -1)

    # --- in flight ---------------------------------------------------------------------------

    def reserve(self, key: str, allocation: ClaimAllocation, inventory: Inventory) -> None:
        """Charge an allocation in flight, atomically: a :class:`DeviceConflict` (and nothing
        charged) when any device, capacity or counter would be given twice. Re-reserving a key
        replaces its previous in-flight allocation."""
        previous = self._in_flight.pop(key, None)
        if previous is not None:
            self._apply(previous, -1)
        before = {
            r.device_id: (self.dedicated(r.device_id), self.shared(r.device_id)) for r in _charged(allocation)
        }
        self._apply(allocation, +1)
        problem = self._check(allocation, inventory, before)
        if problem is not None:
            self._apply(allocation, -1)
            if previous is not None:
                self._in_flight[key] = previous
                self._apply(previous, +1)
            raise DeviceConflict(key, problem[0], problem[1])
        self._in_flight[key] = allocation

    def unreserve(self, key: str) -> None:
        """Release an in-flight allocation; nothing when there is none."""
        old = self._in_flight.pop(key, None)
        if old is not None:
            self._apply(old, -1)

    def _check(
        self, allocation: ClaimAllocation, inventory: Inventory, before: Mapping[DeviceID, tuple[bool, bool]]
    ) -> tuple[str, str] | None:
        new_in_pool: dict[PoolID, list[Device]] = {}
        for result in _charged(allocation):
            did = result.device_id
            label = "/".join(did)
            found = inventory.device(*did)
            if found is None:
                return label, "is not published by any current pool"
            device = found[1]
            if result.share_id is None:
                if self._dedicated[did] > 1 or did in self._shares:
                    return label, "is already allocated"
            else:
                if not device.allow_multiple:
                    return label, "does not allow multiple allocations"
                if self._dedicated[did] > 0:
                    return label, "is already allocated whole"
                for name, used in self.used_capacity(did).items():
                    cap = device.capacity.get(name)
                    if cap is None or used > cap.value:
                        total = format_amount(cap.value) if cap is not None else "0"
                        return (
                            label,
                            f"would be over its capacity: {format_amount(used)} of {name} consumed, "
                            f"{total} available",
                        )
            if not any(before[did]):
                new_in_pool.setdefault((result.driver, result.pool), []).append(device)
        for pid, devices in new_in_pool.items():
            pool = inventory.pools.get(pid)
            if pool is None or not pool.counter_sets:
                continue
            left = remaining(pool, self.allocated_in_pool(pid))
            for device in devices:
                for consumption in device.consumes:
                    for name in consumption.counters:
                        have = left.get(consumption.counter_set, {}).get(name, 0)
                        if have < 0:
                            return (
                                f"{pool.label}/{device.name}",
                                f"would over-consume counter {consumption.counter_set}/{name} by "
                                f"{format_amount(-have)}",
                            )
        return None
