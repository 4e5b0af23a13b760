"""The pure quota model over DRA devices (common/model/devices/charges.py, class_mapping.py,
gpu_usage.py): what one allocated claim is charged, as every quota engine reads it, over the
NVIDIA-style fixture (tests/fixtures/dra/cluster/nvidia.yaml): whole GPUs of two types, a MIG
partition, a share of a GPU by memory capacity, admin access."""

from __future__ import annotations

import pytest

from gpuq_k8s.common.model.devices.charges import (
    Candidates,
    ClaimCharge,
    candidates,
    chosen_subrequests,
    claim_charge,
    narrowed,
    pending_cards,
)
from gpuq_k8s.common.model.devices.charges import total as total_charge
from gpuq_k8s.common.model.devices.class_mapping import mapped_requests
from gpuq_k8s.common.model.devices.gpu_usage import claim_request, combined_request
from gpuq_k8s.common.model.devices.results import ClaimAllocation, DeviceResult
from gpuq_k8s.common.model.devices.search import Allocation
from gpuq_k8s.common.model.gpu_quota.request import GPURequest
from tests.testing.dra_cluster import cluster, node

NV = "gpu.nvidia.com"
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
GIB = 2**30


def result(request: str, pool: str, device: str, **extra: object) -> DeviceResult:
    return DeviceResult(request, NV, pool, device, **extra)  # type: ignore[arg-type]


CASES = {
    "a whole H100": (
        "one-h100",
        (result("gpu", "gpu-node-1", "gpu-0"),),
        ClaimCharge("ml/one-h100", {H100: 1000}, 0, 1000, 989_000, 80 * GIB, {NV: 1}),
    ),
    "firstAvailable: charged the A100 it was allocated": (
        "h100-else-a100",
        (result("gpu/a100", "gpu-node-1", "gpu-2"),),
        ClaimCharge("ml/h100-else-a100", {A100: 1000}, 0, 1000, 312_000, 80 * GIB, {NV: 1}),
    ),
    "a MIG 1g.10gb partition: its own card type, its compute share": (
        "mig-1g",
        (result("mig", "mig-node-1", "gpu-0-mig-1g.10gb-0"),),
        None,
    ),
    "a 40Gi share of an 80Gi H100: half a card, half its TFLOPS, 40Gi": (
        "share-40gi",
        (
            result(
                "share",
                "shared-node-1",
                "shared-0",
                share_id="s",
                consumed_capacity={"memory": 40 * GIB * 10**9},
            ),
        ),
        ClaimCharge("ml/share-40gi", {H100: 500}, 0, 500, 494_500, 40 * GIB, {"shared.nvidia.com": 1}),
    ),
    "admin access is never charged": (
        "one-h100",
        (result("gpu", "gpu-node-1", "gpu-0", admin_access=True),),
        ClaimCharge("ml/one-h100", {}, 0, 0, 0, 0, {}),
    ),
}


@pytest.mark.parametrize(("claim", "results", "expected"), list(CASES.values()), ids=list(CASES))
def test_what_a_claim_is_charged(
    claim: str, results: tuple[DeviceResult, ...], expected: ClaimCharge | None
) -> None:
    c = cluster()
    charge = claim_charge(c.claim(claim), ClaimAllocation(results), c.inventory)
    if expected is None:  # MIG: the card type and one card; its TFLOPS are its profile's share
        assert dict(charge.cards) == {"NVIDIA-A100-SXM4-80GB/mig-1g.10gb-mixed": 1000}
        assert charge.vram == 10 * GIB and charge.tflops is not None and 0 < charge.tflops < 312_000
        return
    assert charge == expected


def test_a_claims_gpu_resource_quota_usage() -> None:
    """No worker of its own (its pods are the workers): its devices the GPU count, per GPU their TFLOPS
    and VRAM; a share one GPU of what it consumed; unknown specs: amounts unknown (charged 0, never
    guessed). A pod's claims checked together carry the pod's one worker."""
    two = ClaimCharge("ml/c", {H100: 2000}, 0, 2000, 2 * 989_000, 160 * GIB)
    assert claim_request(two) == GPURequest(989_000, 80 * GIB, 989_000, 80 * GIB, 2, workers=0)
    share = ClaimCharge("ml/s", {H100: 500}, 0, 500, 494_500, 40 * GIB)
    assert claim_request(share) == GPURequest(494_500, 40 * GIB, 494_500, 40 * GIB, 1, workers=0)
    unknown = ClaimCharge("ml/u", {}, 1000, 1000, None, 16 * GIB)
    assert claim_request(unknown) == GPURequest(0, 16 * GIB, 0, 16 * GIB, 1, amounts_known=False, workers=0)
    assert claim_request(ClaimCharge("ml/a")) is None  # admin access only
    both = combined_request([two, share])
    assert both is not None and both.gpu_count == 3 and both.workers == 1
    assert 200 * GIB <= both.totals()[1] < 200 * GIB + 3  # per GPU rounded up


