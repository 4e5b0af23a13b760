"""The DRA model's parts: wire models that refuse what the apiserver would (naming the object and the
field), consumable-capacity rounding and policies (ported from k8s.io/dynamic-resource-allocation
v0.36.4 ``structured/internal/incubating/consumable_capacity_test.go``), node selectors, the
inventory's incremental update, selector caching, and the quota hooks over devices."""

from __future__ import annotations

from typing import Any

import pytest

from gpuq_k8s.common.model.devices.amounts import NANO
from gpuq_k8s.common.model.devices.capacity import consumed, consumption, violates
from gpuq_k8s.common.model.devices.claims import ResourceClaim, ResourceClaimTemplate
from gpuq_k8s.common.model.devices.device import DeviceCapacity, RequestPolicy, ValidRange
from gpuq_k8s.common.model.devices.pools import Inventory
from gpuq_k8s.common.model.devices.quota import (
    DeviceCharge,
    DeviceNaming,
    allocation_charges,
    card_type,
    device_charge,
    devices_per_class,
    mapped_resources,
    total,
)
from gpuq_k8s.common.model.devices.results import ClaimAllocation, DeviceResult
from gpuq_k8s.common.model.devices.search import allocate_on_node
from gpuq_k8s.common.model.devices.slices import ResourceSlice
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.node_selector import parse_node_selector
from tests.testing.dra_cluster import cluster, node

ONE, TWO, THREE = NANO, 2 * NANO, 3 * NANO


def policy(
    default: int | None = ONE,
    values: tuple[int, ...] = (),
    low: int | None = None,
    high: int | None = None,
    step: int | None = None,
) -> RequestPolicy:
    return RequestPolicy(default, values, ValidRange(low, high, step) if low is not None else None)


@pytest.mark.parametrize(
    ("request_", "value", "pol", "expected"),
    [
        pytest.param(None, ONE, RequestPolicy(), ONE, id="empty"),
        pytest.param(None, TWO, policy(low=ONE), ONE, id="min in range"),
        pytest.param(None, TWO, policy(values=(ONE,)), ONE, id="default in set"),
        pytest.param(TWO, TWO, policy(low=ONE), TWO, id="more than min in range"),
        pytest.param(ONE, TWO, policy(low=TWO), TWO, id="less than min in range"),
        pytest.param(TWO, THREE, policy(low=ONE, step=TWO), THREE, id="with step (round up)"),
        pytest.param(TWO, TWO, policy(low=ONE, step=ONE), TWO, id="with step (no remaining)"),
        pytest.param(TWO, THREE, policy(values=(ONE, TWO, THREE)), TWO, id="valid value in set"),
        pytest.param(TWO, THREE, policy(values=(ONE, THREE)), THREE, id="set (round up)"),
        pytest.param(THREE, THREE, policy(values=(ONE, TWO)), THREE, id="larger than set"),
    ],
)
def test_calculate_consumed_capacity(
    request_: int | None, value: int, pol: RequestPolicy, expected: int
) -> None:
    assert consumed(request_, DeviceCapacity(value, pol)) == expected


@pytest.mark.parametrize(
    ("value", "pol", "violated"),
    [
        pytest.param(ONE, None, False, id="no constraint"),
        pytest.param(ONE, policy(low=ONE, high=TWO), False, id="less than maximum"),
        pytest.param(TWO, policy(low=ONE, high=ONE), True, id="more than maximum"),
        pytest.param(ONE, policy(values=(ONE,)), False, id="in set"),
        pytest.param(TWO, policy(values=(ONE,)), True, id="not in set"),
    ],
)
def test_violate_capacity_sharing(value: int, pol: RequestPolicy | None, violated: bool) -> None:
    assert violates(value, pol) is violated


def test_get_consumed_capacity_from_request() -> None:
    # upstream "get-consumed-capacity-from-request", except that a request naming a capacity the
    # device lacks ("dummy" here is on the device) is refused as a whole.
    capacity = {
        "capacity-0": DeviceCapacity(TWO, policy(default=TWO, low=ONE)),
        "capacity-1": DeviceCapacity(TWO, policy(default=ONE, low=ONE)),
        "dummy": DeviceCapacity(ONE),
    }
    assert consumption({"capacity-0": ONE, "dummy": ONE}, capacity) == {
        "capacity-0": ONE,
        "capacity-1": ONE,
        "dummy": ONE,
    }
    missing = consumption({"other": ONE}, capacity)
    assert not isinstance(missing, dict) and missing.message == "has no capacity other"


