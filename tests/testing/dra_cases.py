"""Table cases of the DRA allocator, read from YAML fixtures (``tests/fixtures/dra/*.yaml``).

Each case holds real ``resource.k8s.io/v1`` objects (DeviceClasses, ResourceSlices, ResourceClaims:
``apiVersion`` and ``kind`` are filled in by the loader), the devices already allocated, the node,
and the expected answer. Most cases are ports of the structured allocator's shared test table
(``k8s.io/dynamic-resource-allocation/structured/internal/allocatortesting/allocator_testing.go``,
v0.36.4), under the upstream case name; ``upstream:`` says when a case comes from elsewhere or
``gpuq:`` why gpuq's expectation differs.

Expectation keys: ``expect`` (one entry per claim to allocate: ``results`` as ``"<request>
<driver>/<pool>/<device>[ admin][ share]"`` strings or mappings with ``consumedCapacity``,
``tolerations``, ``bindingConditions``...; ``nodeSelector`` as a node name or a selector mapping;
``config``), ``unfit`` (substrings every one of which the reasons contain), ``error`` (a substring
of the error parsing or planning raises).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuq_k8s.common.model.devices.allocator import Allocator
from gpuq_k8s.common.model.devices.amounts import parse_amount
from gpuq_k8s.common.model.devices.claims import ResourceClaim
from gpuq_k8s.common.model.devices.classes import DeviceClass
from gpuq_k8s.common.model.devices.ledger import DeviceLedger
from gpuq_k8s.common.model.devices.pools import Inventory
from gpuq_k8s.common.model.devices.results import ClaimAllocation, DeviceResult
from gpuq_k8s.common.model.devices.slices import ResourceSlice
from gpuq_k8s.common.model.node_selector import NodeSelector, only_node, parse_node_selector
from gpuq_k8s.common.model.nodes import NodeInfo

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dra"
API = "resource.k8s.io/v1"
DEFAULT_NODE = {"name": "node-1", "labels": {"region": "region-1", "planet": "earth"}}


@dataclass(frozen=True)
class Case:
    file: str
    name: str
    raw: Mapping[str, Any]

    @property
    def id(self) -> str:
        return f"{self.file}:{self.name}"


def load_cases(*names: str) -> list[Case]:
    cases = []
    for path in sorted(FIXTURES.glob("*.yaml")):
        if names and path.stem not in names:
            continue
        document = yaml.safe_load(path.read_text())
        for raw in document["cases"]:
            cases.append(Case(path.stem, raw["name"], raw))
    return cases


def with_kind(obj: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": kind, **obj}


def synthetic_claim(index: int, results: list[DeviceResult]) -> ResourceClaim:
    """A committed claim holding ``results``: upstream's ``allocatedDevices`` and
    ``allocatedCapacityDevices`` are raw device IDs, gpuq's ledger reads claims."""
    claim = ResourceClaim.from_dict(
        {"metadata": {"name": f"allocated-{index}", "namespace": "other"}, "spec": {}}
    )
    return ResourceClaim(claim.namespace, claim.name, claim.spec, allocation=ClaimAllocation(tuple(results)))


def ledger_for(raw: Mapping[str, Any]) -> DeviceLedger:
    ledger = DeviceLedger()
    claims = []
    for i, device in enumerate(raw.get("allocated") or []):
        driver, pool, name = device.split("/")
        claims.append(synthetic_claim(i, [DeviceResult("r", driver, pool, name)]))
    for i, (device, capacity) in enumerate((raw.get("allocatedShares") or {}).items()):
        driver, pool, name = device.split("/")
        consumed = {k: parse_amount(v, k) for k, v in (capacity or {}).items()}
        claims.append(
            synthetic_claim(
                100 + i,
                [DeviceResult("r", driver, pool, name, share_id=f"s{i}", consumed_capacity=consumed or None)],
            )
        )
    ledger.rebuild(claims)
    return ledger


def build(raw: Mapping[str, Any]) -> tuple[Allocator, list[ResourceClaim], NodeInfo]:
    """Parse a case; parsing errors propagate (``error:`` cases expect them)."""
    slices = [ResourceSlice.from_dict(with_kind(s, "ResourceSlice")) for s in raw.get("slices") or []]
    classes = {
        c.name: c
        for c in (DeviceClass.from_dict(with_kind(c, "DeviceClass")) for c in raw.get("classes") or [])
    }
    claims = [ResourceClaim.from_dict(with_kind(c, "ResourceClaim")) for c in raw.get("claims") or []]
    node_raw: Mapping[str, Any] = raw.get("node") or DEFAULT_NODE
    node = NodeInfo(
        str(node_raw["name"]), {str(k): str(v) for k, v in (node_raw.get("labels") or {}).items()}
    )
    counter = iter(range(10**6))
    allocator = Allocator(
        Inventory.build(slices), classes, ledger_for(raw), share_id=lambda: f"share-{next(counter)}"
    )
    return allocator, claims, node


def expected_result(item: Any) -> dict[str, Any]:
    """A comparable form of one expected result."""
    if isinstance(item, str):
        words = item.split()
        request, device = words[0], words[1]
        driver, pool, name = device.split("/")
        out: dict[str, Any] = {"request": request, "driver": driver, "pool": pool, "device": name}
        if "admin" in words[2:]:
            out["adminAccess"] = True
        if "share" in words[2:]:
            out["shareID"] = "*"
        return out
    out = dict(item)
    driver, pool, name = out.pop("device").split("/")
    out.update(driver=driver, pool=pool, device=name)
    if out.pop("share", False) or "consumedCapacity" in out:
        out["shareID"] = "*"
    if "consumedCapacity" in out:
        out["consumedCapacity"] = dict(out["consumedCapacity"])
    return out


def actual_result(result: DeviceResult) -> dict[str, Any]:
    out = result.to_dict()
    if "shareID" in out:
        out["shareID"] = "*"
    return out


def expected_selector(raw: Any, node: str) -> NodeSelector | None:
    if raw is None:
        return None
    if isinstance(raw, str):
        return only_node(raw)
    return parse_node_selector(raw, "nodeSelector", "case")


def canonical_selector(selector: NodeSelector | None) -> Any:
    if selector is None:
        return None
    return sorted(
        sorted((r.field, r.key, r.operator, tuple(sorted(r.values))) for r in term) for term in selector.terms
    )
