"""The webhook over ResourceClaims and ResourceClaimTemplates (docs/design.md "Quota over devices"):
selectors compile in the scheduler's CEL environment, and a request that can never fit the quotas is
refused at create with the object, the field, the value and the quota; what the scheduler may still
place is admitted (a class or devices not published yet: a warning). The devices are those of the
NVIDIA-style fixture (two whole H100s, two whole A100s, MIG partitions, a shared H100)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.webhook.admission import validate
from gpuq_k8s.webhook.options import AdmissionOptions, admission_options
from gpuq_k8s.webhook.view import StaticView
from tests.testing import dra
from tests.testing.builders import MakeElasticQuota, MakeGPUResourceQuota, MakeQueue
from tests.testing.config import config_text
from tests.testing.dra_cluster import documents

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
H100_SELECTOR = 'device.attributes["gpu.nvidia.com"].productName.contains("H100")'
A100_SELECTOR = 'device.attributes["gpu.nvidia.com"].productName.contains("A100")'


def devices() -> list[dict[str, Any]]:
    return [d for d in documents() if d["kind"] in ("DeviceClass", "ResourceSlice")]


def queue(name: str, quota: dict[str, int]) -> dict[str, Any]:
    return MakeQueue(name).card_quota(json.dumps(quota)).obj()


def h100s(count: int, name: str = "c", selector: str = H100_SELECTOR) -> dict[str, Any]:
    return dra.claim(name, "ml", dra.exactly("gpu", "gpu.nvidia.com", count, selector=selector))


def template(claim: dict[str, Any]) -> dict[str, Any]:
    body = dra.claim_template(claim["metadata"]["name"], "ml")
    body["spec"]["spec"] = copy.deepcopy(claim["spec"])
    return body


def check(obj: dict[str, Any], *objects: dict[str, Any], options: AdmissionOptions | None = None) -> Any:
    kind = kinds.lookup("resource.k8s.io", obj["kind"])
    return validate(kind, "CREATE", obj, StaticView(objects), options=options or AdmissionOptions())


QUOTAS = (queue("small", {H100: 4}), queue("big", {H100: 8, A100: 2}))


def test_a_request_larger_than_every_card_quota_is_refused_naming_object_field_value_and_quota() -> None:
    refused = check(h100s(16), *devices(), *QUOTAS)
    assert not refused.allowed
    assert refused.message == (
        "ResourceClaim/ml/c: spec.devices.requests[0].exactly.count: invalid value 16: expected at most the "
        f"largest card quota of any Queue for the card types its devices are ({H100}: 8 (Queue/big))"
    )
    assert check(h100s(8), *devices(), *QUOTAS).allowed


def test_a_template_is_judged_as_its_claims_will_be() -> None:
    refused = check(template(h100s(16, "t")), *devices(), *QUOTAS)
    assert not refused.allowed
    assert refused.message.startswith(
        "ResourceClaimTemplate/ml/t: spec.spec.devices.requests[0].exactly.count"
    )


@pytest.mark.parametrize(
    ("claim", "allowed"),
    [
        pytest.param(
            dra.claim(
                "f",
                "ml",
                dra.first_available(
                    "gpu",
                    {
                        "name": "h100",
                        "deviceClassName": "gpu.nvidia.com",
                        "count": 16,
                        "selectors": [{"cel": {"expression": H100_SELECTOR}}],
                    },
                    {
                        "name": "a100",
                        "deviceClassName": "gpu.nvidia.com",
                        "count": 2,
                        "selectors": [{"cel": {"expression": A100_SELECTOR}}],
                    },
                ),
            ),
            True,
            id="firstAvailable: the A100 subrequest can fit",
        ),
        pytest.param(
            dra.claim(
                "f",
                "ml",
                dra.first_available(
                    "gpu",
                    {
                        "name": "h100",
                        "deviceClassName": "gpu.nvidia.com",
                        "count": 16,
                        "selectors": [{"cel": {"expression": H100_SELECTOR}}],
                    },
                    {
                        "name": "a100",
                        "deviceClassName": "gpu.nvidia.com",
                        "count": 3,
                        "selectors": [{"cel": {"expression": A100_SELECTOR}}],
                    },
                ),
            ),
            False,
            id="firstAvailable: no subrequest can ever fit",
        ),
        pytest.param(
            h100s(16, selector=""), False, id="any whole GPU: neither the H100 nor the A100 quota holds 16"
        ),
        pytest.param(
            dra.claim(
                "a", "ml", dra.exactly("gpu", "gpu.nvidia.com", 16, selector=H100_SELECTOR, adminAccess=True)
            ),
            True,
            id="adminAccess is never charged",
        ),
    ],
)
def test_first_available_and_undetermined_card_types(claim: dict[str, Any], allowed: bool) -> None:
    assert check(claim, *devices(), *QUOTAS).allowed is allowed


def test_a_card_type_no_queue_names_leaves_the_verdict_to_the_scheduler() -> None:
    """A pod of no Queue is not subject to queue quotas (Semantics 7): with the A100 in no card quota,
    a request that may take an A100 is admitted whatever its count."""
    assert check(h100s(16, selector=""), *devices(), queue("small", {H100: 4})).allowed


def test_a_selector_that_does_not_compile_is_refused_naming_the_field() -> None:
    refused = check(h100s(1, selector="device.attributes["), *devices(), *QUOTAS)
    assert not refused.allowed
    assert "ResourceClaim/ml/c" in refused.message
    assert "spec.devices.requests[0].exactly.selectors[0].cel.expression" in refused.message


def test_what_may_still_come_is_admitted_with_a_warning() -> None:
    missing = dra.claim("c", "ml", dra.exactly("gpu", "no-such-class", 1))
    answer = check(missing, *devices(), *QUOTAS)
    assert answer.allowed and "DeviceClass 'no-such-class' does not exist" in answer.warnings[0]
    nothing = h100s(1, selector='device.attributes["gpu.nvidia.com"].productName == "NVIDIA B200"')
    answer = check(nothing, *devices(), *QUOTAS)
    assert answer.allowed and "no published device matches" in answer.warnings[0]
    assert check(h100s(16), *QUOTAS).allowed  # no device published: card types cannot be told


def test_gpu_resource_quota_single_max_gpu_count() -> None:
    quota = MakeGPUResourceQuota("gq", "ml").single(maxGPUCount=2).obj()
    refused = check(h100s(4), *devices(), quota)
    assert not refused.allowed
    assert (
        "spec.devices.requests[0].exactly.count: invalid value 4: expected at most 2 devices"
        in refused.message
    )
    assert "GPUResourceQuota/ml/gq" in refused.message
    assert check(h100s(2), *devices(), quota).allowed


def test_the_rules_follow_the_configuration() -> None:
    """Semantics 10: card quotas only with capacity-card, everything only with DynamicResources."""
    assert check(h100s(16), *devices(), *QUOTAS, options=AdmissionOptions(capacity_card=False)).allowed
    broken = h100s(1, selector="device.attributes[")
    assert check(broken, options=AdmissionOptions(dynamic_resources=False)).allowed


def test_the_configured_device_naming_is_the_schedulers() -> None:
    """capacity-card's ``deviceNaming`` reaches the webhook (webhook/options.py): a driver whose product
    attribute is ``model`` has card types the card quotas name."""
    config = SchedulerConfig.from_yaml(
        config_text(
            "predicates, capacity-card",
            arguments={"capacity-card": {"deviceNaming": {"accel.example.com": {"productName": "model"}}}},
        )
    )
    options = admission_options(config)
    assert [driver for driver, _ in options.device_naming] == ["accel.example.com"]
    accel = dra.resource_slice("n1", "n1", [dra.device("a-0", {"model": "X1"})], "accel.example.com")
    klass = dra.device_class("accel", "accel.example.com")
    claim = dra.claim("c", "ml", dra.exactly("gpu", "accel", 2))
    assert not check(claim, accel, klass, queue("q", {"X1": 1}), options=options).allowed
    assert check(claim, accel, klass, queue("q", {"X1": 1})).allowed  # unnamed: no card type


def test_elastic_quota_max_over_mapped_devices() -> None:
    """capacity-scheduling with ``deviceClassMappings``: a claim whose devices, as the mapped resource,
    exceed the namespace ElasticQuota's max is refused (each pod using it would be charged that)."""
    mapping = {"deviceClassMappings": [{"name": "nvidia.com/gpu", "deviceClassNames": ["gpu.nvidia.com"]}]}
    config = SchedulerConfig.from_yaml(
        config_text("predicates, capacity-scheduling", arguments={"capacity-scheduling": mapping})
    )
    options = admission_options(config)
    assert options.device_class_map == (("gpu.nvidia.com", "nvidia.com/gpu"),)
    quota = MakeElasticQuota("eq", "ml").max({"nvidia.com/gpu": 2, "cpu": "10"}).obj()
    refused = check(h100s(4), *devices(), quota, options=options)
    assert not refused.allowed
    assert refused.message == (
        "ResourceClaim/ml/c: spec.devices.requests: 4 nvidia.com/gpu (deviceClassMappings) exceed the max "
        "of ElasticQuota/ml/eq: 2"
    )
    assert check(h100s(2), *devices(), quota, options=options).allowed
    assert check(h100s(4), *devices(), quota).allowed  # no mapping: claims are not ElasticQuota's
