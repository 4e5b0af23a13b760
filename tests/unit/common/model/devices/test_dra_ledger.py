"""The allocated state (common/model/devices/ledger.py) and the allocator around it, on an
NVIDIA-style cluster (tests/fixtures/dra/cluster/nvidia.yaml): rebuild from claims after a restart,
reserve/unreserve of in-flight allocations so that concurrent pods never get the same device,
shares within capacity, counters never over-consumed, shared and allocated claims honoured, admin
access never charged, and the reasons a node refuses."""

from __future__ import annotations

import pytest

from gpuq_k8s.common.model.devices.claims import ConsumerRef, ResourceClaim
from gpuq_k8s.common.model.devices.explain import Unfit
from gpuq_k8s.common.model.devices.ledger import DeviceConflict
from gpuq_k8s.common.model.devices.plan import UnknownDeviceClass, allocated_claim_fits
from gpuq_k8s.common.model.devices.results import ClaimAllocation, DeviceResult
from gpuq_k8s.common.model.devices.search import Allocation, allocate_on_node
from tests.testing.dra_cluster import Cluster, cluster, node

CUDA_SELECTOR = 'device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("9.0.0"))'


def allocate(c: Cluster, claim: ResourceClaim, on: str) -> ClaimAllocation:
    answer = allocate_on_node(c.allocator.plan([claim]), node(on))
    assert isinstance(answer, Allocation), answer.message if isinstance(answer, Unfit) else answer
    return answer.claims[claim.key]


def devices(allocation: ClaimAllocation) -> list[str]:
    return [r.device for r in allocation.results]


def committed(claim: ResourceClaim, allocation: ClaimAllocation) -> ResourceClaim:
    """The claim as the API shows it once PreBind wrote its status."""
    return ResourceClaim(claim.namespace, claim.name, claim.spec, allocation=allocation)


def test_concurrent_pods_never_get_the_same_device() -> None:
    c = cluster()
    taken = []
    for i in range(2):
        claim = c.claim("one-h100", f"pod-{i}-gpu")
        allocation = allocate(c, claim, "gpu-node-1")
        c.ledger.reserve(claim.key, allocation, c.inventory)  # Reserve: in flight, not written yet
        taken += devices(allocation)
    assert taken == ["gpu-0", "gpu-1"]
    third = allocate_on_node(c.allocator.plan([c.claim("one-h100", "pod-2-gpu")]), node("gpu-node-1"))
    assert isinstance(third, Unfit)
    assert "gpu-0, gpu-1: in use" in third.message
    assert "gpu-2, gpu-3: request gpu selector #0 false" in third.message


def test_reserve_refuses_a_device_twice_and_charges_nothing() -> None:
    c = cluster()
    claim = c.claim("one-h100", "a")
    allocation = allocate(c, claim, "gpu-node-1")
    c.ledger.reserve(claim.key, allocation, c.inventory)
    revision = c.ledger.revision
    with pytest.raises(DeviceConflict) as info:
        c.ledger.reserve("ml/b", allocation, c.inventory)  # a second pod computed the same answer
    assert str(info.value) == "ml/b: device gpu.nvidia.com/gpu-node-1/gpu-0 is already allocated"
    assert not c.ledger.in_flight("ml/b")
    c.ledger.unreserve("ml/b")  # idempotent, nothing to release
    assert c.ledger.dedicated(("gpu.nvidia.com", "gpu-node-1", "gpu-0"))
    assert c.ledger.revision > revision


def test_unreserve_frees_the_device_and_is_idempotent() -> None:
    c = cluster()
    claim = c.claim("one-h100", "a")
    allocation = allocate(c, claim, "gpu-node-1")
    c.ledger.reserve(claim.key, allocation, c.inventory)
    c.ledger.unreserve(claim.key)
    c.ledger.unreserve(claim.key)
    assert devices(allocate(c, c.claim("one-h100", "b"), "gpu-node-1")) == ["gpu-0"]


