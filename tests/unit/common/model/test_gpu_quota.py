"""GPUResourceQuota engine and TFLOPS table (gpu-resource-quota.md; design.md Semantics 5)."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuq_k8s.common.model import annotations as ann
from gpuq_k8s.common.model.cards.card_type import CardType
from gpuq_k8s.common.model.errors import InvalidAnnotation, InvalidValue
from gpuq_k8s.common.model.gpu_quota.card_share import card_share
from gpuq_k8s.common.model.gpu_quota.quota import GPUResourceQuota, validate_gpu_resource_quota
from gpuq_k8s.common.model.gpu_quota.request import GPURequest, pod_gpu_request, request_from_annotations
from gpuq_k8s.common.model.gpu_quota.store import GPUQuotaStore
from gpuq_k8s.common.model.gpu_specs import card_tflops, normalise_product
from gpuq_k8s.common.model.quota_exceeded import QuotaExceeded
from tests.testing.builders import GPU, MakeGPUResourceQuota, MakePod
from tests.testing.hostile import ANNOTATION_VALUES, OBJECTS, only_gpuq_errors

GI = 2**30
NOW = datetime(2024, 1, 15, 10, 30, tzinfo=UTC)


# Templates: build from a .copy() (builders change in place).
QUOTA = MakeGPUResourceQuota("team-a-quota", "team-a")
POD = MakePod("p", "team-a").node("n1").phase("Running")


def store_with(**spec: Any) -> GPUQuotaStore:
    store = GPUQuotaStore()
    store.set_quota(GPUResourceQuota.from_dict(QUOTA.copy().spec(**spec).obj()))
    return store


def req(tflops: int = 0, vram_gi: int = 0, count: int = 1, lim_tflops: int | None = None) -> GPURequest:
    lt = tflops if lim_tflops is None else lim_tflops
    return GPURequest(tflops * 1000, vram_gi * GI, lt * 1000, vram_gi * GI, count)


# ------------------------------------------------------------------------------------------------
# gpu_specs
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("product", "tflops"),
    [
        ("NVIDIA-A100-SXM4-80GB", 312),
        ("NVIDIA-A100-PCIE-40GB", 312),
        ("NVIDIA-A100-80GB-PCIe", 312),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", 312),
        ("NVIDIA-A100-SXM4-80GB-SHARED", 312),
        ("NVIDIA-A800-SXM4-80GB", 312),
        ("NVIDIA-H100-80GB-HBM3", 989),
        ("NVIDIA-H100-PCIe", 835),
        ("NVIDIA-H100-NVL", 989),
        ("NVIDIA-H200", 989),
        ("NVIDIA-H800", 989),
        ("NVIDIA-H800-PCIe", 835),
        ("NVIDIA-L40S", 365),
        ("NVIDIA-L40", 181),
        ("NVIDIA-L4", 121),
        ("Tesla-T4", 65),
        ("Tesla-V100-SXM2-16GB", 125),
        ("Tesla-V100S-PCIE-32GB", 130),
        ("NVIDIA-A10", 125),
        ("NVIDIA-A10G", 125),
        ("NVIDIA-A30", 165),
        ("NVIDIA-GeForce-RTX-4090", 165.16),
        ("NVIDIA-GeForce-RTX-5090", 419.2),
        ("NVIDIA GeForce RTX 5090 D", 380),
    ],
)
def test_known_products(product: str, tflops: float) -> None:
    assert card_tflops(product) == tflops


@pytest.mark.parametrize(
    "product",
    ["NVIDIA-H100-Foo", "NVIDIA-GeForce-RTX-4090-D", "NVIDIA-H200-NVL", "Quantum-X1", "NVIDIA-A1000", ""],
)
def test_unknown_products_are_none_not_a_guess(product: str) -> None:
    assert card_tflops(product) is None


def test_normalisation() -> None:
    assert normalise_product("NVIDIA A100-SXM4-80GB") == "A100-SXM4-80GB"
    assert normalise_product("Tesla-T4-SHARED") == "T4"
    assert normalise_product("NVIDIA-GeForce-RTX-4090") == "RTX-4090"


# ------------------------------------------------------------------------------------------------
# The object
# ------------------------------------------------------------------------------------------------

FULL_SPEC: dict[str, Any] = {
    "total": {
        "requests": {"tflops": "1000", "vram": "100Gi"},
        "limits": {"tflops": "2000", "vram": "200Gi"},
        "maxWorkers": 50,
        "alertThresholdPercent": 90,
    },
    "single": {
        "maxRequests": {"tflops": "100", "vram": "16Gi"},
        "maxLimits": {"tflops": "200", "vram": "32Gi"},
        "maxGPUCount": 8,
        "defaultRequests": {"tflops": "10", "vram": "1Gi"},
        "defaultLimits": {"tflops": "20", "vram": "2Gi"},
    },
    "futureField": {"ignored": True},
}
FULL = QUOTA.copy().spec(**FULL_SPEC)


def test_from_dict_parses_every_field() -> None:
    q = validate_gpu_resource_quota(FULL.obj())
    assert q.total_requests.tflops == 1_000_000 and q.total_requests.vram == 100 * GI
    assert q.total_limits.tflops == 2_000_000 and q.max_workers == 50
    assert q.alert_threshold_percent == 90 and q.max_gpu_count == 8
    assert q.max_requests.vram == 16 * GI and q.default_limits.tflops == 20_000
    assert q.ref == "GPUResourceQuota/team-a/team-a-quota"


def test_defaults() -> None:
    q = GPUResourceQuota.from_dict(QUOTA.obj())
    assert q.alert_threshold_percent == 95
    assert q.max_workers is None and q.total_requests.tflops is None


@pytest.mark.parametrize(
    ("spec", "field", "fragment"),
    [
        ({"total": {"requests": {"tflops": "-1"}}}, "spec.total.requests.tflops", "non-negative"),
        ({"total": {"alertThresholdPercent": 101}}, "spec.total.alertThresholdPercent", "0 to 100"),
        ({"total": {"maxWorkers": -1}}, "spec.total.maxWorkers", "non-negative"),
        (
            {"total": {"requests": {"vram": "10Gi"}, "limits": {"vram": "5Gi"}}},
            "spec.total.limits.vram",
            "at least spec.total.requests.vram = 10Gi",
        ),
        (
            {"single": {"maxRequests": {"tflops": "10"}, "maxLimits": {"tflops": "5"}}},
            "spec.single.maxLimits.tflops",
            "at least",
        ),
        (
            {"single": {"maxRequests": {"tflops": "10"}, "defaultRequests": {"tflops": "20"}}},
            "spec.single.defaultRequests.tflops",
            "at most",
        ),
        ({"total": {"requests": {"tflops": "many"}}}, "spec.total.requests.tflops", "quantity"),
        ({"total": {"maxWorkers": "50"}}, "spec.total.maxWorkers", "integer"),
    ],
)
def test_validation_names_object_field_value(spec: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(InvalidValue) as err:
        validate_gpu_resource_quota(QUOTA.copy().spec(**spec).obj())
    assert err.value.where == "GPUResourceQuota/team-a/team-a-quota"
    assert err.value.field == field
    assert fragment in str(err.value)


def test_default_annotations_for_the_mutating_webhook() -> None:
    q = GPUResourceQuota.from_dict(FULL.obj())
    assert q.default_annotations({ann.TF_TFLOPS_REQUEST: "5"}) == {
        ann.TF_VRAM_REQUEST: "1Gi",
        ann.TF_TFLOPS_LIMIT: "20",
        ann.TF_VRAM_LIMIT: "2Gi",
    }


# ------------------------------------------------------------------------------------------------
# A pod's request (Semantics 5)
# ------------------------------------------------------------------------------------------------


def test_request_from_annotations_limits_default_to_requests() -> None:
    p = POD.copy().annotations(
        {ann.TF_TFLOPS_REQUEST: "20", ann.TF_VRAM_REQUEST: "4Gi", ann.TF_GPU_COUNT: "2"}
    )
    assert request_from_annotations(p.info()) == GPURequest(20_000, 4 * GI, 20_000, 4 * GI, 2)
    assert request_from_annotations(POD.info()) is None


def test_request_from_annotations_uses_quota_defaults() -> None:
    q = GPUResourceQuota.from_dict(FULL.obj())
    p = POD.copy().annotation(ann.TF_TFLOPS_REQUEST, "5").info()
    assert request_from_annotations(p, q) == GPURequest(5_000, 1 * GI, 20_000, 2 * GI, 1)


@pytest.mark.parametrize(
    ("annotations", "key"),
    [
        ({ann.TF_TFLOPS_REQUEST: "fast"}, ann.TF_TFLOPS_REQUEST),
        ({ann.TF_VRAM_REQUEST: "-1Gi"}, ann.TF_VRAM_REQUEST),
        ({ann.TF_GPU_COUNT: "1.5"}, ann.TF_GPU_COUNT),
        ({ann.TF_GPU_COUNT: "0"}, ann.TF_GPU_COUNT),
        ({ann.TF_TFLOPS_REQUEST: "10", ann.TF_TFLOPS_LIMIT: "5"}, ann.TF_TFLOPS_LIMIT),
    ],
)
def test_bad_annotations_name_pod_and_annotation(annotations: dict[str, str], key: str) -> None:
    with pytest.raises(InvalidAnnotation) as err:
        request_from_annotations(POD.copy().annotations(annotations).info())
    assert err.value.where == "Pod/team-a/p" and err.value.field == key


A100 = CardType("NVIDIA-A100", "whole", "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu", 8, memory_mib=81920)


@pytest.mark.parametrize(
    ("card", "labels", "tflops_milli", "vram"),
    [
        (A100, {}, 312_000, 80 * GI),
        (A100, {"nvidia.com/gpu.tflops": "300"}, 300_000, 80 * GI),
        (
            CardType(
                "x", "mig", "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig-1g.5gb", 7, 40960, mig_profile="1g.5gb"
            ),
            {},
            44_572,  # ceil(312000 / 7)
            5 * GI,
        ),
        (
            CardType(
                "x", "mig", "NVIDIA-A100-SXM4-80GB", "nvidia.com/mig-3g.40gb", 2, 81920, mig_profile="3g.40gb"
            ),
            {},
            133_715,  # ceil(312000 * 3 / 7)
            40 * GI,
        ),
        (
            CardType("x", "mig", "NVIDIA-A30", "nvidia.com/mig-2g.12gb", 2, 24576, mig_profile="2g.12gb"),
            {},
            82_500,  # A30 has 4 compute slices
            12 * GI,
        ),
        (
            CardType("x", "mps", "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu", 8, 81920, replicas=8),
            {},
            39_000,
            10 * GI,
        ),
        (CardType("x", "whole", "Mystery-GPU", "nvidia.com/gpu", 1), {}, None, None),
    ],
)
def test_card_share(
    card: CardType, labels: dict[str, str], tflops_milli: int | None, vram: int | None
) -> None:
    share = card_share(card, labels)
    assert (share.tflops, share.vram) == (tflops_milli, vram)


def test_request_derived_from_the_card_times_cards_requested() -> None:
    q = GPUResourceQuota.from_dict(QUOTA.copy().total(requests={"tflops": "1000"}).obj())
    p = POD.copy().req(**{GPU: 2}).info()
    assert pod_gpu_request(p, A100, quota=q) == GPURequest(312_000, 80 * GI, 312_000, 80 * GI, 2)
    assert pod_gpu_request(POD.copy().req(cpu=1).info(), A100, quota=q) is None
    assert pod_gpu_request(p) is None  # no annotations, no card: not a GPU-quota pod


def test_unknown_tflops_is_an_error_naming_the_node_only_when_needed() -> None:
    mystery = CardType("M", "whole", "Mystery-GPU", "nvidia.com/gpu", 1, memory_mib=1024)
    p = POD.copy().req(**{GPU: 1}).info()
    needs = GPUResourceQuota.from_dict(QUOTA.copy().total(requests={"tflops": "10"}).obj())
    with pytest.raises(InvalidValue) as err:
        pod_gpu_request(p, mystery, quota=needs, node_name="gpu-7")
    assert err.value.where == "Node/gpu-7" and err.value.field == "nvidia.com/gpu.tflops"
    vram_only = GPUResourceQuota.from_dict(QUOTA.copy().total(requests={"vram": "10Gi"}).obj())
    assert pod_gpu_request(p, mystery, quota=vram_only) == GPURequest(0, 2**30, 0, 2**30, 1)


# ------------------------------------------------------------------------------------------------
# The store: single vs total, atomicity, clamp, rebuild
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "resource", "unresolvable"),
    [
        (req(101), "single.maxRequests.tflops", True),
        (req(10, vram_gi=17), "single.maxRequests.vram", True),
        (req(10, lim_tflops=201), "single.maxLimits.tflops", True),
        (req(10, count=9), "single.maxGPUCount", True),
        (req(100, count=8), None, False),  # 800 of 1000
        (req(100, count=8, vram_gi=13), "total.requests.vram", False),  # 104Gi of 100Gi
    ],
)
def test_single_vs_total(request_: GPURequest, resource: str | None, unresolvable: bool) -> None:
    store = store_with(**FULL_SPEC)
    refusal = store.check("team-a", request_)
    if resource is None:
        assert refusal is None
        return
    assert refusal is not None and isinstance(refusal.error, QuotaExceeded)
    assert refusal.error.resource == resource and refusal.unresolvable is unresolvable
    single = store.check_single("team-a", request_)
    assert (single is not None) is unresolvable
    assert single is None or (isinstance(single.error, QuotaExceeded) and single.error.resource == resource)


def test_total_error_message_follows_the_spec() -> None:
    store = store_with(**FULL_SPEC)
    store.reserve("team-a", req(100, count=7), "team-a/p1")
    with pytest.raises(QuotaExceeded) as err:
        store.reserve("team-a", req(100, count=4), "team-a/p2")
    assert str(err.value) == (
        "quota exceeded in namespace team-a (GPUResourceQuota/team-a/team-a-quota) "
        "for total.requests.tflops: "
        "requested 400, available 300, used 700, limit 1000"
        " (waits for room: total.requests.tflops used 700 would have to drop to 600)"
    )


def test_workers_total() -> None:
    store = store_with(total={"maxWorkers": 2})
    store.reserve("team-a", req(1), "team-a/a")
    store.reserve("team-a", req(1), "team-a/b")
    with pytest.raises(QuotaExceeded) as err:
        store.reserve("team-a", req(1), "team-a/c")
    assert err.value.resource == "total.maxWorkers"


def test_a_failed_check_changes_nothing() -> None:
    store = store_with(**FULL_SPEC)
    store.reserve("team-a", req(50, vram_gi=10), "team-a/p1")
    store.take_dirty()
    before = store.usage("team-a")
    with pytest.raises(QuotaExceeded):
        store.reserve("team-a", req(100, count=8, vram_gi=16), "team-a/p2")
    assert store.usage("team-a") == before
    assert not store.is_reserved("team-a", "team-a/p2")
    assert store.take_dirty() == set()


def test_reserve_is_idempotent_and_unreserve_releases_what_was_charged() -> None:
    store = store_with(**FULL_SPEC)
    assert store.reserve("team-a", req(10, vram_gi=1, count=2), "team-a/p")
    assert not store.reserve("team-a", req(90), "team-a/p")
    assert store.usage("team-a") == GPURequest(20_000, 2 * GI, 20_000, 2 * GI, 1)
    assert store.unreserve("team-a", "team-a/p")
    assert not store.unreserve("team-a", "team-a/p")
    assert store.usage("team-a") == GPURequest(0, 0, 0, 0, 0)


def test_unreserve_is_clamped_at_zero() -> None:
    """Spec "safeSub": a release never drives usage negative (here after a rebuild lost the pod's share)."""
    store = store_with(**FULL_SPEC)
    store.reserve("team-a", req(10, vram_gi=2), "team-a/q")
    entry = store._entries["team-a"]  # corrupt the counters, the state the spec guards against
    entry.used_req_tflops, entry.used_req_vram, entry.workers = 5_000, GI, 0
    store.unreserve("team-a", "team-a/q")
    assert store.usage("team-a") == GPURequest(0, 0, 0, 0, 0)


def test_namespace_without_quota_is_unlimited_but_tracked() -> None:
    store = GPUQuotaStore()
    assert store.check("free", req(10**6)) is None
    assert store.reserve("free", req(10**6), "free/p")
    assert store.take_dirty() == set()  # nothing to sync without a quota
    free = MakeGPUResourceQuota("free-quota", "free").total(requests={"tflops": "10"})
    store.set_quota(GPUResourceQuota.from_dict(free.obj()))
    assert store.usage("free").tflops_request == 10**9  # a quota created later sees the usage
    assert store.check("free", req(1)) is not None


def test_rebuild_from_active_pods_reports_bad_ones() -> None:
    store = store_with(**FULL_SPEC)
    store.reserve("team-a", req(99), "team-a/ghost")
    ten = POD.copy().annotation(ann.TF_TFLOPS_REQUEST, "10")
    pods = [
        ten.copy().name("a").annotation(ann.TF_GPU_COUNT, "2").info(),
        ten.copy().name("done").phase("Succeeded").info(),
        MakePod("pending", "team-a").phase("Running").annotation(ann.TF_TFLOPS_REQUEST, "10").info(),
        POD.copy().name("bad").annotation(ann.TF_TFLOPS_REQUEST, "oops").info(),
        POD.copy().name("plain").info(),
    ]
    events = store.rebuild(pods)
    usage = store.usage("team-a")
    assert usage.tflops_request == 20_000 and usage.gpu_count == 1  # one worker
    assert usage.vram_request == 2 * GI  # defaultRequests.vram 1Gi x 2 GPUs
    assert [e.obj for e in events] == ["Pod/team-a/bad"] and events[0].type == "Warning"
    assert store.take_dirty() == {"team-a"}


def test_fits_array_matches_check() -> None:
    store = store_with(**FULL_SPEC)
    store.reserve("team-a", req(100, count=5), "team-a/p")
    t = np.array([100_000, 100_000, 101_000, 50_000])
    v = np.array([GI, GI, GI, 20 * GI])
    n = np.array([5, 6, 1, 1])
    got = store.fits_array(
        "team-a", tflops_request=t, vram_request=v, tflops_limit=t, vram_limit=v, gpu_count=n
    )
    want = [
        store.check("team-a", GPURequest(int(a), int(b), int(a), int(b), int(c))) is None
        for a, b, c in zip(t, v, n, strict=True)
    ]
    assert got.tolist() == want == [True, False, False, False]
    free = store.fits_array(
        "other", tflops_request=t, vram_request=v, tflops_limit=t, vram_limit=v, gpu_count=n
    )
    assert free.all()


# ------------------------------------------------------------------------------------------------
# Status
# ------------------------------------------------------------------------------------------------


def test_status_reporting_structure_example() -> None:
    """Spec "Status Reporting Structure": 750 of 1000 tflops, 75Gi of 100Gi, 38 of 50 workers."""
    store = store_with(
        total={"requests": {"tflops": "1000", "vram": "100Gi"}, "maxWorkers": 50, "alertThresholdPercent": 90}
    )
    big = POD.copy().name("big").annotations({ann.TF_TFLOPS_REQUEST: "750", ann.TF_VRAM_REQUEST: "75Gi"})
    pods = [big.info()]
    pods += [POD.copy().name(f"w{i}").annotation(ann.TF_TFLOPS_REQUEST, "0").info() for i in range(37)]
    store.rebuild(pods)
    result = store.status("team-a", NOW)
    status = result.status
    assert status["used"] == {
        "requests": {"tflops": "750", "vram": "75Gi"},
        "limits": {"tflops": "750", "vram": "75Gi"},
        "workers": 38,
    }
    assert status["availablePercent"] == {
        "requests.tflops": "25.00",
        "requests.vram": "25.00",
        "workers": "24.00",
    }
    assert status["lastUpdateTime"] == "2024-01-15T10:30:00Z"
    assert result.ratios == {"requests.tflops": 0.75, "requests.vram": 0.75, "workers": 0.76}
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "True" and conditions["Ready"]["reason"] == "QuotaActive"
    assert conditions["AlertThresholdReached"]["status"] == "False"
    assert result.event is None


@pytest.mark.parametrize(
    ("used", "limit", "text"),
    [
        (0, 3, "100.00"),
        (1, 3, "66.67"),
        (2, 3, "33.33"),
        (3, 3, "0.00"),
        (5, 3, "0.00"),
        (1, 8, "87.50"),
        (0, 0, "100.00"),  # tensor-fusion's zero-division guard: nothing of a 0 limit is used
        (2, 0, "0.00"),  # gpuq: an explicit 0 is a real limit, so usage under it leaves nothing
    ],
)
def test_available_percent_strings(used: int, limit: int, text: str) -> None:
    store = store_with(total={"maxWorkers": limit})
    store.rebuild(
        [POD.copy().name(f"w{i}").annotation(ann.TF_TFLOPS_REQUEST, "1").info() for i in range(used)]
    )
    assert store.status("team-a", NOW).status["availablePercent"]["workers"] == text


def test_quota_calculator_edge_cases_zero_division() -> None:
    """tensor-fusion ``internal/quota/quota_store_test.go`` "QuotaCalculator Edge Cases should handle
    zero division safely": a quota whose totals are all 0, with zero usage, reports every resource
    100% available (the calculator's guard, ``calculator.go`` calculateResourcePercent)."""
    store = store_with(total={"requests": {"tflops": "0", "vram": "0"}, "maxWorkers": 0})
    store.rebuild([])
    available = store.status("team-a", NOW).status["availablePercent"]
    assert available == {"requests.tflops": "100.00", "requests.vram": "100.00", "workers": "100.00"}


@pytest.mark.parametrize(
    ("workers", "max_workers", "threshold", "alerting"),
    [
        (9, 10, 90, False),  # exactly at the threshold: not above it
        (10, 10, 90, True),
        (4, 5, 80, False),
        (5, 5, 80, True),
        (0, 0, 0, False),  # nothing used of a zero limit
        (1, 0, 100, True),  # any use of a zero limit exceeds every threshold
        (0, 4, 0, False),  # threshold 0: usage 0 does not exceed it
        (1, 4, 0, True),
    ],
)
def test_alert_only_when_usage_exceeds_the_threshold(
    workers: int, max_workers: int, threshold: int, alerting: bool
) -> None:
    """Semantics 11: tensor-fusion alerts when usage *exceeds* alertThresholdPercent (strictly)."""
    store = store_with(total={"maxWorkers": max_workers, "alertThresholdPercent": threshold})
    store.rebuild(
        [POD.copy().name(f"w{i}").annotation(ann.TF_TFLOPS_REQUEST, "1").info() for i in range(workers)]
    )
    result = store.status("team-a", NOW)
    alert = {c["type"]: c for c in result.status["conditions"]}["AlertThresholdReached"]
    assert alert["status"] == ("True" if alerting else "False")
    assert (result.event is not None) is alerting
    if alerting:
        assert alert["message"] == f"Usage of workers exceeded the {threshold}% alert threshold"
    else:
        assert alert["message"] == f"Usage is at or below the {threshold}% alert threshold"


def test_alert_condition_and_event_only_on_upward_crossing() -> None:
    store = store_with(total={"requests": {"tflops": "100"}, "alertThresholdPercent": 90})
    store.reserve("team-a", req(80), "team-a/a")
    first = store.status("team-a", NOW)
    assert first.event is None
    store.reserve("team-a", req(10), "team-a/b")  # 90%: at the threshold, not above it
    assert store.status("team-a", NOW).event is None
    store.reserve("team-a", req(1), "team-a/b2")  # 91%: exceeds it
    later = datetime(2024, 1, 15, 11, 0, tzinfo=UTC)
    crossed = store.status("team-a", later)
    assert crossed.event is not None and crossed.event.reason == "QuotaAlertThreshold"
    assert crossed.event.obj == "GPUResourceQuota/team-a/team-a-quota"
    alert = {c["type"]: c for c in crossed.status["conditions"]}["AlertThresholdReached"]
    assert alert["status"] == "True" and alert["reason"] == "ThresholdReached"
    assert alert["lastTransitionTime"] == "2024-01-15T11:00:00Z"
    again = store.status("team-a", datetime(2024, 1, 15, 12, 0, tzinfo=UTC))
    assert again.event is None  # still above: no repeated event, transition time kept
    assert {c["type"]: c for c in again.status["conditions"]}["AlertThresholdReached"][
        "lastTransitionTime"
    ] == "2024-01-15T11:00:00Z"
    store.unreserve("team-a", "team-a/b")
    assert store.status("team-a", NOW).event is None
    store.reserve("team-a", req(10), "team-a/c")
    assert store.status("team-a", NOW).event is not None  # crossed upward again


def test_no_repeated_alert_after_restart_when_the_object_says_it_already_fired() -> None:
    obj = QUOTA.copy().total(requests={"tflops": "10"}).obj()
    obj["status"] = {"conditions": [{"type": "AlertThresholdReached", "status": "True"}]}
    store = GPUQuotaStore()
    store.set_quota(GPUResourceQuota.from_dict(obj))
    store.reserve("team-a", req(10), "team-a/a")
    assert store.status("team-a", NOW).event is None


def test_ready_false_when_usage_is_above_a_lowered_quota() -> None:
    store = store_with(total={"requests": {"tflops": "100"}})
    store.reserve("team-a", req(80), "team-a/a")
    store.set_quota(GPUResourceQuota.from_dict(QUOTA.copy().total(requests={"tflops": "50"}).obj()))
    ready = {c["type"]: c for c in store.status("team-a", NOW).status["conditions"]}["Ready"]
    assert ready["status"] == "False" and "requests.tflops" in ready["message"]


# ------------------------------------------------------------------------------------------------
# Properties
# ------------------------------------------------------------------------------------------------

_requests = st.builds(
    GPURequest,
    st.integers(0, 300_000),
    st.integers(0, 80 * GI),
    st.integers(0, 300_000),
    st.integers(0, 80 * GI),
    st.integers(1, 8),
)


@given(st.lists(_requests, max_size=20), _requests)
def test_property_reserve_then_unreserve_restores_state(history: list[GPURequest], extra: GPURequest) -> None:
    store = GPUQuotaStore()
    for i, r in enumerate(history):
        store.reserve("ns", r, f"ns/h{i}")
    before = store.usage("ns")
    store.reserve("ns", extra, "ns/extra")
    store.unreserve("ns", "ns/extra")
    assert store.usage("ns") == before


@given(st.lists(_requests, max_size=40))
def test_property_no_sequence_exceeds_a_total(requests: list[GPURequest]) -> None:
    store = store_with(
        total={
            "requests": {"tflops": "1000", "vram": "200Gi"},
            "limits": {"tflops": "1500", "vram": "300Gi"},
            "maxWorkers": 10,
        }
    )
    for i, r in enumerate(requests):
        with contextlib.suppress(QuotaExceeded):
            store.reserve("team-a", r, f"team-a/p{i}")
        if i % 3 == 2:
            store.unreserve("team-a", f"team-a/p{i - 1}")
        u = store.usage("team-a")
        assert u.tflops_request <= 1_000_000 and u.vram_request <= 200 * GI
        assert u.tflops_limit <= 1_500_000 and u.vram_limit <= 300 * GI
        assert u.gpu_count <= 10


@pytest.mark.parametrize("conditions", [5, "Ready", [1, None], {"type": "AlertThresholdReached"}])
def test_malformed_status_conditions_mean_no_active_alert(conditions: object) -> None:
    """status is gpuq's own output read back; `conditions: 5` used to raise TypeError."""
    quota = GPUResourceQuota.from_dict({"metadata": {"name": "q"}, "status": {"conditions": conditions}})
    assert quota.alert_active is False


@pytest.mark.parametrize("count", ["1e25", "2147483648", "0", "1.5"])
def test_gpu_count_out_of_range_is_an_invalid_annotation(count: str) -> None:
    """1e25 GPUs used to pass and overflow fits_array's int64 arrays."""
    pod = MakePod("p", "ns").annotation(ann.TF_GPU_COUNT, count).info()
    with pytest.raises(InvalidAnnotation) as info:
        request_from_annotations(pod)
    assert ann.TF_GPU_COUNT in str(info.value) and "2147483647" in str(info.value)


@settings(max_examples=200, deadline=None)
@given(OBJECTS)
def test_fuzz_from_dict_raises_only_gpuq_errors(obj: dict[str, object]) -> None:
    only_gpuq_errors(validate_gpu_resource_quota, obj)
    only_gpuq_errors(validate_gpu_resource_quota, {"metadata": {"name": "q"}, "spec": obj})


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(ann.TENSOR_FUSION_ANNOTATIONS), ANNOTATION_VALUES))
def test_fuzz_tensor_fusion_annotations(annotations: dict[str, str]) -> None:
    pod = MakePod("p", "ns").annotations(annotations).info()
    only_gpuq_errors(request_from_annotations, pod)