def slice_obj(spec: dict[str, Any], name: str = "s") -> dict[str, Any]:
    base = {
        "driver": "d.example.com",
        "nodeName": "n",
        "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {**base, **spec},
    }


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"devices": [{"name": "a"}], "sharedCounters": [{"name": "c", "counters": {}}]},
            "ResourceSlice/s: spec: invalid value 'devices and sharedCounters': expected either "
            "devices or sharedCounters",
        ),
        (
            {"allNodes": True},
            "ResourceSlice/s: spec: invalid value 'nodeName, allNodes': expected exactly one of "
            "nodeName, nodeSelector, allNodes, perDeviceNodeSelection",
        ),
        (
            {"devices": [{"name": "a", "attributes": {"x": {"int": 1, "string": "y"}}}]},
            "spec.devices[0].attributes.x: invalid value {'int': 1, 'string': 'y'}: expected exactly "
            "one of int, bool, string or version",
        ),
        (
            {"devices": [{"name": "a", "attributes": {"v": {"version": "1.0"}}}]},
            "spec.devices[0].attributes.v.version: invalid value '1.0': expected a semantic version "
            "(No Major.Minor.Patch elements found)",
        ),
        (
            {"devices": [{"name": "a", "capacity": {"memory": {"value": "80GB"}}}]},
            "spec.devices[0].capacity.memory.value: invalid value '80GB'",
        ),
        (
            {"devices": [{"name": "a", "capacity": {"memory": {}}}]},
            "spec.devices[0].capacity.memory.value: invalid value None: expected a quantity (value "
            "is required)",
        ),
        (
            {
                "devices": [
                    {
                        "name": "a",
                        "capacity": {"m": {"value": "4", "requestPolicy": {"validValues": ["2", "1"]}}},
                    }
                ]
            },
            "spec.devices[0].capacity.m.requestPolicy.validValues: invalid value ['2', '1']: "
            "expected distinct quantities in ascending order",
        ),
        (
            {"devices": [{"name": "a", "taints": [{"key": "k", "effect": "Sometimes"}]}]},
            "spec.devices[0].taints[0].effect: invalid value 'Sometimes': expected one of "
            "NoSchedule, NoExecute, None",
        ),
        (
            {"devices": [{"name": "a", "nodeName": "n"}]},
            "spec.devices[0]: invalid value 'a': expected no per-device node selection unless "
            "spec.perDeviceNodeSelection",
        ),
        (
            {"pool": {"name": "p", "generation": 1, "resourceSliceCount": 0}},
            "spec.pool.resourceSliceCount: invalid value 0: expected an integer of at least 1",
        ),
        ({"devices": [{"name": ""}]}, "spec.devices[0].name: invalid value '': expected a non-empty string"),
    ],
)
def test_a_malformed_slice_is_refused_naming_the_field(spec: dict[str, Any], message: str) -> None:
    raw = slice_obj(spec)
    if spec.get("allNodes"):
        raw["spec"]["nodeName"] = "n"
    with pytest.raises(InvalidValue) as info:
        ResourceSlice.from_dict(raw)
    assert message in str(info.value)
    assert str(info.value).startswith("ResourceSlice/s: ")