def test_rebuild_after_a_restart_derives_everything_from_claims() -> None:
    c = cluster()
    first = c.claim("one-h100", "a")
    allocation = allocate(c, first, "gpu-node-1")
    share = c.claim("share-40gi", "s")
    share_allocation = allocate(c, share, "shared-node-1")
    restarted = cluster()  # a new process: an empty ledger, the same API objects
    restarted.ledger.rebuild(
        [committed(first, allocation), committed(share, share_allocation), c.claim("one-h100")]
    )
    assert restarted.ledger.dedicated(("gpu.nvidia.com", "gpu-node-1", "gpu-0"))
    assert restarted.ledger.used_capacity(("gpu.nvidia.com", "shared-node-1", "shared-0")) == {
        "memory": 40 * 2**30 * 10**9
    }
    assert devices(allocate(restarted, restarted.claim("one-h100", "b"), "gpu-node-1")) == ["gpu-1"]


def test_an_in_flight_allocation_is_replaced_by_the_committed_one_never_counted_twice() -> None:
    c = cluster()
    claim = c.claim("one-h100", "a")
    allocation = allocate(c, claim, "gpu-node-1")
    c.ledger.reserve(claim.key, allocation, c.inventory)
    c.ledger.observe(committed(claim, allocation))  # the watch shows PreBind's write
    assert not c.ledger.in_flight(claim.key)
    c.ledger.unreserve(claim.key)  # a late Unreserve releases nothing committed
    assert c.ledger.dedicated(("gpu.nvidia.com", "gpu-node-1", "gpu-0"))
    c.ledger.observe(claim)  # deallocated (status.allocation cleared)
    assert not c.ledger.in_use(("gpu.nvidia.com", "gpu-node-1", "gpu-0"))
    c.ledger.observe(committed(claim, allocation))
    c.ledger.forget(claim.key)  # deleted
    assert not c.ledger.in_use(("gpu.nvidia.com", "gpu-node-1", "gpu-0"))


def test_rebuild_keeps_in_flight_allocations_of_claims_not_allocated_yet() -> None:
    c = cluster()
    claim = c.claim("one-h100", "a")
    c.ledger.reserve(claim.key, allocate(c, claim, "gpu-node-1"), c.inventory)
    c.ledger.rebuild([])  # a re-list while PreBind is still to come
    assert c.ledger.in_flight(claim.key)
    assert devices(allocate(c, c.claim("one-h100", "b"), "gpu-node-1")) == ["gpu-1"]


def test_two_40gi_shares_of_an_80gi_device_and_a_third_refused() -> None:
    c = cluster()
    for i in range(2):
        claim = c.claim("share-40gi", f"s{i}")
        allocation = allocate(c, claim, "shared-node-1")
        assert allocation.results[0].share_id is not None
        assert dict(allocation.results[0].consumed_capacity or {}) == {"memory": 40 * 2**30 * 10**9}
        c.ledger.reserve(claim.key, allocation, c.inventory)
    third = allocate_on_node(c.allocator.plan([c.claim("share-40gi", "s2")]), node("shared-node-1"))
    assert isinstance(third, Unfit)
    assert "shared-0: 0 of memory left, 40Gi asked" in third.message


def test_reserve_refuses_a_share_over_the_device_capacity() -> None:
    c = cluster()
    allocations = []
    for i in range(3):  # computed against the same state: each alone fits
        claim = c.claim("share-40gi", f"s{i}")
        allocations.append((claim.key, allocate(c, claim, "shared-node-1")))
    c.ledger.reserve(*allocations[0], c.inventory)
    c.ledger.reserve(*allocations[1], c.inventory)
    with pytest.raises(
        DeviceConflict, match="would be over its capacity: 120Gi of memory consumed, 80Gi available"
    ):
        c.ledger.reserve(*allocations[2], c.inventory)