def test_a_claims_devices_carry_no_worker_and_its_pods_one_each() -> None:
    """docs/design.md "Quota over devices": a DRA claim's devices are charged with ``workers=0`` (its
    TFLOPS and VRAM once), each of its pods as one worker (:meth:`GPURequest.worker_only`); the worker
    limit refuses the pod, never the devices, and refunds give back exactly what was charged."""
    store = store_with(total={"maxWorkers": 1, "requests": {"tflops": "1000"}})
    devices = GPURequest(989_000, 80 * GI, 989_000, 80 * GI, 1, workers=0)
    assert store.reserve("team-a", devices, "claim:team-a/c")
    store.charge("team-a", GPURequest(0, 0, 0, 0, 1, workers=0), "claim:team-a/d")
    assert store.usage("team-a").gpu_count == 0  # no worker yet
    assert store.reserve("team-a", GPURequest.worker_only(), "team-a/p0")
    with pytest.raises(QuotaExceeded) as refused:
        store.reserve("team-a", GPURequest.worker_only(), "team-a/p1")
    assert refused.value.resource == "total.maxWorkers"
    used = store.usage("team-a")
    assert (used.tflops_request, used.vram_request, used.gpu_count) == (989_000, 80 * GI, 1)
    assert store.unreserve("team-a", "claim:team-a/c")
    assert store.usage("team-a").gpu_count == 1  # the pod's worker stays while the pod does
    assert store.unreserve("team-a", "team-a/p0")
    assert store.usage("team-a") == GPURequest(0, 0, 0, 0, 0)
