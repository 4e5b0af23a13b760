"""webhook.admission: which objects are denied, warned about or mutated, and with which message."""

from __future__ import annotations

import copy
import json
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.model.crd import ObjectShape
from common.model.errors import InvalidValue
from webhook import jsonpatch
from webhook.admission import (
    AdmissionOptions,
    _plain_shape,
    check_shape,
    mutate,
    review,
    validate,
)
from webhook.view import GPU_RESOURCE_QUOTA, POD, POD_GROUP, QUEUE, StaticView

Obj = dict[str, Any]


def node(name: str, product: str, gpus: int = 8) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": "81920"},
        },
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}
        },
    }


def mps_node(name: str) -> Obj:
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-A100",
        "nvidia.com/gpu.memory": "81920",
        "nvidia.com/gpu.replicas": "8",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "64", "nvidia.com/gpu.shared": "32"}},
    }


def queue(
    name: str, quota: str | None = None, state: str | None = None, capability: Obj | None = None
) -> Obj:
    obj: Obj = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name, "annotations": {} if quota is None else {"volcano.sh/card.quota": quota}},
        "spec": {"capability": capability if capability is not None else {"cpu": "100", "memory": "500Gi"}},
    }
    if state:
        obj["status"] = {"state": state}
    return obj


def pod_group(name: str, queue_name: str, request: str | None = None, ns: str = "ns") -> Obj:
    annotations = {} if request is None else {"volcano.sh/card.request": request}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {"queue": queue_name, "minMember": 1},
    }


def pod(
    name: str = "p",
    *,
    annotations: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    scheduler: str | None = "gpuq-scheduler",
    ns: str = "ns",
) -> Obj:
    requests = requests if requests is not None else {"cpu": "1", "nvidia.com/gpu": "1"}
    limits = {k: v for k, v in requests.items() if k.startswith("nvidia.com/")}
    spec: Obj = {
        "containers": [{"name": "c", "image": "x", "resources": {"requests": requests, "limits": limits}}]
    }
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": dict(annotations or {})},
        "spec": spec,
    }


def elastic_quota(
    name: str, ns: str = "ns", *, min_: Obj | None = None, max_: Obj | None = None, used: Obj | None = None
) -> Obj:
    obj: Obj = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"min": min_ or {}, "max": max_ or {}},
    }
    if used:
        obj["status"] = {"used": used}
    return obj


def gpu_quota(name: str = "q", ns: str = "ns", *, total: Obj | None = None, single: Obj | None = None) -> Obj:
    return {
        "apiVersion": "tensor-fusion.ai/v1",
        "kind": "GPUResourceQuota",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"total": total or {}, "single": single or {}},
    }


QUEUE_A = queue("team-a", '{"NVIDIA-A100": 5, "NVIDIA-H100": 3}')
CLUSTER = [node("a1", "NVIDIA-A100"), node("h1", "NVIDIA-H100"), mps_node("m1"), QUEUE_A]
GRQ_SINGLE = gpu_quota(
    single={
        "maxRequests": {"tflops": "100", "vram": "16Gi"},
        "maxLimits": {"tflops": "200", "vram": "32Gi"},
        "maxGPUCount": 4,
        "defaultRequests": {"tflops": "10", "vram": "4Gi"},
        "defaultLimits": {"tflops": "20", "vram": "8Gi"},
    }
)


def view(*extra: Obj) -> StaticView:
    return StaticView([*CLUSTER, *extra])