def test_counters_are_never_over_consumed() -> None:
    c = cluster()
    whole = ResourceClaim.from_dict(
        {
            "metadata": {"name": "whole-a100", "namespace": "ml"},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
            },
        }
    )
    allocation = allocate(c, whole, "mig-node-1")
    assert devices(allocation) == ["gpu-0"]
    mig = c.claim("mig-1g", "m")
    mig_allocation = allocate(c, mig, "mig-node-1")  # computed before the whole GPU is charged
    c.ledger.reserve(whole.key, allocation, c.inventory)
    refused = allocate_on_node(c.allocator.plan([mig]), node("mig-node-1"))
    assert isinstance(refused, Unfit)
    assert "counter gpu-0-counters/multiprocessors: 0 left, 1 needed" in refused.message
    with pytest.raises(DeviceConflict, match="would over-consume counter gpu-0-counters/"):
        c.ledger.reserve(mig.key, mig_allocation, c.inventory)


def test_mig_partitions_share_the_counter_set() -> None:
    c = cluster()
    names = []
    for i in range(2):
        claim = c.claim("mig-1g", f"m{i}")
        allocation = allocate(c, claim, "mig-node-1")
        c.ledger.reserve(claim.key, allocation, c.inventory)
        names += devices(allocation)
    assert names == ["gpu-0-mig-1g.10gb-0", "gpu-0-mig-1g.10gb-1"]
    whole = allocate_on_node(
        c.allocator.plan(
            [
                ResourceClaim.from_dict(
                    {
                        "metadata": {"name": "w", "namespace": "ml"},
                        "spec": {
                            "devices": {
                                "requests": [
                                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
                                ]
                            }
                        },
                    }
                )
            ]
        ),
        node("mig-node-1"),
    )
    assert isinstance(whole, Unfit)
    assert "gpu-0: counter gpu-0-counters/multiprocessors: 5 left, 7 needed" in whole.message


def test_admin_access_is_never_charged() -> None:
    c = cluster()
    admin = ClaimAllocation(
        (DeviceResult("gpu", "gpu.nvidia.com", "gpu-node-1", "gpu-0", admin_access=True),)
    )
    c.ledger.reserve("ml/admin", admin, c.inventory)
    assert not c.ledger.in_use(("gpu.nvidia.com", "gpu-node-1", "gpu-0"))
    assert devices(allocate(c, c.claim("one-h100", "a"), "gpu-node-1")) == ["gpu-0"]


def test_an_allocated_claim_is_honoured_and_shared_not_allocated_again() -> None:
    c = cluster()
    claim = c.claim("one-h100", "shared-by-pods")
    allocation = allocate(c, claim, "gpu-node-1")
    reserved = ResourceClaim(
        claim.namespace,
        claim.name,
        claim.spec,
        allocation=allocation,
        reserved_for=(ConsumerRef("pods", "pod-a", "uid-a"),),
    )
    c.ledger.observe(reserved)
    plan = c.allocator.plan([reserved], pod_uid="uid-b")
    assert plan.to_allocate == () and plan.allocated == (reserved,) and plan.waiting is None
    assert isinstance(allocate_on_node(plan, node("gpu-node-1")), Allocation)  # nothing left to allocate
    assert allocated_claim_fits(reserved, node("gpu-node-1"))
    assert not allocated_claim_fits(reserved, node("shared-node-1"))  # its node selector: gpu-node-1
    elsewhere = allocate_on_node(plan, node("shared-node-1"))
    assert isinstance(elsewhere, Unfit)
    assert elsewhere.message == (
        "ResourceClaim/ml/shared-by-pods: allocated to devices not reachable from node shared-node-1"
    )


