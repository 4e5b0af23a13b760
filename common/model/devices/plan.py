"""A pod's claims prepared once for the whole scheduling cycle (PreFilter), then allocated per node
(Filter).

:meth:`~.allocator.Allocator.plan` looks up every request's DeviceClass (a missing class is
:class:`UnknownDeviceClass`: the pod waits for it, as kube-scheduler marks it unschedulable until a
DeviceClass event), keeps claims that are already allocated (honoured, never allocated again; a
claim reserved by 256 consumers and not this pod is in use) and those another pod has in flight
(this pod waits), and holds the rest for allocation. :func:`~.search.allocate_on_node` then answers one
node: an :class:`~.search.Allocation` or an :class:`~.explain.Unfit` with the reasons.

For one node, a request's candidates are the node's devices, in the structured allocator's order
(pools by driver and name, binding-condition pools last; slices by name; devices as listed), that
pass the class's and the request's selectors (:mod:`.matching`, evaluated once per slice), whose
taints the request tolerates and whose capacity can ever serve the request. Everything that depends
on what is allocated (in use, capacity left, counters, constraints) is decided by the search.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpuq_k8s.common.model.devices.capacity import shortfall
from gpuq_k8s.common.model.devices.cel_env import CompiledSelector
from gpuq_k8s.common.model.devices.claims import ALL, Request, ResourceClaim
from gpuq_k8s.common.model.devices.classes import DeviceClass
from gpuq_k8s.common.model.devices.device import Device, DeviceTaint
from gpuq_k8s.common.model.devices.ledger import DeviceLedger
from gpuq_k8s.common.model.devices.pools import Inventory, NodePool, Pool
from gpuq_k8s.common.model.devices.results import ClaimAllocation, DeviceID
from gpuq_k8s.common.model.devices.slices import ResourceSlice
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.nodes import NodeInfo


@dataclass(eq=False, repr=False)
class UnknownDeviceClass(GpuqError):
    """A request names a DeviceClass that does not exist (yet): the pod waits for it."""

    claim: str
    request: str
    class_name: str

    def __post_init__(self) -> None:
        super().__init__(
            f"{self.claim}: request {self.request}: device class {self.class_name} does not exist"
        )


@dataclass(frozen=True, slots=True)
class Alternative:
    """A request (or subrequest) with its class, and its selectors labelled by where they come from."""

    request: Request
    device_class: DeviceClass
    selectors: tuple[tuple[str, CompiledSelector], ...]

    @property
    def name(self) -> str:
        return self.request.name

    @property
    def static_key(self) -> tuple[object, ...]:
        """What decides the static view of a slice: equal for the same request of every pod made
        from one claim template (its name too: the view's reasons name the request)."""
        request = self.request
        capacity = tuple(sorted(request.capacity.items())) if request.capacity is not None else None
        expressions = tuple(selector.expression for _, selector in self.selectors)
        return (
            request.name,
            expressions,
            self.device_class.name,
            request.tolerations,
            capacity,
            request.mode,
        )


@dataclass(frozen=True, slots=True)
class Candidate:
    """A device that can serve an alternative on this node, in search order."""

    pool: Pool
    slice: ResourceSlice
    device: Device
    id: DeviceID
    taint: DeviceTaint | None  # untolerated: only kept for allocationMode All, which then fails
    taken: Mapping[str, int]  # what one allocation consumes of its capacities


@dataclass(frozen=True, slots=True)
class Rejected:
    """A device of the node an alternative cannot use, whatever is allocated, and why."""

    device: str
    reason: str


@dataclass(frozen=True, slots=True)
class SliceView:
    """An alternative over one slice, whatever is allocated: per device index, what one allocation
    consumes and the untolerated taint (``usable``), or why it can never serve (``rejected``; the
    indices in ``errors`` failed on a selector's runtime error)."""

    usable: Mapping[int, tuple[Mapping[str, int], DeviceTaint | None]]
    rejected: Mapping[int, str]
    errors: frozenset[int]


@dataclass(slots=True)
class NodeCandidates:
    """One alternative on one node."""

    candidates: list[Candidate] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # selector runtime errors


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    claim: ResourceClaim
    requests: tuple[tuple[Alternative, ...], ...]  # per request: its alternatives (one unless prioritized)


class PlanSource(Protocol):
    """What a plan reads of the allocator that made it (:class:`~.allocator.Allocator`)."""

    inventory: Inventory
    ledger: DeviceLedger

    def static_view(self, alternative: Alternative, s: ResourceSlice) -> SliceView: ...

    def share_id(self) -> str: ...


class PodPlan:
    """The claims of one pod for one cycle: prepared once (:meth:`~.allocator.Allocator.plan`), then
    allocated node by node (:func:`~.search.allocate_on_node`, or the allocator's ``allocate``)."""

    def __init__(
        self,
        allocator: PlanSource,
        pod_uid: str,
        to_allocate: tuple[PreparedClaim, ...],
        allocated: tuple[ResourceClaim, ...],
        waiting: str | None,
    ) -> None:
        self.allocator = allocator
        self.pod_uid = pod_uid
        self.to_allocate = to_allocate
        self.allocated = allocated
        self.waiting = waiting

    def candidates(self, alternative: Alternative, pools: Sequence[NodePool]) -> NodeCandidates:
        """The devices of ``node`` that ``alternative`` can ever use (see the module doc)."""
        request = alternative.request
        all_mode = request.mode == ALL
        ledger = self.allocator.ledger
        out = NodeCandidates()
        for node_pool in pools:
            pool = node_pool.pool
            if not pool.complete or pool.invalid:
                continue
            for s, reach in node_pool.reach:
                view = self.allocator.static_view(alternative, s)
                for index in reach:
                    entry = view.usable.get(index)
                    device = s.devices[index]
                    if entry is None:
                        reason = view.rejected[index]
                        out.rejected.append(Rejected(device.name, reason))
                        if index in view.errors:
                            out.errors.append(f"{device.name}: {reason}")
                        continue
                    taken, taint = entry
                    did = (pool.driver, pool.name, device.name)
                    if all_mode and device.allow_multiple:
                        # "All" is every device with room left when the request is looked at (upstream
                        # checks capacity when it builds the list): a full shared device is not part of it.
                        short = shortfall(taken, device.capacity, ledger.used_capacity(did))
                        if short is not None:
                            out.rejected.append(Rejected(device.name, short.message))
                            continue
                    out.candidates.append(Candidate(pool, s, device, did, taint, taken))
        return out


def allocated_claim_fits(claim: ResourceClaim, node: NodeInfo) -> bool:
    """An allocated claim can be used on ``node`` when its allocation's node selector allows it."""
    allocation: ClaimAllocation | None = claim.allocation
    if allocation is None or allocation.node_selector is None:
        return True
    return allocation.node_selector.matches(node.name, node.labels)