def test_a_pods_claims_sum() -> None:
    a = ClaimCharge("ml/a", {H100: 1000}, 0, 1000, 989_000, 80 * GIB, {NV: 1})
    b = ClaimCharge("ml/b", {H100: 500, A100: 1000}, 0, 1500, None, 120 * GIB, {NV: 2})
    summed = total_charge([a, b])
    assert dict(summed.cards) == {H100: 1500, A100: 1000}
    assert summed.tflops is None and summed.vram == 200 * GIB and dict(summed.per_class) == {NV: 3}


@pytest.mark.parametrize(
    ("claim", "mapping", "expected"),
    [
        pytest.param("one-h100", {NV: "nvidia.com/gpu"}, {"nvidia.com/gpu": 1000}, id="mapped class"),
        pytest.param("one-h100", {"mig.nvidia.com": "nvidia.com/mig"}, {}, id="class not mapped"),
        pytest.param("h100-else-a100", {NV: "nvidia.com/gpu"}, {"nvidia.com/gpu": 1000}, id="firstAvailable"),
        pytest.param(
            "share-40gi",
            {"shared.nvidia.com": "example.com/shared"},
            {"example.com/shared": 1000},
            id="share",
        ),
    ],
)
def test_device_class_mappings(claim: str, mapping: dict[str, str], expected: dict[str, int]) -> None:
    assert mapped_requests([cluster().claim(claim)], mapping) == expected


def test_first_available_narrowed_and_its_pending_card_key() -> None:
    """A pending firstAvailable claim asks ``H100|A100`` (the subrequests' order); without the H100
    subrequest (its card type out of quota) the search allocates the A100."""
    c = cluster()
    plan = c.allocator.plan([c.claim("h100-else-a100")])

    def types_of(alternative: object) -> Candidates:
        types = {"gpu/h100": (H100,), "gpu/a100": (A100,)}[alternative.name]  # type: ignore[attr-defined]
        return Candidates(types)

    assert pending_cards(plan, types_of) == {f"{H100}|{A100}": 1000}
    assert pending_cards(plan, lambda a: candidates(a, c.allocator)) == {f"{H100}|{A100}": 1000}
    narrower = narrowed(plan, {"ml/h100-else-a100": {"gpu/h100"}})
    assert narrower is not None
    found = c.allocator.allocate(narrower, node("gpu-node-1"))
    assert isinstance(found, Allocation)
    assert [r.request for r in found.claims["ml/h100-else-a100"].results] == ["gpu/a100"]
    assert narrowed(plan, {"ml/h100-else-a100": {"gpu/h100", "gpu/a100"}}) is None  # nothing left
    assert narrowed(plan, {}) is None  # nothing dropped


def test_the_subrequests_an_allocation_took_while_others_are_left() -> None:
    """What GPUResourceQuota passes over when it refuses an allocation: the firstAvailable
    subrequests it took, while the request has another one left; a plain request never."""
    c = cluster()
    plan = c.allocator.plan([c.claim("h100-else-a100"), c.claim("one-h100")])
    first = c.allocator.allocate(plan, node("gpu-node-1"))
    assert isinstance(first, Allocation)
    assert chosen_subrequests(plan, first) == {"ml/h100-else-a100": {"gpu/h100"}}
    narrower = narrowed(plan, chosen_subrequests(plan, first))
    assert narrower is not None
    second = c.allocator.allocate(narrower, node("gpu-node-1"))
    assert isinstance(second, Allocation)
    assert chosen_subrequests(narrower, second) == {}  # the A100 is its last subrequest


@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        pytest.param("one-h100", {H100: 1000}, id="a whole card"),
        pytest.param("share-40gi", {H100: 500}, id="a 40Gi share of an 80Gi H100: half a card, as allocated"),
    ],
)
def test_pending_card_demand(claim: str, expected: dict[str, int]) -> None:
    c = cluster()
    plan = c.allocator.plan([c.claim(claim)])
    assert pending_cards(plan, lambda a: candidates(a, c.allocator)) == expected
