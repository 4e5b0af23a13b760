"""One ElasticQuota and one GPUResourceQuota per namespace (the webhook refuses a second at CREATE)."""

from __future__ import annotations

import pytest

from gpuq_k8s.common.model import kinds
from gpuq_k8s.webhook.admission import validate
from gpuq_k8s.webhook.view import StaticView
from tests.testing.builders import MakeElasticQuota, MakeGPUResourceQuota

BUILDERS = {
    "ElasticQuota": lambda name: MakeElasticQuota(name, "ml").max(cpu="4").obj(),
    "GPUResourceQuota": lambda name: MakeGPUResourceQuota(name, "ml").total(maxWorkers=4).obj(),
}


@pytest.mark.parametrize("kind", ["ElasticQuota", "GPUResourceQuota"])
def test_a_second_quota_in_a_namespace_is_refused_at_create(kind: str) -> None:
    first, second = BUILDERS[kind]("first"), BUILDERS[kind]("second")
    key = kinds.lookup(kinds.group_of(str(first["apiVersion"])), kind)
    assert key in (kinds.ELASTIC_QUOTA, kinds.GPU_RESOURCE_QUOTA)
    view = StaticView([first])

    refused = validate(key, "CREATE", second, view)

    assert not refused.allowed
    assert refused.message == (
        f"{kind}/ml/second: metadata.name: namespace ml already has {kind} 'first': "
        f"expected at most one {kind} per namespace"
    )
    # The existing one may be updated, and another namespace may have its own.
    assert validate(key, "UPDATE", first, view).allowed
    assert validate(key, "UPDATE", second, view).allowed
    elsewhere = {**second, "metadata": {**second["metadata"], "namespace": "other"}}
    assert validate(key, "CREATE", elsewhere, view).allowed
    assert validate(key, "CREATE", first, view).allowed  # re-creating the same name is not a second one