# (case id, object, cluster extras, expected allowed, substrings of the message)
DENIALS: list[tuple[str, Obj, tuple[Obj, ...], list[str]]] = [
    (
        "queue card.quota not JSON",
        queue("q", "{nope"),
        (),
        ["Queue//q", "volcano.sh/card.quota", "invalid JSON"],
    ),
    ("queue card.quota negative", queue("q", '{"NVIDIA-A100": -1}'), (), ["Queue//q", "NVIDIA-A100", "-1"]),
    (
        "queue card.quota float",
        queue("q", '{"NVIDIA-A100": 1.5}'),
        (),
        ["Queue//q", "1.5", "non-negative integer"],
    ),
    ("queue card.quota array", queue("q", "[1]"), (), ["Queue//q", "JSON object"]),
    ("queue card.quota A|B key", queue("q", '{"A|B": 1}'), (), ["Queue//q", "single card type"]),
    (
        "podgroup card.request not an object",
        pod_group("pg", "team-a", '"x"'),
        (),
        ["PodGroup/ns/pg", "volcano.sh/card.request"],
    ),
    (
        "podgroup queue missing",
        pod_group("pg", "nope", '{"NVIDIA-A100": 1}'),
        (),
        ["PodGroup/ns/pg", "spec.queue", "nope", "existing Queue"],
    ),
    (
        "podgroup queue closed",
        pod_group("pg", "closed", '{"NVIDIA-A100": 1}'),
        (queue("closed", '{"NVIDIA-A100": 5}', state="Closed"),),
        ["PodGroup/ns/pg", "Open", "Closed"],
    ),
    (
        "capacity-card.md Example 1 over quota: 6 > 5",
        pod_group("pg", "team-a", '{"NVIDIA-A100": 6}'),
        (),
        ["PodGroup/ns/pg", "NVIDIA-A100", "requested 6", "available 5", "limit 5"],
    ),
    (
        "capacity-card.md Job Mode: A|H summed, 9 > 5+3",
        pod_group("pg", "team-a", '{"NVIDIA-A100|NVIDIA-H100": 9}'),
        (),
        ["PodGroup/ns/pg", "NVIDIA-A100|NVIDIA-H100", "requested 9", "available 8"],
    ),
    (
        "pod card.name syntax",
        pod(annotations={"volcano.sh/card.name": "A||B"}),
        (),
        ["Pod/ns/p", "volcano.sh/card.name", "alternative 2 is empty"],
    ),
    (
        "pod card.name alternatives on different resources",
        pod(annotations={"volcano.sh/card.name": "NVIDIA-A100|NVIDIA-A100/mps-80g*1/8"}),
        (),
        ["Pod/ns/p", "volcano.sh/card.name", "one Kubernetes resource", "nvidia.com/gpu.shared"],
    ),
    (
        "pod card.name without requesting the card resource",
        pod(annotations={"volcano.sh/card.name": "NVIDIA-A100"}, requests={"cpu": "1"}),
        (),
        ["Pod/ns/p", "volcano.sh/card.name", "nvidia.com/gpu"],
    ),
    (
        "pod queue has no quota for any alternative",
        pod(
            annotations={
                "volcano.sh/card.name": "NVIDIA-A100",
                "scheduling.volcano.sh/queue-name": "cpu-only",
            }
        ),
        (queue("cpu-only", '{"NVIDIA-H100": 1}'),),
        ["Pod/ns/p", "NVIDIA-A100", "requested 1", "available 0"],
    ),
    (
        "pod request over every alternative's quota",
        pod(
            annotations={
                "volcano.sh/card.name": "NVIDIA-A100|NVIDIA-H100",
                "scheduling.volcano.sh/queue-name": "team-a",
            },
            requests={"cpu": "1", "nvidia.com/gpu": "6"},
        ),
        (),
        ["Pod/ns/p", "NVIDIA-A100", "requested 6", "available 5", "NVIDIA-H100", "available 3"],
    ),
    (
        "pod without card.name over the quota of every card type of its resource",
        pod(annotations={"scheduling.volcano.sh/queue-name": "team-a"}, requests={"nvidia.com/gpu": "7"}),
        (),
        ["Pod/ns/p", "requested 7", "NVIDIA-A100", "NVIDIA-H100"],
    ),
    (
        "pod queue from its PodGroup",
        pod(annotations={"scheduling.k8s.io/group-name": "pg"}, requests={"nvidia.com/gpu": "2"}),
        (pod_group("pg", "small"), queue("small", '{"NVIDIA-A100": 1}')),
        ["Pod/ns/p", "Queue//small", "requested 2", "available 1"],
    ),
    (
        "pod in a closed queue",
        pod(annotations={"scheduling.volcano.sh/queue-name": "closed"}),
        (queue("closed", '{"NVIDIA-A100": 5}', state="Closing"),),
        ["Pod/ns/p", "closed"],
    ),
    (
        "gpu-resource-quota.md single maxRequests.tflops",
        pod(
            annotations={"tensor-fusion.ai/tflops-request": "150", "tensor-fusion.ai/tflops-limit": "150"},
            scheduler=None,
        ),
        (GRQ_SINGLE,),
        ["Pod/ns/p", "single.maxRequests.tflops", "requested 150", "limit 100"],
    ),
    (
        "single maxLimits.vram",
        pod(annotations={"tensor-fusion.ai/vram-limit": "64Gi"}, scheduler=None),
        (GRQ_SINGLE,),
        ["Pod/ns/p", "single.maxLimits.vram", "64Gi", "32Gi"],
    ),
    (
        "single maxGPUCount from the annotation",
        pod(annotations={"tensor-fusion.ai/gpu-count": "8"}, scheduler=None),
        (GRQ_SINGLE,),
        ["Pod/ns/p", "single.maxGPUCount", "requested 8", "limit 4"],
    ),
    (
        "single maxGPUCount from the card resource",
        pod(requests={"nvidia.com/gpu": "5"}, scheduler=None),
        (GRQ_SINGLE,),
        ["Pod/ns/p", "single.maxGPUCount", "requested 5", "limit 4"],
    ),
    (
        "tensor-fusion annotation malformed",
        pod(annotations={"tensor-fusion.ai/tflops-request": "lots"}, scheduler=None),
        (),
        ["Pod/ns/p", "tensor-fusion.ai/tflops-request", "lots"],
    ),
    (
        "pod with an unparseable quantity",
        pod(requests={"cpu": "one"}, scheduler=None),
        (),
        ["Pod/ns/p", "cpu", "one"],
    ),
    (
        "elasticquota min > max",
        elastic_quota("eq", min_={"cpu": "4"}, max_={"cpu": "2"}),
        (),
        ["ElasticQuota/ns/eq", "spec.min[cpu]", "4", "spec.max[cpu] = 2"],
    ),
    (
        "elasticquota negative",
        elastic_quota("eq", max_={"memory": "-1Gi"}),
        (),
        ["ElasticQuota/ns/eq", "spec.max[memory]", "non-negative"],
    ),
    (
        "elasticquota second in namespace",
        elastic_quota("eq2", max_={"cpu": "2"}),
        (elastic_quota("eq1", max_={"cpu": "2"}),),
        ["ElasticQuota/ns/eq2", "eq1", "at most one"],
    ),
    (
        "gpuresourcequota negative",
        gpu_quota(total={"requests": {"tflops": "-1"}}),
        (),
        ["GPUResourceQuota/ns/q", "spec.total.requests.tflops", "non-negative"],
    ),
    (
        "gpuresourcequota limits below requests",
        gpu_quota(total={"requests": {"vram": "10Gi"}, "limits": {"vram": "5Gi"}}),
        (),
        ["GPUResourceQuota/ns/q", "spec.total.limits.vram", "at least spec.total.requests.vram"],
    ),
    (
        "gpuresourcequota alert threshold over 100",
        gpu_quota(total={"alertThresholdPercent": 101}),
        (),
        ["GPUResourceQuota/ns/q", "alertThresholdPercent", "101", "0 to 100"],
    ),
    (
        "gpuresourcequota second in namespace",
        gpu_quota("q2"),
        (gpu_quota("q1"),),
        ["GPUResourceQuota/ns/q2", "q1", "at most one"],
    ),
]