def claim_obj(devices: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ml"},
        "spec": {"devices": devices},
    }


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (
            {
                "requests": [
                    {
                        "name": "r",
                        "exactly": {"deviceClassName": "x"},
                        "firstAvailable": [{"name": "a", "deviceClassName": "x"}],
                    }
                ]
            },
            "spec.devices.requests[0]: invalid value 'r': expected exactly one of exactly or firstAvailable",
        ),
        (
            {
                "requests": [
                    {"name": "r", "exactly": {"deviceClassName": "x"}},
                    {"name": "r", "exactly": {"deviceClassName": "x"}},
                ]
            },
            "spec.devices.requests[1].name: invalid value 'r': expected a request name not used "
            "before in the claim",
        ),
        (
            {"requests": [{"name": "r", "exactly": {"deviceClassName": "x", "count": 0}}]},
            "spec.devices.requests[0].exactly.count: invalid value 0: expected a positive integer",
        ),
        (
            {
                "requests": [
                    {"name": "r", "exactly": {"deviceClassName": "x", "allocationMode": "All", "count": 2}}
                ]
            },
            "spec.devices.requests[0].exactly.count: invalid value 2: expected no count with "
            "allocationMode All",
        ),
        (
            {
                "requests": [
                    {
                        "name": "r",
                        "firstAvailable": [{"name": "a", "deviceClassName": "x", "adminAccess": True}],
                    }
                ]
            },
            "spec.devices.requests[0].firstAvailable[0].adminAccess: invalid value True: expected no "
            "adminAccess on a subrequest",
        ),
        (
            {
                "requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}],
                "constraints": [{"matchAttribute": "numa"}],
            },
            "spec.devices.constraints[0].matchAttribute: invalid value 'numa': expected a fully "
            "qualified attribute name (domain/name)",
        ),
        (
            {
                "requests": [
                    {"name": "r", "exactly": {"deviceClassName": "x", "tolerations": [{"operator": "Never"}]}}
                ]
            },
            "spec.devices.requests[0].exactly.tolerations[0].operator: invalid value 'Never': "
            "expected Exists or Equal",
        ),
        (
            {
                "requests": [
                    {
                        "name": "r",
                        "exactly": {"deviceClassName": "x", "capacity": {"requests": {"memory": "lots"}}},
                    }
                ]
            },
            "spec.devices.requests[0].exactly.capacity.requests.memory: invalid value 'lots'",
        ),
    ],
)
def test_a_malformed_claim_is_refused_naming_the_field(devices: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidValue) as info:
        ResourceClaim.from_dict(claim_obj(devices))
    assert str(info.value).startswith("ResourceClaim/ml/c: ")
    assert message in str(info.value)


def test_node_selectors_match_as_node_affinity() -> None:
    selector = parse_node_selector(
        {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "gpu", "operator": "Exists"},
                        {"key": "zone", "operator": "NotIn", "values": ["b"]},
                    ]
                },
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["special"]}]},
                {"matchExpressions": [{"key": "size", "operator": "Gt", "values": ["4"]}]},
            ]
        },
        "nodeSelector",
        "x",
    )
    assert selector.matches("n", {"gpu": "1", "zone": "a"})
    assert not selector.matches("n", {"gpu": "1", "zone": "b"})
    assert selector.matches("special", {})
    assert selector.matches("n", {"size": "8"}) and not selector.matches("n", {"size": "big"})
    assert not parse_node_selector({"nodeSelectorTerms": [{}]}, "f", "x").matches(
        "n", {}
    )  # an empty term matches nothing


def test_the_inventory_updates_only_the_changed_pools() -> None:
    a = ResourceSlice.from_dict(slice_obj({"devices": [{"name": "d0"}]}, "a"))
    b = ResourceSlice.from_dict(
        slice_obj(
            {
                "nodeName": "m",
                "pool": {"name": "q", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "d0"}],
            },
            "b",
        )
    )
    inventory = Inventory.build([a, b])
    newer = ResourceSlice.from_dict(
        slice_obj(
            {"pool": {"name": "p", "generation": 2, "resourceSliceCount": 1}, "devices": [{"name": "d1"}]},
            "a",
        )
    )
    updated = inventory.updated([newer])
    assert updated.pools[("d.example.com", "q")] is inventory.pools[("d.example.com", "q")]
    assert list(updated.pools[("d.example.com", "p")].devices) == ["d1"]
    assert [np.pool.name for np in updated.node_pools("n", {})] == ["p"]
    gone = updated.updated([], removed=["b"])
    assert ("d.example.com", "q") not in gone.pools and gone.node_pools("m", {}) == ()


def test_selectors_are_evaluated_once_per_slice() -> None:
    c = cluster()
    for i in range(5):
        allocate_on_node(c.allocator.plan([c.claim("one-h100", f"p{i}")]), node("gpu-node-1"))
    evaluations = c.allocator.cache.evaluations
    assert evaluations == 8  # two selectors (class, request) over the slice's four devices, once
    c.allocator.prune([])
    allocate_on_node(c.allocator.plan([c.claim("one-h100", "again")]), node("gpu-node-1"))
    assert c.allocator.cache.evaluations == 16


