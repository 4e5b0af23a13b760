"""An allocation: ``status.allocation`` of a ResourceClaim, as the allocator produces it and as the
ledger reads it back from the API (:class:`ClaimAllocation`).

``results`` name the request (``gpu`` or ``gpu/h100`` for a ``firstAvailable`` subrequest), the
device (driver, pool, device), whether it is admin access, the request's tolerations, and for a
device that allows multiple allocations the ``shareID`` and the ``consumedCapacity``. ``config``
lists the class configuration (once per class, naming every request it applies to) and then the
claim's own, as the structured allocator orders them. ``nodeSelector`` restricts where the claim
can be used: the node itself once any device is node-local, else the slices' selectors combined.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuq_k8s.common.model import wire
from gpuq_k8s.common.model.devices.amounts import format_amount, parse_amount
from gpuq_k8s.common.model.devices.taints import Toleration, parse_tolerations
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.node_selector import NodeSelector, parse_node_selector

DeviceID = tuple[str, str, str]  # driver, pool, device


@dataclass(frozen=True, slots=True)
class DeviceResult:
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()
    share_id: str | None = None
    consumed_capacity: Mapping[str, int] | None = None
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()

    @property
    def device_id(self) -> DeviceID:
        return (self.driver, self.pool, self.device)

    @property
    def request_base(self) -> str:
        """The claim's request this result belongs to (``gpu`` of ``gpu/h100``)."""
        return self.request.partition("/")[0]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "request": self.request,
            "driver": self.driver,
            "pool": self.pool,
            "device": self.device,
        }
        if self.admin_access:
            out["adminAccess"] = True
        if self.tolerations:
            out["tolerations"] = [t.to_dict() for t in self.tolerations]
        if self.share_id is not None:
            out["shareID"] = self.share_id
        if self.consumed_capacity:
            out["consumedCapacity"] = {k: format_amount(v) for k, v in sorted(self.consumed_capacity.items())}
        if self.binding_conditions:
            out["bindingConditions"] = list(self.binding_conditions)
        if self.binding_failure_conditions:
            out["bindingFailureConditions"] = list(self.binding_failure_conditions)
        return out


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    results: tuple[DeviceResult, ...]
    config: tuple[Mapping[str, Any], ...] = ()
    node_selector: NodeSelector | None = None

    def to_dict(self) -> dict[str, Any]:
        """The ``status.allocation`` object to write."""
        devices: dict[str, Any] = {"results": [r.to_dict() for r in self.results]}
        if self.config:
            devices["config"] = [dict(c) for c in self.config]
        out: dict[str, Any] = {"devices": devices}
        if self.node_selector is not None:
            out["nodeSelector"] = self.node_selector.to_dict()
        return out

    @classmethod
    def from_dict(cls, raw: Any, where: str, field: str = "status.allocation") -> ClaimAllocation:
        allocation = wire.mapping(raw, field, where)
        devices = wire.mapping(allocation.get("devices"), f"{field}.devices", where)
        results = []
        for i, item in enumerate(wire.items(devices.get("results"), f"{field}.devices.results", where)):
            at = f"{field}.devices.results[{i}]"
            names = []
            for key in ("request", "driver", "pool", "device"):
                value = item.get(key)
                if not isinstance(value, str) or not value:
                    raise InvalidValue(f"{at}.{key}", value, "a non-empty string", where)
                names.append(value)
            share = item.get("shareID")
            if share is not None and not isinstance(share, str):
                raise InvalidValue(f"{at}.shareID", share, "a string", where)
            consumed = item.get("consumedCapacity")
            capacity = (
                {
                    str(k): parse_amount(v, f"{at}.consumedCapacity.{k}", where)
                    for k, v in wire.mapping(consumed, f"{at}.consumedCapacity", where).items()
                }
                if consumed is not None
                else None
            )
            results.append(
                DeviceResult(
                    names[0],
                    names[1],
                    names[2],
                    names[3],
                    admin_access=item.get("adminAccess") is True,
                    tolerations=parse_tolerations(item.get("tolerations"), f"{at}.tolerations", where),
                    share_id=share,
                    consumed_capacity=capacity,
                    binding_conditions=tuple(item.get("bindingConditions") or ()),
                    binding_failure_conditions=tuple(item.get("bindingFailureConditions") or ()),
                )
            )
        selector = allocation.get("nodeSelector")
        return cls(
            tuple(results),
            tuple(wire.items(devices.get("config"), f"{field}.devices.config", where)),
            parse_node_selector(selector, f"{field}.nodeSelector", where) if selector is not None else None,
        )