def test_a_claim_reserved_by_256_other_consumers_is_in_use() -> None:
    c = cluster()
    claim = c.claim("one-h100", "popular")
    allocation = allocate(c, claim, "gpu-node-1")
    full = ResourceClaim(
        claim.namespace,
        claim.name,
        claim.spec,
        allocation=allocation,
        reserved_for=tuple(ConsumerRef("pods", f"p{i}", f"u{i}") for i in range(256)),
    )
    waiting = c.allocator.plan([full], pod_uid="other")
    assert waiting.waiting == "ResourceClaim/ml/popular is in use by 256 consumers"
    refused = allocate_on_node(waiting, node("gpu-node-1"))
    assert isinstance(refused, Unfit)
    assert refused.message == "ResourceClaim/ml/popular is in use by 256 consumers"
    assert c.allocator.plan([full], pod_uid="u7").waiting is None


def test_a_claim_in_flight_for_another_pod_makes_the_pod_wait() -> None:
    c = cluster()
    claim = c.claim("one-h100", "template-claim")
    c.ledger.reserve(claim.key, allocate(c, claim, "gpu-node-1"), c.inventory)
    assert (
        c.allocator.plan([claim]).waiting
        == "ResourceClaim/ml/template-claim is in the process of being allocated"
    )


def test_first_available_falls_back_to_the_second_card_type() -> None:
    c = cluster()
    picked = []
    for i in range(4):
        claim = c.claim("h100-else-a100", f"p{i}")
        allocation = allocate(c, claim, "gpu-node-1")
        c.ledger.reserve(claim.key, allocation, c.inventory)
        picked.append((allocation.results[0].request, allocation.results[0].device))
    assert picked == [
        ("gpu/h100", "gpu-0"),
        ("gpu/h100", "gpu-1"),
        ("gpu/a100", "gpu-2"),
        ("gpu/a100", "gpu-3"),
    ]


def test_a_missing_device_class_makes_the_pod_wait_for_it() -> None:
    c = cluster()
    claim = ResourceClaim.from_dict(
        {
            "metadata": {"name": "x", "namespace": "ml"},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "tpu.example.com"}}]}
            },
        }
    )
    with pytest.raises(
        UnknownDeviceClass,
        match=r"ResourceClaim/ml/x: request gpu: device class tpu\.example\.com does not exist",
    ):
        c.allocator.plan([claim])


def test_a_selector_runtime_error_is_no_match_and_is_reported() -> None:
    c = cluster()
    claim = ResourceClaim.from_dict(
        {
            "metadata": {"name": "x", "namespace": "ml"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "gpu.nvidia.com",
                                "selectors": [{"cel": {"expression": CUDA_SELECTOR}}],
                            },
                        }
                    ]
                }
            },
        }
    )
    answer = allocate_on_node(c.allocator.plan([claim]), node("gpu-node-1"))
    assert isinstance(answer, Unfit)
    assert answer.selector_errors[0] == (
        'gpu-0: request gpu selector #0: NOT_FOUND: Key not found in map : "cudaComputeCapability"'
    )
    assert len(answer.selector_errors) == 4
    assert (
        "0 of 1 devices usable (gpu-0, gpu-1, gpu-2, gpu-3: request gpu selector #0: NOT_FOUND"
        in answer.message
    )


def test_a_node_without_devices_says_so() -> None:
    c = cluster()
    answer = allocate_on_node(c.allocator.plan([c.claim("one-h100")]), node("cpu-node-1"))
    assert isinstance(answer, Unfit)
    assert answer.message == "ResourceClaim/ml/one-h100: no ResourceSlice of any pool reaches node cpu-node-1"


def test_the_allocation_is_the_status_the_api_takes() -> None:
    c = cluster()
    claim = c.claim("share-40gi", "s")
    allocation = allocate(c, claim, "shared-node-1")
    wire = allocation.to_dict()
    assert wire == {
        "devices": {
            "results": [
                {
                    "request": "share",
                    "driver": "gpu.nvidia.com",
                    "pool": "shared-node-1",
                    "device": "shared-0",
                    "shareID": "share-0",
                    "consumedCapacity": {"memory": "40Gi"},
                }
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["shared-node-1"]}]}
            ]
        },
    }
    assert ClaimAllocation.from_dict(wire, "ResourceClaim/ml/s") == allocation