@pytest.mark.parametrize(("case", "obj", "extra", "parts"), DENIALS, ids=[d[0] for d in DENIALS])
def test_denied_with_a_message_naming_object_field_and_amounts(
    case: str, obj: Obj, extra: tuple[Obj, ...], parts: list[str]
) -> None:
    decision = review(obj, "CREATE", view(*extra))
    assert not decision.allowed, case
    assert decision.code == 403
    for part in parts:
        assert part in decision.message, (part, decision.message)
    assert "\n" not in decision.message


ALLOWED: list[tuple[str, Obj, tuple[Obj, ...]]] = [
    ("queue with quota", queue("q", '{"NVIDIA-A100": 10, "NVIDIA-A100/mps-80g*1/8": 16}'), ()),
    ("queue without quota", queue("q"), ()),
    ("capacity-card.md Example 1: 4 <= 5", pod_group("pg", "team-a", '{"NVIDIA-A100": 4}'), ()),
    (
        "capacity-card.md Job Mode example: A|H 4 <= 8",
        pod_group("pg", "team-a", '{"NVIDIA-A100|NVIDIA-H100": 4}'),
        (),
    ),
    (
        "capacity-card.md Considerations 4: A|H 6 <= 4+4",
        pod_group("pg", "q44", '{"NVIDIA-A100|NVIDIA-H100": 6}'),
        (queue("q44", '{"NVIDIA-A100": 4, "NVIDIA-H100": 4}'),),
    ),
    ("podgroup without card request", pod_group("pg", "team-a"), ()),
    (
        "pod A|H fits H alone? no, A: 5 >= 4",
        pod(
            annotations={
                "volcano.sh/card.name": "NVIDIA-A100|NVIDIA-H100",
                "scheduling.volcano.sh/queue-name": "team-a",
            },
            requests={"nvidia.com/gpu": "4"},
        ),
        (),
    ),
    (
        "pod in a queue that does not exist (Semantics 7)",
        pod(annotations={"scheduling.volcano.sh/queue-name": "ghost"}, requests={"nvidia.com/gpu": "64"}),
        (),
    ),
    (
        "pod of another scheduler is not subject to queue quotas",
        pod(
            annotations={"scheduling.volcano.sh/queue-name": "team-a"},
            requests={"nvidia.com/gpu": "64"},
            scheduler=None,
        ),
        (),
    ),
    (
        "capacity-card.md Example 3: MPS pod",
        pod(
            annotations={
                "volcano.sh/card.name": "NVIDIA-A100/mps-80g*1/8",
                "scheduling.volcano.sh/queue-name": "mps",
            },
            requests={"nvidia.com/gpu.shared": "1"},
        ),
        (queue("mps", '{"NVIDIA-A100/mps-80g*1/8": 32}'),),
    ),
    ("cpu-only pod of another scheduler", pod(requests={"cpu": "1"}, scheduler="default-scheduler"), ()),
    (
        "pod within single limits",
        pod(annotations={"tensor-fusion.ai/tflops-request": "15"}, scheduler=None),
        (GRQ_SINGLE,),
    ),
    ("elasticquota", elastic_quota("eq", min_={"cpu": "2"}, max_={"cpu": "4", "nvidia.com/gpu": "0"}), ()),
    ("gpuresourcequota", GRQ_SINGLE, ()),
]