def test_card_types_from_device_attributes() -> None:
    c = cluster()
    whole = c.inventory.device("gpu.nvidia.com", "gpu-node-1", "gpu-0")
    mig = c.inventory.device("gpu.nvidia.com", "mig-node-1", "gpu-0-mig-3g.40gb-0")
    assert whole is not None and mig is not None
    assert card_type(whole[1]) == "NVIDIA-H100-80GB-HBM3"
    assert card_type(mig[1]) == "NVIDIA-A100-SXM4-80GB/mig-3g.40gb-mixed"
    renamed = {"gpu.nvidia.com": DeviceNaming(product="model")}
    assert card_type(whole[1], renamed) is None  # no such attribute: no card type, never a guess


def test_what_a_device_and_a_share_are_charged() -> None:
    c = cluster()
    h100 = c.inventory.device("gpu.nvidia.com", "gpu-node-1", "gpu-0")
    mig = c.inventory.device("gpu.nvidia.com", "mig-node-1", "gpu-0-mig-3g.40gb-0")
    shared = c.inventory.device("gpu.nvidia.com", "shared-node-1", "shared-0")
    assert h100 is not None and mig is not None and shared is not None
    assert device_charge(h100[1]) == DeviceCharge("NVIDIA-H100-80GB-HBM3", 1000, 989_000, 80 * 2**30)
    assert device_charge(mig[1]) == DeviceCharge(
        "NVIDIA-A100-SXM4-80GB/mig-3g.40gb-mixed", 1000, 133_715, 40 * 2**30
    )
    share = device_charge(shared[1], {"memory": 20 * 2**30 * NANO})
    assert share == DeviceCharge("NVIDIA-H100-80GB-HBM3", 250, 247_250, 20 * 2**30)


def test_devices_count_per_class_and_mapped_resource() -> None:
    c = cluster()
    claim = c.claim("h100-else-a100")
    allocation = ClaimAllocation(
        (
            DeviceResult("gpu/a100", "gpu.nvidia.com", "gpu-node-1", "gpu-2"),
            DeviceResult("gpu/a100", "gpu.nvidia.com", "gpu-node-1", "gpu-3", admin_access=True),
        )
    )
    per_class = devices_per_class(claim, allocation)
    assert per_class == {"gpu.nvidia.com": 1}
    assert mapped_resources(per_class, {"gpu.nvidia.com": "nvidia.com/gpu"}) == {"nvidia.com/gpu": 1}
    assert mapped_resources(per_class, {}) == {}


def test_allocation_charges_skip_admin_access() -> None:
    c = cluster()
    allocation = ClaimAllocation(
        (
            DeviceResult("a", "gpu.nvidia.com", "gpu-node-1", "gpu-0"),
            DeviceResult("a", "gpu.nvidia.com", "gpu-node-1", "gpu-2"),
            DeviceResult("b", "gpu.nvidia.com", "gpu-node-1", "gpu-1", admin_access=True),
            DeviceResult(
                "c",
                "gpu.nvidia.com",
                "shared-node-1",
                "shared-0",
                share_id="s",
                consumed_capacity={"memory": 40 * 2**30 * NANO},
            ),
        )
    )
    charges = allocation_charges(allocation, c.inventory)
    assert len(charges) == 3
    assert total(charges) == {"NVIDIA-H100-80GB-HBM3": 1500, "NVIDIA-A100-SXM4-80GB": 1000}


def test_a_claim_template_carries_the_claim_spec() -> None:
    spec = {
        "devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]
        }
    }
    template = ResourceClaimTemplate.from_dict(
        {
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t", "namespace": "ml"},
            "spec": {"spec": spec},
        }
    )
    claim = ResourceClaim.from_dict(claim_obj(spec["devices"]))
    assert template.spec == claim.spec
    assert template.spec.requests[0].alternatives[0].count == 2
    bad = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": -1}}]}}
    with pytest.raises(InvalidValue) as info:
        ResourceClaimTemplate.from_dict({"metadata": {"name": "t", "namespace": "ml"}, "spec": {"spec": bad}})
    assert str(info.value) == (
        "ResourceClaimTemplate/ml/t: spec.spec.devices.requests[0].exactly.count: invalid value -1: "
        "expected a positive integer"
    )
