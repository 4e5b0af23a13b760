"""webhook.admission: which objects are denied, warned about or mutated, and with which message."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.crd import ObjectShape
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.webhook import jsonpatch
from gpuq_k8s.webhook.admission import (
    mutate,
    review,
    validate,
)
from gpuq_k8s.webhook.options import AdmissionOptions
from gpuq_k8s.webhook.shape import _plain_shape, check_shape
from gpuq_k8s.webhook.view import StaticView
from tests.testing.builders import (
    GPU,
    MakeElasticQuota,
    MakeGPUResourceQuota,
    MakeNode,
    MakePod,
    MakePodGroup,
    MakeQueue,
)

Obj = dict[str, Any]

GPU_MEMORY = {"nvidia.com/gpu.memory": "81920"}
GPU_NODE = MakeNode().labels(GPU_MEMORY).alloc(cpu="64", memory="512Gi", pods="110").gpus("8")
CPU_QUEUE = MakeQueue().capability(cpu="100", memory="500Gi")
GROUP = MakePodGroup().min_member(1)
# Templates (copy() before use): a gpuq pod without requests, and one of 1 cpu and 1 card (a card
# request has an equal limit, as the apiserver requires).
BARE_POD = MakePod().image("x")
GPU_POD = BARE_POD.copy().req(cpu="1").gpus(1)


QUEUE_A = CPU_QUEUE.copy().name("team-a").card_quota('{"NVIDIA-A100": 5, "NVIDIA-H100": 3}').obj()
CLUSTER = [
    GPU_NODE.copy().name("a1").product("NVIDIA-A100").obj(),
    GPU_NODE.copy().name("h1").product("NVIDIA-H100").obj(),
    MakeNode("m1")
    .product("NVIDIA-A100")
    .labels({**GPU_MEMORY, "nvidia.com/gpu.replicas": "8"})
    .alloc(cpu="64", **{"nvidia.com/gpu.shared": "32"})
    .obj(),
    QUEUE_A,
]
GRQ_SINGLE = (
    MakeGPUResourceQuota()
    .single(
        maxRequests={"tflops": "100", "vram": "16Gi"},
        maxLimits={"tflops": "200", "vram": "32Gi"},
        maxGPUCount=4,
        defaultRequests={"tflops": "10", "vram": "4Gi"},
        defaultLimits={"tflops": "20", "vram": "8Gi"},
    )
    .obj()
)
TFLOPS_REQUEST = "tensor-fusion.ai/tflops-request"
TF_GPU_COUNT = "tensor-fusion.ai/gpu-count"


def view(*extra: Obj) -> StaticView:
    return StaticView([*CLUSTER, *extra])


# (case id, object, cluster extras, expected allowed, substrings of the message)
DENIALS: list[tuple[str, Obj, tuple[Obj, ...], list[str]]] = [
    (
        "queue card.quota not JSON",
        CPU_QUEUE.copy().name("q").card_quota("{nope").obj(),
        (),
        ["Queue/q", "volcano.sh/card.quota", "invalid JSON"],
    ),
    (
        "queue card.quota negative",
        CPU_QUEUE.copy().name("q").card_quota('{"NVIDIA-A100": -1}').obj(),
        (),
        ["Queue/q", "NVIDIA-A100", "-1"],
    ),
    (
        "queue card.quota float",
        CPU_QUEUE.copy().name("q").card_quota('{"NVIDIA-A100": 1.5}').obj(),
        (),
        ["Queue/q", "1.5", "non-negative integer"],
    ),
    (
        "queue card.quota array",
        CPU_QUEUE.copy().name("q").card_quota("[1]").obj(),
        (),
        ["Queue/q", "JSON object"],
    ),
    (
        "queue card.quota A|B key",
        CPU_QUEUE.copy().name("q").card_quota('{"A|B": 1}').obj(),
        (),
        ["Queue/q", "single card type"],
    ),
    (
        "podgroup card.request not an object",
        GROUP.copy().queue("team-a").card_request('"x"').obj(),
        (),
        ["PodGroup/ns/pg", "volcano.sh/card.request"],
    ),
    (
        "podgroup queue missing",
        GROUP.copy().queue("nope").card_request('{"NVIDIA-A100": 1}').obj(),
        (),
        ["PodGroup/ns/pg", "spec.queue", "nope", "existing Queue"],
    ),
    (
        "podgroup queue closed",
        GROUP.copy().queue("closed").card_request('{"NVIDIA-A100": 1}').obj(),
        (CPU_QUEUE.copy().name("closed").card_quota('{"NVIDIA-A100": 5}').state("Closed").obj(),),
        ["PodGroup/ns/pg", "Open", "Closed"],
    ),
    (
        "capacity-card.md Example 1 over quota: 6 > 5",
        GROUP.copy().queue("team-a").card_request('{"NVIDIA-A100": 6}').obj(),
        (),
        ["PodGroup/ns/pg", "NVIDIA-A100", "requested 6", "available 5", "limit 5"],
    ),
    (
        "capacity-card.md Job Mode: A|H summed, 9 > 5+3",
        GROUP.copy().queue("team-a").card_request('{"NVIDIA-A100|NVIDIA-H100": 9}').obj(),
        (),
        ["PodGroup/ns/pg", "NVIDIA-A100|NVIDIA-H100", "requested 9", "available 8"],
    ),
    (
        "pod card.name syntax",
        GPU_POD.copy().card("A||B").obj(),
        (),
        ["Pod/ns/p", "volcano.sh/card.name", "alternative 2 is empty"],
    ),
    (
        "pod card.name alternatives on different resources",
        GPU_POD.copy().card("NVIDIA-A100|NVIDIA-A100/mps-80g*1/8").obj(),
        (),
        ["Pod/ns/p", "volcano.sh/card.name", "one Kubernetes resource", "nvidia.com/gpu.shared"],
    ),
    (
        "pod card.name without requesting the card resource",
        BARE_POD.copy().req(cpu="1").card("NVIDIA-A100").obj(),
        (),
        ["Pod/ns/p", "volcano.sh/card.name", "nvidia.com/gpu"],
    ),
    (
        "pod queue has no quota for any alternative",
        GPU_POD.copy().card("NVIDIA-A100").queue("cpu-only").obj(),
        (CPU_QUEUE.copy().name("cpu-only").card_quota('{"NVIDIA-H100": 1}').obj(),),
        ["Pod/ns/p", "NVIDIA-A100", "requested 1", "available 0"],
    ),
    (
        "pod request over every alternative's quota",
        GPU_POD.copy().card("NVIDIA-A100|NVIDIA-H100").queue("team-a").gpus(6).obj(),
        (),
        ["Pod/ns/p", "NVIDIA-A100", "requested 6", "available 5", "NVIDIA-H100", "available 3"],
    ),
    (
        "pod without card.name over the quota of every card type of its resource",
        BARE_POD.copy().queue("team-a").gpus(7).obj(),
        (),
        ["Pod/ns/p", "requested 7", "NVIDIA-A100", "NVIDIA-H100"],
    ),
    (
        "pod queue from its PodGroup",
        BARE_POD.copy().group("pg").gpus(2).obj(),
        (
            GROUP.copy().queue("small").obj(),
            CPU_QUEUE.copy().name("small").card_quota('{"NVIDIA-A100": 1}').obj(),
        ),
        ["Pod/ns/p", "Queue/small", "requested 2", "available 1"],
    ),
    (
        "pod in a closed queue",
        GPU_POD.copy().queue("closed").obj(),
        (CPU_QUEUE.copy().name("closed").card_quota('{"NVIDIA-A100": 5}').state("Closing").obj(),),
        ["Pod/ns/p", "closed"],
    ),
    (
        "gpu-resource-quota.md single maxRequests.tflops",
        GPU_POD.copy()
        .scheduler(None)
        .annotations({TFLOPS_REQUEST: "150", "tensor-fusion.ai/tflops-limit": "150"})
        .obj(),
        (GRQ_SINGLE,),
        ["Pod/ns/p", "single.maxRequests.tflops", "requested 150", "limit 100"],
    ),
    (
        "single maxLimits.vram",
        GPU_POD.copy().scheduler(None).annotation("tensor-fusion.ai/vram-limit", "64Gi").obj(),
        (GRQ_SINGLE,),
        ["Pod/ns/p", "single.maxLimits.vram", "64Gi", "32Gi"],
    ),
    (
        "single maxGPUCount from the annotation",
        GPU_POD.copy().scheduler(None).annotation("tensor-fusion.ai/gpu-count", "8").obj(),
        (GRQ_SINGLE,),
        ["Pod/ns/p", "single.maxGPUCount", "requested 8", "limit 4", "tensor-fusion.ai/gpu-count='8'"],
    ),
    (
        "single maxGPUCount from the card resource",
        BARE_POD.copy().scheduler(None).gpus(5).obj(),
        (GRQ_SINGLE,),
        ["Pod/ns/p", "single.maxGPUCount", "requested 5", "limit 4"],
    ),
    (
        "tensor-fusion TFLOPS over the namespace's total, which can never hold it",
        GPU_POD.copy().scheduler(None).annotation(TFLOPS_REQUEST, "60").annotation(TF_GPU_COUNT, "2").obj(),
        (MakeGPUResourceQuota().total(requests={"tflops": "100"}).obj(),),
        [
            "Pod/ns/p",
            "total.requests.tflops",
            "requested 120",
            "limit 100",
            "asked by tensor-fusion.ai/tflops-request='60', tensor-fusion.ai/gpu-count='2'",
        ],
    ),
    (
        "tensor-fusion VRAM over the namespace's total",
        GPU_POD.copy().scheduler(None).annotation("tensor-fusion.ai/vram-request", "48Gi").obj(),
        (MakeGPUResourceQuota().total(requests={"vram": "32Gi"}).obj(),),
        [
            "Pod/ns/p",
            "total.requests.vram",
            "requested 48Gi",
            "limit 32Gi",
            "tensor-fusion.ai/vram-request='48Gi'",
        ],
    ),
    (
        "a GPU pod where maxWorkers is 0",
        GPU_POD.copy().scheduler(None).annotation(TFLOPS_REQUEST, "1").obj(),
        (MakeGPUResourceQuota().total(maxWorkers=0).obj(),),
        ["Pod/ns/p", "total.maxWorkers", "limit 0"],
    ),
    (
        "a shared-GPU pod asking more TFLOPS per GPU than any shareable GPU has (A100: 312; H100: unknown)",
        BARE_POD.copy().annotation(TFLOPS_REQUEST, "400").obj(),
        (),
        [
            "Pod/ns/p",
            "tensor-fusion.ai/tflops-request='400'",
            "no shareable GPU in the cluster can ever hold it",
            "1 node(s) with 8 NVIDIA-A100 of 312 TFLOPS and 80Gi VRAM",
            "1 node(s) with 8 NVIDIA-H100 of unknown TFLOPS and 80Gi VRAM",
        ],
    ),
    (
        "a shared-GPU pod asking more GPUs than any node has",
        BARE_POD.copy().annotation(TFLOPS_REQUEST, "10").annotation(TF_GPU_COUNT, "9").obj(),
        (),
        ["Pod/ns/p", "tensor-fusion.ai/gpu-count='9'", "no shareable GPU in the cluster can ever hold it"],
    ),
    (
        "a shared-GPU pod asking more VRAM per GPU than any card has",
        BARE_POD.copy().annotation("tensor-fusion.ai/vram-request", "96Gi").obj(),
        (),
        ["Pod/ns/p", "tensor-fusion.ai/vram-request='96Gi'", "can ever hold it"],
    ),
    (
        "tensor-fusion annotation malformed",
        GPU_POD.copy().scheduler(None).annotation(TFLOPS_REQUEST, "lots").obj(),
        (),
        ["Pod/ns/p", "tensor-fusion.ai/tflops-request", "lots"],
    ),
    (
        "pod with an unparseable quantity",
        BARE_POD.copy().scheduler(None).req(cpu="one").obj(),
        (),
        ["Pod/ns/p", "cpu", "one"],
    ),
    (
        "elasticquota min > max",
        MakeElasticQuota().min(cpu="4").max(cpu="2").obj(),
        (),
        ["ElasticQuota/ns/eq", "spec.min[cpu]", "4", "spec.max[cpu] = 2"],
    ),
    (
        "elasticquota negative",
        MakeElasticQuota().max(memory="-1Gi").obj(),
        (),
        ["ElasticQuota/ns/eq", "spec.max[memory]", "non-negative"],
    ),
    (
        "elasticquota second in namespace",
        MakeElasticQuota("eq2").max(cpu="2").obj(),
        (MakeElasticQuota("eq1").max(cpu="2").obj(),),
        ["ElasticQuota/ns/eq2", "eq1", "at most one"],
    ),
    (
        "gpuresourcequota negative",
        MakeGPUResourceQuota().total(requests={"tflops": "-1"}).obj(),
        (),
        ["GPUResourceQuota/ns/q", "spec.total.requests.tflops", "non-negative"],
    ),
    (
        "gpuresourcequota limits below requests",
        MakeGPUResourceQuota().total(requests={"vram": "10Gi"}, limits={"vram": "5Gi"}).obj(),
        (),
        ["GPUResourceQuota/ns/q", "spec.total.limits.vram", "at least spec.total.requests.vram"],
    ),
    (
        "gpuresourcequota alert threshold over 100",
        MakeGPUResourceQuota().total(alertThresholdPercent=101).obj(),
        (),
        ["GPUResourceQuota/ns/q", "alertThresholdPercent", "101", "0 to 100"],
    ),
    (
        "gpuresourcequota second in namespace",
        MakeGPUResourceQuota("q2").obj(),
        (MakeGPUResourceQuota("q1").obj(),),
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
    (
        "queue with quota",
        CPU_QUEUE.copy().name("q").card_quota('{"NVIDIA-A100": 10, "NVIDIA-A100/mps-80g*1/8": 16}').obj(),
        (),
    ),
    ("queue without quota", CPU_QUEUE.copy().name("q").obj(), ()),
    (
        "capacity-card.md Example 1: 4 <= 5",
        GROUP.copy().queue("team-a").card_request('{"NVIDIA-A100": 4}').obj(),
        (),
    ),
    (
        "capacity-card.md Job Mode example: A|H 4 <= 8",
        GROUP.copy().queue("team-a").card_request('{"NVIDIA-A100|NVIDIA-H100": 4}').obj(),
        (),
    ),
    (
        "capacity-card.md Considerations 4: A|H 6 <= 4+4",
        GROUP.copy().queue("q44").card_request('{"NVIDIA-A100|NVIDIA-H100": 6}').obj(),
        (CPU_QUEUE.copy().name("q44").card_quota('{"NVIDIA-A100": 4, "NVIDIA-H100": 4}').obj(),),
    ),
    ("podgroup without card request", GROUP.copy().queue("team-a").obj(), ()),
    (
        "pod A|H fits H alone? no, A: 5 >= 4",
        BARE_POD.copy().card("NVIDIA-A100|NVIDIA-H100").queue("team-a").gpus(4).obj(),
        (),
    ),
    (
        "pod in a queue that does not exist (Semantics 7)",
        BARE_POD.copy().queue("ghost").gpus(64).obj(),
        (),
    ),
    (
        "pod of another scheduler is not subject to queue quotas",
        BARE_POD.copy().scheduler(None).queue("team-a").gpus(64).obj(),
        (),
    ),
    (
        "capacity-card.md Example 3: MPS pod",
        BARE_POD.copy().card("NVIDIA-A100/mps-80g*1/8").queue("mps").gpus(1, "nvidia.com/gpu.shared").obj(),
        (CPU_QUEUE.copy().name("mps").card_quota('{"NVIDIA-A100/mps-80g*1/8": 32}').obj(),),
    ),
    (
        "cpu-only pod of another scheduler",
        BARE_POD.copy().req(cpu="1").scheduler("default-scheduler").obj(),
        (),
    ),
    (
        "tensor-fusion pod within the namespace's total (its usage is the scheduler's to judge)",
        GPU_POD.copy().scheduler(None).annotation(TFLOPS_REQUEST, "50").annotation(TF_GPU_COUNT, "2").obj(),
        (MakeGPUResourceQuota().total(requests={"tflops": "100"}, maxWorkers=1).obj(),),
    ),
    (
        "a shared-GPU pod an A100 can hold (300 of 312 TFLOPS, 8 GPUs)",
        BARE_POD.copy().annotation(TFLOPS_REQUEST, "300").annotation(TF_GPU_COUNT, "8").obj(),
        (),
    ),
    (
        "a shared-GPU pod of another scheduler: GPUShare does not place it",
        BARE_POD.copy().scheduler("default-scheduler").annotation(TFLOPS_REQUEST, "400").obj(),
        (),
    ),
    (
        "pod within single limits",
        GPU_POD.copy().scheduler(None).annotation(TFLOPS_REQUEST, "15").obj(),
        (GRQ_SINGLE,),
    ),
    ("elasticquota", MakeElasticQuota().min(cpu="2").max({"cpu": "4", GPU: "0"}).obj(), ()),
    ("gpuresourcequota", GRQ_SINGLE, ()),
]


@pytest.mark.parametrize(("case", "obj", "extra"), ALLOWED, ids=[a[0] for a in ALLOWED])
def test_allowed(case: str, obj: Obj, extra: tuple[Obj, ...]) -> None:
    decision = review(obj, "CREATE", view(*extra))
    assert decision.allowed, (case, decision.message)


def test_update_of_the_same_quota_is_not_a_second_one() -> None:
    existing = MakeElasticQuota().max(cpu="2").obj()
    updated = MakeElasticQuota().max(cpu="3").obj()
    assert review(updated, "UPDATE", view(existing)).allowed
    other = MakeGPUResourceQuota("q1").obj()
    assert review(MakeGPUResourceQuota("q1").total(maxWorkers=3).obj(), "UPDATE", view(other)).allowed


def test_podgroup_update_that_keeps_queue_and_request_is_not_rechecked() -> None:
    """A label change on a PodGroup whose queue closed since must not block its controller."""
    closed = CPU_QUEUE.copy().name("closed").card_quota('{"NVIDIA-A100": 5}').state("Closed").obj()
    old = GROUP.copy().queue("closed").card_request('{"NVIDIA-A100": 1}')
    new = old.copy().label("x", "y").obj()
    assert validate(kinds.POD_GROUP, "UPDATE", new, view(closed), old=old.obj()).allowed
    new["spec"]["queue"] = "closed2"
    assert not validate(kinds.POD_GROUP, "UPDATE", new, view(closed), old=old.obj()).allowed


def test_delete_and_unknown_kinds_are_allowed_untouched() -> None:
    bad = CPU_QUEUE.copy().name("q").card_quota("{nope").obj()
    assert validate(kinds.QUEUE, "DELETE", bad, view()).allowed
    assert validate(kinds.lookup("apps", "Deployment"), "CREATE", {"kind": "Deployment"}, view()).allowed
    assert mutate(kinds.lookup("apps", "Deployment"), "CREATE", {"kind": "Deployment"}, view()).patch == ()
    assert validate(kinds.POD, "UPDATE", GPU_POD.copy().card("A||B").obj(), view()).allowed


def test_malformed_queue_quota_is_a_warning_when_a_pod_uses_it() -> None:
    """Semantics 3: a queue that predates the webhook; its quota counts as 0."""
    legacy = CPU_QUEUE.copy().name("legacy").card_quota("{broken").obj()
    decision = review(GPU_POD.copy().queue("legacy").obj(), "CREATE", view(legacy))
    assert not decision.allowed
    assert any("volcano.sh/card.quota" in w for w in decision.warnings)


def test_elastic_quota_over_max_itself_is_denied_as_never() -> None:
    """20 GPUs asked of an ElasticQuota whose max is 16: no usage change makes room, so the webhook
    denies it (design.md Semantics 10, 14) with the scheduler's words, instead of admitting it with
    "waits until usage drops"."""
    eq = MakeElasticQuota().min({GPU: "8"}).max({GPU: "16"}).obj()
    decision = review(BARE_POD.copy().req(cpu="1").gpus(20).scheduler(None).obj(), "CREATE", view(eq))
    assert not decision.allowed
    assert decision.message == (
        "Pod/ns/p: quota exceeded in ElasticQuota/ns/eq (max) for nvidia.com/gpu: requested 20, "
        "available 16, limit 16 (can never fit under the current quota: nvidia.com/gpu limit 16 would "
        "have to be at least 20)"
    )
    assert "waits until usage drops" not in " ".join(decision.warnings)


def test_elastic_quota_over_max_is_a_warning_not_a_denial() -> None:
    eq = MakeElasticQuota().max(cpu="4").used(cpu="3500m").obj()
    decision = review(BARE_POD.copy().req(cpu="1").scheduler(None).obj(), "CREATE", view(eq))
    assert decision.allowed
    assert len(decision.warnings) == 1
    assert "ElasticQuota/ns/eq" in decision.warnings[0]
    assert "requested 1" in decision.warnings[0] and "500m left" in decision.warnings[0]


def test_unknown_card_type_is_denied_for_gpuq_pods_without_autoscaling() -> None:
    strict = AdmissionOptions(autoscaled_card_types=False)
    decision = review(GPU_POD.copy().card("NVIDIA-B200").obj(), "CREATE", view(), options=strict)
    assert not decision.allowed
    assert decision.message.endswith("(can never fit under the current cluster: no node offers NVIDIA-B200)")


def test_a_card_type_no_node_offers_is_admitted_while_its_quota_holds_the_request() -> None:
    """autoscaledCardTypes (the default): a node autoscaler adds the node for the pending pod, so the
    webhook admits it, with a warning, when its queue has quota for it; only the quota makes it
    never (design.md Semantics 16)."""
    queue = CPU_QUEUE.copy().name("team-b").card_quota('{"NVIDIA-B200": 2}').obj()
    fits = review(GPU_POD.copy().queue("team-b").card("NVIDIA-B200").obj(), "CREATE", view(queue))
    assert fits.allowed
    assert fits.warnings == (
        "Pod/ns/p: no node offers NVIDIA-B200 yet: the pod waits for a node offering it "
        "(a node autoscaler adds one for a pending pod)",
    )
    too_big = review(GPU_POD.copy().queue("team-b").card("NVIDIA-B200").gpus(3).obj(), "CREATE", view(queue))
    assert not too_big.allowed and "NVIDIA-B200 limit 2 would have to be at least 3" in too_big.message
    no_quota = review(GPU_POD.copy().queue("team-a").card("NVIDIA-B200").obj(), "CREATE", view())
    assert not no_quota.allowed and "can never fit under the current quota" in no_quota.message


# --- mutation ------------------------------------------------------------------------------------


DEFAULTS = AdmissionOptions()


def _patched(obj: Obj, v: StaticView, options: AdmissionOptions = DEFAULTS) -> Obj:
    decision = mutate(kinds.POD, "CREATE", obj, v, options)
    return jsonpatch.apply(obj, decision.patch)


def test_mutation_fills_tensor_fusion_defaults_and_gpu_count() -> None:
    obj = BARE_POD.copy().scheduler(None).gpus(2).annotation("tensor-fusion.ai/vram-request", "2Gi").obj()
    out = _patched(obj, view(GRQ_SINGLE))
    assert out["metadata"]["annotations"] == {
        "tensor-fusion.ai/vram-request": "2Gi",  # the pod's own value is kept
        "tensor-fusion.ai/tflops-request": "10",
        "tensor-fusion.ai/tflops-limit": "20",
        "tensor-fusion.ai/vram-limit": "8Gi",
        "tensor-fusion.ai/gpu-count": "2",
    }


def test_mutation_leaves_cpu_pods_without_gpu_annotations() -> None:
    obj = BARE_POD.copy().req(cpu="1").scheduler(None).obj()
    assert mutate(kinds.POD, "CREATE", obj, view(GRQ_SINGLE)).patch == ()


def test_mutation_normalises_card_name_and_defaults_queue() -> None:
    obj = GPU_POD.copy().card(" NVIDIA-A100 | NVIDIA-H100 ").obj()
    out = _patched(obj, view())
    assert out["metadata"]["annotations"] == {
        "volcano.sh/card.name": "NVIDIA-A100|NVIDIA-H100",
        "scheduling.volcano.sh/queue-name": "default",
    }


def test_mutation_defaults_queue_from_the_podgroup() -> None:
    obj = GPU_POD.copy().group("pg").obj()
    out = _patched(obj, view(GROUP.copy().queue("team-a").obj()))
    assert out["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "team-a"


def test_mutation_sets_scheduler_name_only_when_asked_and_only_for_card_pods() -> None:
    options = AdmissionOptions(set_scheduler_name=True)
    gpu = GPU_POD.copy().scheduler("default-scheduler").obj()
    assert _patched(gpu, view(), options)["spec"]["schedulerName"] == "gpuq-scheduler"
    assert _patched(gpu, view())["spec"]["schedulerName"] == "default-scheduler"
    cpu = BARE_POD.copy().scheduler("default-scheduler").req(cpu="1").obj()
    assert _patched(cpu, view(), options)["spec"]["schedulerName"] == "default-scheduler"
    volcano = GPU_POD.copy().scheduler("volcano").obj()
    assert _patched(volcano, view(), options)["spec"]["schedulerName"] == "volcano"


def test_mutation_creates_the_annotations_map_when_absent() -> None:
    obj = BARE_POD.copy().gpus(1).scheduler(None).obj()
    assert "annotations" not in obj["metadata"]
    decision = mutate(kinds.POD, "CREATE", obj, view(GRQ_SINGLE))
    assert decision.patch[0]["op"] == "add" and decision.patch[0]["path"] == "/metadata/annotations"
    assert (
        "tensor-fusion.ai/tflops-request" in jsonpatch.apply(obj, decision.patch)["metadata"]["annotations"]
    )


@pytest.mark.parametrize(
    "obj",
    [
        GPU_POD.copy().card("NVIDIA-A100 |NVIDIA-H100").obj(),
        BARE_POD.copy().gpus(3).scheduler("default-scheduler").obj(),
        GPU_POD.copy().group("pg").obj(),
    ],
)
def test_mutation_is_idempotent(obj: Obj) -> None:
    v = view(GRQ_SINGLE, GROUP.copy().queue("team-a").obj())
    options = AdmissionOptions(set_scheduler_name=True)
    once = _patched(obj, v, options)
    assert once != obj
    assert mutate(kinds.POD, "CREATE", once, v, options).patch == ()


def test_review_validates_the_mutated_object() -> None:
    """Offline admission (gpuq simulate --admission): a normalised card.name then passes."""
    obj = GPU_POD.copy().card("NVIDIA-A100 | NVIDIA-H100").queue("team-a").obj()
    decision = review(obj, "CREATE", view())
    assert decision.allowed, decision.message
    assert decision.patched is not None
    assert decision.patched["metadata"]["annotations"]["volcano.sh/card.name"] == "NVIDIA-A100|NVIDIA-H100"
    assert obj["metadata"]["annotations"]["volcano.sh/card.name"] == "NVIDIA-A100 | NVIDIA-H100"


def test_gpu_quota_kind_routing_uses_the_api_group() -> None:
    """A GPUResourceQuota of another API group is not ours to judge."""
    negative = MakeGPUResourceQuota().total(requests={"tflops": "-1"})
    foreign = negative.obj()
    foreign["apiVersion"] = "example.com/v1"
    assert review(foreign, "CREATE", view()).allowed
    assert not validate(kinds.GPU_RESOURCE_QUOTA, "CREATE", negative.obj(), view()).allowed


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