@pytest.mark.parametrize(("case", "obj", "extra"), ALLOWED, ids=[a[0] for a in ALLOWED])
def test_allowed(case: str, obj: Obj, extra: tuple[Obj, ...]) -> None:
    decision = review(obj, "CREATE", view(*extra))
    assert decision.allowed, (case, decision.message)


def test_update_of_the_same_quota_is_not_a_second_one() -> None:
    existing = elastic_quota("eq", max_={"cpu": "2"})
    updated = elastic_quota("eq", max_={"cpu": "3"})
    assert review(updated, "UPDATE", view(existing)).allowed
    other = gpu_quota("q1")
    assert review(gpu_quota("q1", total={"maxWorkers": 3}), "UPDATE", view(other)).allowed


def test_podgroup_update_that_keeps_queue_and_request_is_not_rechecked() -> None:
    """A label change on a PodGroup whose queue closed since must not block its controller."""
    closed = queue("closed", '{"NVIDIA-A100": 5}', state="Closed")
    old = pod_group("pg", "closed", '{"NVIDIA-A100": 1}')
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"x": "y"}
    assert validate(POD_GROUP, "UPDATE", new, view(closed), old=old).allowed
    new["spec"]["queue"] = "closed2"
    assert not validate(POD_GROUP, "UPDATE", new, view(closed), old=old).allowed


def test_delete_and_unknown_kinds_are_allowed_untouched() -> None:
    bad = queue("q", "{nope")
    assert validate(QUEUE, "DELETE", bad, view()).allowed
    assert validate(("apps", "Deployment"), "CREATE", {"kind": "Deployment"}, view()).allowed
    assert mutate(("apps", "Deployment"), "CREATE", {"kind": "Deployment"}, view()).patch == ()
    assert validate(POD, "UPDATE", pod(annotations={"volcano.sh/card.name": "A||B"}), view()).allowed


def test_malformed_queue_quota_is_a_warning_when_a_pod_uses_it() -> None:
    """Semantics 3: a queue that predates the webhook; its quota counts as 0."""
    legacy = queue("legacy", "{broken")
    decision = review(pod(annotations={"scheduling.volcano.sh/queue-name": "legacy"}), "CREATE", view(legacy))
    assert not decision.allowed
    assert any("volcano.sh/card.quota" in w for w in decision.warnings)


def test_elastic_quota_over_max_is_a_warning_not_a_denial() -> None:
    eq = elastic_quota("eq", max_={"cpu": "4"}, used={"cpu": "3500m"})
    decision = review(pod(requests={"cpu": "1"}, scheduler=None), "CREATE", view(eq))
    assert decision.allowed
    assert len(decision.warnings) == 1
    assert "ElasticQuota/ns/eq" in decision.warnings[0]
    assert "requested 1" in decision.warnings[0] and "500m left" in decision.warnings[0]


