"""design.md Semantics 12: GPUResourceQuota in the gpu-resource-quota design's layout as well as
tensor-fusion's, one model for both; ``single.min`` refused like the maxima, at admission and in the
scheduler; a limit set in both layouts with different values is an error naming both fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.gpu_quota.quota import GPUResourceQuota, TflopsVram, validate_gpu_resource_quota
from gpuq_k8s.common.model.gpu_quota.request import GPURequest
from gpuq_k8s.common.model.gpu_quota.store import GPUQuotaStore
from gpuq_k8s.common.model.quota_exceeded import BelowMinimum, QuotaExceeded
from gpuq_k8s.webhook.admission import review
from gpuq_k8s.webhook.view import StaticView
from tests.testing.builders import MakeGPUResourceQuota, MakeNode, MakePod
from tests.testing.simulate_text import pods_by_name, simulate

GI = 2**30
TF = "tensor-fusion.ai/"

# gpu-resource-quota.md "GPUResourceQuota Specification", as an apiserver stores it (maxWorkers defaulted).
DESIGN = (
    MakeGPUResourceQuota("team-a-quota", "team-a")
    .total(**{"requests.tflops": "1000", "requests.vram": "100Gi"}, workers=50, alertThresholdPercent=90)
    .total(maxWorkers=32768)
    .single(max={"tflops": "100", "vram": "16Gi", "workers": 8}, min={"tflops": "1", "vram": "1Gi"})
)
TWIN = (
    MakeGPUResourceQuota("team-a-quota", "team-a")
    .total(requests={"tflops": "1000", "vram": "100Gi"}, maxWorkers=50, alertThresholdPercent=90)
    .single(maxRequests={"tflops": "100", "vram": "16Gi"}, maxGPUCount=8)
)


def quota_of(builder: MakeGPUResourceQuota) -> GPUResourceQuota:
    return GPUResourceQuota.from_dict(builder.copy().obj())


def store_of(builder: MakeGPUResourceQuota) -> GPUQuotaStore:
    store = GPUQuotaStore()
    store.set_quota(validate_gpu_resource_quota(builder.copy().obj()))
    return store


def per_gpu(tflops: float, vram_gi: float, count: int = 1) -> GPURequest:
    t, v = int(tflops * 1000), int(vram_gi * GI)
    return GPURequest(t, v, t, v, count)


def test_both_layouts_parse_into_the_same_limits() -> None:
    design, twin = quota_of(DESIGN), quota_of(TWIN)
    assert design.model_dump(exclude={"min_requests", "design_fields"}) == twin.model_dump(
        exclude={"min_requests", "design_fields"}
    )
    assert design.min_requests == TflopsVram(1000, GI)
    assert twin.min_requests == TflopsVram()
    assert design.max_workers == 50  # the design's workers, not the CRD's 32768 default
    assert design.uses_tflops and design.uses_vram


def test_the_same_limit_in_both_layouts_with_the_same_value_is_one_limit() -> None:
    both = (
        DESIGN.copy()
        .total(requests={"tflops": "1k", "vram": "100Gi"}, maxWorkers=50)
        .single(maxRequests={"tflops": "100", "vram": "16Gi"}, maxGPUCount=8)
    )
    assert quota_of(both).model_dump(exclude={"design_fields"}) == quota_of(DESIGN).model_dump(
        exclude={"design_fields"}
    )


@pytest.mark.parametrize(
    ("spec", "design_field", "our_field"),
    [
        (
            {"total": {"requests": {"tflops": "999", "vram": "1Gi"}, "requests.tflops": "1000"}},
            'spec.total["requests.tflops"]',
            "spec.total.requests.tflops",
        ),
        (
            {"total": {"requests": {"tflops": "1", "vram": "1Gi"}, "requests.vram": "2Gi"}},
            'spec.total["requests.vram"]',
            "spec.total.requests.vram",
        ),
        ({"total": {"maxWorkers": 10, "workers": 50}}, "spec.total.workers", "spec.total.maxWorkers"),
        (
            {"single": {"maxRequests": {"tflops": "10", "vram": "1Gi"}, "max": {"tflops": "20"}}},
            "spec.single.max.tflops",
            "spec.single.maxRequests.tflops",
        ),
        (
            {"single": {"maxRequests": {"tflops": "10", "vram": "1Gi"}, "max": {"vram": "2Gi"}}},
            "spec.single.max.vram",
            "spec.single.maxRequests.vram",
        ),
        (
            {"single": {"maxGPUCount": 4, "max": {"workers": 8}}},
            "spec.single.max.workers",
            "spec.single.maxGPUCount",
        ),
    ],
)
def test_conflicting_layouts_are_an_error_naming_both_fields(
    spec: dict[str, Any], design_field: str, our_field: str
) -> None:
    with pytest.raises(InvalidValue) as err:
        GPUResourceQuota.from_dict(MakeGPUResourceQuota("q", "ns").spec(**spec).obj())
    message = str(err.value)
    assert message.startswith(f"GPUResourceQuota/ns/q: {design_field}: invalid value")
    assert our_field in message and "both layouts" in message


@pytest.mark.parametrize(
    ("request_", "resource"),
    [
        (per_gpu(101, 1), "single.max.tflops"),
        (per_gpu(10, 17), "single.max.vram"),
        (per_gpu(10, 2, count=9), "single.max.workers"),
    ],
)
def test_refusals_name_the_limit_as_the_quota_spells_it(request_: GPURequest, resource: str) -> None:
    refusal = store_of(DESIGN).check_single("team-a", request_)
    assert refusal is not None and refusal.unresolvable
    assert isinstance(refusal.error, QuotaExceeded) and refusal.error.resource == resource
    twin = store_of(TWIN).check_single("team-a", request_)
    assert twin is not None and isinstance(twin.error, QuotaExceeded)
    assert (
        twin.error.resource
        == {
            "single.max.tflops": "single.maxRequests.tflops",
            "single.max.vram": "single.maxRequests.vram",
            "single.max.workers": "single.maxGPUCount",
        }[resource]
    )


def test_total_workers_is_named_as_the_design_spells_it() -> None:
    store = store_of(MakeGPUResourceQuota("q", "team-a").total(workers=1))
    store.reserve("team-a", per_gpu(1, 1), "team-a/a")
    with pytest.raises(QuotaExceeded) as err:
        store.reserve("team-a", per_gpu(1, 1), "team-a/b")
    assert err.value.resource == "total.workers"
    assert "for total.workers: requested 1, available 0, used 1, limit 1" in str(err.value)


@pytest.mark.parametrize(
    ("request_", "resource"),
    [
        (per_gpu(0.5, 2), "single.min.tflops"),
        (per_gpu(2, 0.5), "single.min.vram"),
        (per_gpu(0, 0), "single.min.tflops"),
    ],
)
def test_single_min_refuses_a_request_below_it(request_: GPURequest, resource: str) -> None:
    store = store_of(DESIGN)
    refusal = store.check("team-a", request_)
    assert refusal is not None and refusal.unresolvable
    assert isinstance(refusal.error, BelowMinimum) and refusal.error.resource == resource
    assert refusal.message.startswith(
        "request below the minimum in namespace team-a (GPUResourceQuota/team-a/team-a-quota) "
        f"for {resource}: requested "
    )
    assert store.check_single("team-a", request_) is not None
    with pytest.raises(BelowMinimum):
        store.reserve("team-a", request_, "team-a/p")
    assert store.usage("team-a").gpu_count == 0  # nothing charged
    fits = store.fits_array(
        "team-a",
        tflops_request=[request_.tflops_request, 1000],
        vram_request=[request_.vram_request, GI],
        tflops_limit=[request_.tflops_limit, 1000],
        vram_limit=[request_.vram_limit, GI],
        gpu_count=1,
    )
    assert fits.tolist() == [False, True]  # exactly at the minimum fits


def test_single_min_is_not_checked_when_only_the_gpu_count_is_known() -> None:
    store = store_of(DESIGN)
    assert store.check_single("team-a", GPURequest.count_only(2)) is None
    count_refusal = store.check_single("team-a", GPURequest.count_only(9))
    assert count_refusal is not None and "single.max.workers" in count_refusal.message
    assert store.reserve("team-a", per_gpu(1, 1), "team-a/at-min")
    assert np.all(
        store.fits_array(
            "team-a", tflops_request=1000, vram_request=GI, tflops_limit=0, vram_limit=0, gpu_count=1
        )
    )


@pytest.mark.parametrize(
    ("single", "field", "expected"),
    [
        (
            {"max": {"tflops": "1"}, "min": {"tflops": "2"}},
            "spec.single.min.tflops",
            "at most spec.single.max.tflops",
        ),
        (
            {"maxRequests": {"tflops": "5", "vram": "1Gi"}, "min": {"vram": "2Gi"}},
            "spec.single.min.vram",
            "at most spec.single.maxRequests.vram",
        ),
        (
            {"defaultRequests": {"tflops": "1", "vram": "1Gi"}, "min": {"tflops": "2"}},
            "spec.single.defaultRequests.tflops",
            "at least spec.single.min.tflops",
        ),
        ({"max": {"workers": -1}}, "spec.single.max.workers", "non-negative"),
        ({"min": {"vram": "-1Gi"}}, "spec.single.min.vram", "non-negative"),
    ],
)
def test_validation_names_the_design_fields(single: dict[str, Any], field: str, expected: str) -> None:
    with pytest.raises(InvalidValue) as err:
        validate_gpu_resource_quota(MakeGPUResourceQuota("q", "ns").single(**single).obj())
    assert err.value.field == field and expected in err.value.expected


GPU_NODE = (
    MakeNode("a100")
    .product("NVIDIA-A100-SXM4-80GB")
    .labels({"nvidia.com/gpu.memory": "81920"})
    .alloc(cpu="64", memory="512Gi", pods="110")
    .gpus("8")
)


# -- admission ------------------------------------------------------------------------------------


def _admitted(pod: MakePod) -> tuple[bool, str]:
    decision = review(pod.obj(), "CREATE", StaticView([GPU_NODE.copy().obj(), DESIGN.copy().obj()]))
    return decision.allowed, decision.message


def test_admission_refuses_a_request_below_single_min() -> None:
    base = MakePod("p", "team-a").image("x").req(cpu="1").gpus(1).scheduler(None)
    allowed, message = _admitted(
        base.copy().annotations({f"{TF}tflops-request": "500m", f"{TF}vram-request": "2Gi"})
    )
    assert not allowed
    assert message == (
        "Pod/team-a/p: request below the minimum in namespace team-a (GPUResourceQuota/team-a/team-a-quota) "
        "for single.min.tflops: requested 500m, minimum 1 (can never fit under the current quota: "
        "single.min.tflops minimum 1 would have to be at most 500m); "
        "asked by tensor-fusion.ai/tflops-request='500m'"
    )
    allowed, message = _admitted(
        base.copy().annotations({f"{TF}tflops-request": "1", f"{TF}vram-request": "1Gi"})
    )
    assert allowed, message
    # a card pod without tensor-fusion annotations: its amounts are known only on a node
    allowed, message = _admitted(base.copy())
    assert allowed, message
    allowed, message = _admitted(base.copy().gpus(9))
    assert not allowed and "for single.max.workers: requested 9" in message


def test_admission_takes_either_layout_and_denies_conflicting_ones() -> None:
    assert review(DESIGN.copy().obj(), "CREATE", StaticView([])).allowed
    conflicting = DESIGN.copy().single(maxGPUCount=4).obj()
    decision = review(conflicting, "CREATE", StaticView([]))
    assert not decision.allowed
    assert decision.message == (
        "GPUResourceQuota/team-a/team-a-quota: spec.single.max.workers: invalid value '8': expected 4, "
        "the value of spec.single.maxGPUCount (a limit set in both layouts must agree)"
    )


# -- scheduler (gpuq simulate) ---------------------------------------------------------------------


def test_the_scheduler_refuses_below_single_min_as_unresolvable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    quota = (
        MakeGPUResourceQuota("q", "ml")
        .total(workers=10)
        .single(max={"workers": 2}, min={"vram": "4Gi"})
        .obj()
    )
    pod = MakePod("x", "ml").image("x").req(cpu="1").gpus(1)
    docs = [
        GPU_NODE.copy().obj(),
        quota,
        pod.copy().name("small").annotations({f"{TF}vram-request": "1Gi"}).obj(),
        pod.copy().name("enough").annotations({f"{TF}vram-request": "4Gi"}).obj(),
        pod.copy().name("card").obj(),  # charged the A100's 80Gi: above the minimum
        pod.copy().name("wide").gpus(3).obj(),
    ]
    out = simulate(tmp_path, capsys, yaml.safe_dump_all(docs))
    pods = pods_by_name(out)
    assert {n: p["phase"] for n, p in pods.items()} == {
        "small": "Pending",
        "enough": "Bound",
        "card": "Bound",
        "wide": "Pending",
    }
    assert (
        "request below the minimum in namespace ml (GPUResourceQuota/ml/q) for single.min.vram: "
        in pods["small"]["reason"]
    )
    assert "requested 1Gi, minimum 4Gi" in pods["small"]["reason"]
    # No usage change lifts a request to a minimum: it can never fit (design.md Semantics 14).
    assert pods["small"]["outlook"] == "never"
    assert "preemption" not in pods["small"]["reason"]
    assert "for single.max.workers: requested 3" in pods["wide"]["reason"]