def test_unknown_card_type_is_denied_for_gpuq_pods() -> None:
    decision = review(pod(annotations={"volcano.sh/card.name": "NVIDIA-B200"}), "CREATE", view())
    assert not decision.allowed
    assert "NVIDIA-B200" in decision.message


# --- mutation ------------------------------------------------------------------------------------


DEFAULTS = AdmissionOptions()


def _patched(obj: Obj, v: StaticView, options: AdmissionOptions = DEFAULTS) -> Obj:
    decision = mutate(POD, "CREATE", obj, v, options)
    return jsonpatch.apply(obj, decision.patch)


def test_mutation_fills_tensor_fusion_defaults_and_gpu_count() -> None:
    obj = pod(
        requests={"nvidia.com/gpu": "2"}, scheduler=None, annotations={"tensor-fusion.ai/vram-request": "2Gi"}
    )
    out = _patched(obj, view(GRQ_SINGLE))
    assert out["metadata"]["annotations"] == {
        "tensor-fusion.ai/vram-request": "2Gi",  # the pod's own value is kept
        "tensor-fusion.ai/tflops-request": "10",
        "tensor-fusion.ai/tflops-limit": "20",
        "tensor-fusion.ai/vram-limit": "8Gi",
        "tensor-fusion.ai/gpu-count": "2",
    }


def test_mutation_leaves_cpu_pods_without_gpu_annotations() -> None:
    obj = pod(requests={"cpu": "1"}, scheduler=None)
    assert mutate(POD, "CREATE", obj, view(GRQ_SINGLE)).patch == ()


def test_mutation_normalises_card_name_and_defaults_queue() -> None:
    obj = pod(annotations={"volcano.sh/card.name": " NVIDIA-A100 | NVIDIA-H100 "})
    out = _patched(obj, view())
    assert out["metadata"]["annotations"] == {
        "volcano.sh/card.name": "NVIDIA-A100|NVIDIA-H100",
        "scheduling.volcano.sh/queue-name": "default",
    }


def test_mutation_defaults_queue_from_the_podgroup() -> None:
    obj = pod(annotations={"scheduling.k8s.io/group-name": "pg"})
    out = _patched(obj, view(pod_group("pg", "team-a")))
    assert out["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "team-a"


def test_mutation_sets_scheduler_name_only_when_asked_and_only_for_card_pods() -> None:
    options = AdmissionOptions(set_scheduler_name=True)
    gpu = pod(scheduler="default-scheduler")
    assert _patched(gpu, view(), options)["spec"]["schedulerName"] == "gpuq-scheduler"
    assert _patched(gpu, view())["spec"]["schedulerName"] == "default-scheduler"
    cpu = pod(scheduler="default-scheduler", requests={"cpu": "1"})
    assert _patched(cpu, view(), options)["spec"]["schedulerName"] == "default-scheduler"
    volcano = pod(scheduler="volcano")
    assert _patched(volcano, view(), options)["spec"]["schedulerName"] == "volcano"


def test_mutation_creates_the_annotations_map_when_absent() -> None:
    obj = pod(requests={"nvidia.com/gpu": "1"}, scheduler=None)
    del obj["metadata"]["annotations"]
    decision = mutate(POD, "CREATE", obj, view(GRQ_SINGLE))
    assert decision.patch[0]["op"] == "add" and decision.patch[0]["path"] == "/metadata/annotations"
    assert (
        "tensor-fusion.ai/tflops-request" in jsonpatch.apply(obj, decision.patch)["metadata"]["annotations"]
    )


@pytest.mark.parametrize(
    "obj",
    [
        pod(annotations={"volcano.sh/card.name": "NVIDIA-A100 |NVIDIA-H100"}),
        pod(requests={"nvidia.com/gpu": "3"}, scheduler="default-scheduler"),
        pod(annotations={"scheduling.k8s.io/group-name": "pg"}),
    ],
)
def test_mutation_is_idempotent(obj: Obj) -> None:
    v = view(GRQ_SINGLE, pod_group("pg", "team-a"))
    options = AdmissionOptions(set_scheduler_name=True)
    once = _patched(obj, v, options)
    assert once != obj
    assert mutate(POD, "CREATE", once, v, options).patch == ()


def test_review_validates_the_mutated_object() -> None:
    """Offline admission (gpuq simulate --admission): a normalised card.name then passes."""
    obj = pod(
        annotations={
            "volcano.sh/card.name": "NVIDIA-A100 | NVIDIA-H100",
            "scheduling.volcano.sh/queue-name": "team-a",
        }
    )
    decision = review(obj, "CREATE", view())
    assert decision.allowed, decision.message
    assert decision.patched is not None
    assert decision.patched["metadata"]["annotations"]["volcano.sh/card.name"] == "NVIDIA-A100|NVIDIA-H100"
    assert obj["metadata"]["annotations"]["volcano.sh/card.name"] == "NVIDIA-A100 | NVIDIA-H100"


def test_gpu_quota_kind_routing_uses_the_api_group() -> None:
    """A GPUResourceQuota of another API group is not ours to judge."""
    foreign = gpu_quota(total={"requests": {"tflops": "-1"}})
    foreign["apiVersion"] = "example.com/v1"
    assert review(foreign, "CREATE", view()).allowed
    assert not validate(
        GPU_RESOURCE_QUOTA, "CREATE", gpu_quota(total={"requests": {"tflops": "-1"}}), view()
    ).allowed


def test_static_view_catalog_follows_nodes() -> None:
    v = view()
    catalog = v.card_catalog()
    assert catalog.resource_of("NVIDIA-A100") == "nvidia.com/gpu"
    assert catalog.resource_of("NVIDIA-A100/mps-80g*1/8") == "nvidia.com/gpu.shared"
    assert json.dumps(sorted(catalog.names)) == json.dumps(
        ["NVIDIA-A100", "NVIDIA-A100/mps-80g*1/8", "NVIDIA-H100"]
    )


# -- object shape: the pydantic-free check vouches only for what the pydantic model accepts

_JSON_LEAF = st.none() | st.booleans() | st.integers() | st.text(max_size=3)
_JSON = st.recursive(
    _JSON_LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)
_STRINGS = st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=3)
_META = st.fixed_dictionaries(
    {},
    optional={
        "name": st.text(max_size=3) | _JSON,
        "namespace": st.text(max_size=3) | _JSON,
        "labels": _STRINGS | _JSON,
        "annotations": _STRINGS | st.dictionaries(st.text(max_size=3), _JSON, max_size=3),
    },
)
_OBJECT = st.fixed_dictionaries(
    {},
    optional={
        "metadata": _META | _JSON,
        "spec": st.dictionaries(st.text(max_size=3), _JSON, max_size=2) | _JSON,
        "status": st.dictionaries(st.text(max_size=3), _JSON, max_size=2) | _JSON,
    },
)


@settings(max_examples=400, deadline=None)
@given(obj=_OBJECT | _JSON)
def test_plain_shape_never_admits_what_the_model_refuses(obj: Any) -> None:
    """The fast shape check is only a shortcut: it passes an object only when ObjectShape would."""
    try:
        ObjectShape.model_validate(obj)
        accepted = True
    except pydantic.ValidationError:
        accepted = False
    if _plain_shape(obj):
        assert accepted
    if accepted:
        check_shape(obj, "Pod")
    else:
        with pytest.raises(InvalidValue):
            check_shape(obj, "Pod")


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"metadata": {"name": 5}}, "metadata.name"),
        ({"metadata": {"name": "p", "namespace": None}}, "metadata.namespace"),
        ({"metadata": {"name": "p", "annotations": {"a": 1}}}, "metadata.annotations.a"),
        ({"metadata": {"name": "p", "labels": ["x"]}}, "metadata.labels"),
        ({"metadata": {"name": "p"}, "spec": []}, "spec"),
        ({"metadata": {"name": "p"}, "status": "Running"}, "status"),
        ({"spec": {}}, "metadata"),
    ],
)
def test_malformed_shapes_are_refused_naming_the_field(obj: Obj, field: str) -> None:
    assert not _plain_shape(obj)
    with pytest.raises(InvalidValue) as caught:
        check_shape(obj, "Pod")
    assert caught.value.field == field


def test_well_formed_shape_takes_the_fast_path() -> None:
    obj = {"metadata": {"name": "p", "namespace": "ml", "labels": {}, "annotations": {"a": "b"}}, "spec": {}}
    assert _plain_shape(obj)
    check_shape(obj, "Pod")
