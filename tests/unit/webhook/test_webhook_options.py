"""design.md Semantics 10: the webhook applies a plugin's admission rules only when the scheduler
configuration enables that plugin, with its arguments (webhook/options.py, the one derivation)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpuq_k8s.cli import main
from gpuq_k8s.common.kube.config_file import read_config
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.annotations import (
    CROSSQUOTA_SCORING_STRATEGY,
    RESOURCE_STRATEGY_SCORING_TYPE,
    RESOURCE_STRATEGY_WEIGHT,
)
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.webhook.admission import mutate, review, validate
from gpuq_k8s.webhook.options import AdmissionOptions, admission_options
from gpuq_k8s.webhook.view import StaticView
from tests.testing.builders import (
    MakeElasticQuota,
    MakeGPUResourceQuota,
    MakeNode,
    MakePod,
    MakePodGroup,
    MakeQueue,
)
from tests.testing.config import scheduler_config, scheduler_config_model

Obj = dict[str, Any]


CARD_ONLY = scheduler_config_model("name: capacity-card")
CARD_UNLIMITED = scheduler_config_model("name: capacity-card\n    arguments: {cardUnlimitedCpuMemory: true}")
GPU_QUOTA_ONLY = scheduler_config_model("name: gpu-quota")
ALL = SchedulerConfig.default()

OFF = AdmissionOptions(
    capacity_card=False,
    gpu_quota=False,
    capacity_scheduling=False,
    crossquota=False,
    resource_strategy_fit=False,
)


@pytest.mark.parametrize(
    ("name", "conf", "expected"),
    [
        ("default configuration: every plugin", ALL, AdmissionOptions()),
        ("capacity-card only", CARD_ONLY, replace(OFF, capacity_card=True)),
        (
            "capacity-card with cardUnlimitedCpuMemory",
            CARD_UNLIMITED,
            replace(OFF, capacity_card=True, card_unlimited_cpu_memory=True),
        ),
        ("gpu-quota only", GPU_QUOTA_ONLY, replace(OFF, gpu_quota=True)),
        (
            "no quota plugin",
            scheduler_config_model("name: crossquota\n    arguments: {gpu-resource-names: nvidia.com/gpu}"),
            replace(OFF, crossquota=True),
        ),
        (
            "resource-strategy-fit only",
            scheduler_config_model("name: resource-strategy-fit"),
            replace(OFF, resource_strategy_fit=True),
        ),
        (
            "capacity-scheduling only",
            scheduler_config_model("name: capacity-scheduling"),
            replace(OFF, capacity_scheduling=True),
        ),
    ],
)
def test_the_derivation_for_each_configuration(
    name: str, conf: SchedulerConfig, expected: AdmissionOptions
) -> None:
    assert admission_options(conf) == expected, name


def test_the_command_line_options_pass_through_the_derivation() -> None:
    options = admission_options(GPU_QUOTA_ONLY, scheduler_name="other", set_scheduler_name=True)
    assert (options.scheduler_name, options.set_scheduler_name, options.gpu_quota) == ("other", True, True)


# ------------------------------------------------------------------------------ the scoring annotations

GPU_NODE = MakeNode("a1").product("NVIDIA-A100").alloc(cpu="64", memory="512Gi", pods="110").gpus("8").obj()
OPEN_QUEUE = MakeQueue("team-a").capability(cpu="100", memory="500Gi").card_quota('{"NVIDIA-A100": 4}')
POD_IN_QUEUE = MakePod("p").image("x").queue("team-a").req(cpu="1")


def _verdict(pod: Obj, options: AdmissionOptions, *cluster: Obj) -> tuple[bool, str]:
    decision = validate(
        kinds.POD, "CREATE", pod, StaticView([GPU_NODE, OPEN_QUEUE.obj(), *cluster]), options=options
    )
    return decision.allowed, decision.message


ANNOTATIONS = [
    # (annotation, valid value, malformed value, what the message says is expected, the plugin's switch)
    (
        CROSSQUOTA_SCORING_STRATEGY,
        "least-allocated",
        "spread",
        "most-allocated or least-allocated",
        "crossquota",
    ),
    (RESOURCE_STRATEGY_SCORING_TYPE, "LeastAllocated", "Spread", "MostAllocated", "resource_strategy_fit"),
    (RESOURCE_STRATEGY_WEIGHT, '{"nvidia.com/gpu": 2}', "not json", "JSON object", "resource_strategy_fit"),
]


@pytest.mark.parametrize(
    ("key", "good", "bad", "expected", "switch"), ANNOTATIONS, ids=[a[0] for a in ANNOTATIONS]
)
def test_scoring_annotations_are_validated_when_their_plugin_is_enabled(
    key: str, good: str, bad: str, expected: str, switch: str
) -> None:
    on = AdmissionOptions()
    assert _verdict(POD_IN_QUEUE.copy().annotation(key, good).obj(), on) == (True, "")
    allowed, message = _verdict(POD_IN_QUEUE.copy().annotation(key, bad).obj(), on)
    assert not allowed
    for part in ("Pod/ns/p", key, repr(bad), expected):
        assert part in message, (part, message)
    # plugin off: the scheduler never reads the annotation, so the pod is not refused for it
    switched_off: dict[str, Any] = {switch: False}
    off = replace(on, **switched_off)
    assert _verdict(POD_IN_QUEUE.copy().annotation(key, bad).obj(), off) == (True, "")
    # another scheduler's pod: gpuq scores it never
    other = POD_IN_QUEUE.copy().scheduler("default-scheduler").annotation(key, bad).obj()
    assert _verdict(other, on) == (True, "")


# ------------------------------------------------------------------------------ capacity-card


DEFAULT_QUEUE = MakeQueue("default").obj()  # Volcano's default Queue: no capability


def test_capacity_card_off_admits_a_pod_in_the_default_queue_without_capability() -> None:
    pod = MakePod("p").image("x").req(cpu="1").obj()  # no queue annotation: the default Queue
    card_on = admission_options(CARD_ONLY)
    allowed, message = _verdict(pod, card_on, DEFAULT_QUEUE)
    assert not allowed and "default" in message and "capability" in message
    assert _verdict(pod, admission_options(GPU_QUOTA_ONLY), DEFAULT_QUEUE) == (True, "")


def test_capacity_card_off_checks_no_card_annotation_queue_or_pod_group() -> None:
    off = admission_options(GPU_QUOTA_ONLY)
    on = admission_options(CARD_ONLY)
    v = StaticView([GPU_NODE, OPEN_QUEUE.obj()])
    bad_queue = MakeQueue("q").card_quota("{nope").obj()
    orphan = MakePodGroup().queue("no-such-queue").card_request('{"NVIDIA-A100": 1}').obj()
    over = POD_IN_QUEUE.copy().gpus(5).card("NVIDIA-A100").obj()  # 5 > the queue's 4
    bad_name = POD_IN_QUEUE.copy().card("A||B").obj()
    for kind, obj in (
        (kinds.QUEUE, bad_queue),
        (kinds.POD_GROUP, orphan),
        (kinds.POD, over),
        (kinds.POD, bad_name),
    ):
        assert not validate(kind, "CREATE", obj, v, options=on).allowed, obj["metadata"]["name"]
        assert validate(kind, "CREATE", obj, v, options=off).allowed, obj["metadata"]["name"]
    # nor are capacity-card's mutations made: the queue annotation is capacity-card's to read
    spaced = MakePod("p").image("x").req(cpu="1").card(" NVIDIA-A100 ").obj()
    assert mutate(kinds.POD, "CREATE", spaced, v, on).patch
    assert not mutate(kinds.POD, "CREATE", spaced, v, off).patch


@pytest.mark.parametrize(
    ("conf", "card_pod_allowed"), [(CARD_ONLY, False), (CARD_UNLIMITED, True)], ids=["limited", "unlimited"]
)
def test_card_unlimited_cpu_memory_is_honoured(conf: SchedulerConfig, card_pod_allowed: bool) -> None:
    small = MakeQueue("small").capability(cpu="4", memory="8Gi").card_quota('{"NVIDIA-A100": 2}').obj()
    card_pod = MakePod("card").image("x").queue("small").req(cpu="8").gpus(1).card("NVIDIA-A100").obj()
    cpu_pod = MakePod("cpu").image("x").queue("small").req(cpu="8").obj()
    options = admission_options(conf)
    allowed, message = _verdict(card_pod, options, small)
    assert allowed == card_pod_allowed, message
    # a pod without cards is checked against cpu and memory either way (capacity-card.md)
    allowed, message = _verdict(cpu_pod, options, small)
    assert not allowed and "cpu" in message


# ------------------------------------------------------------------------------ gpu-quota


def test_gpu_quota_off_checks_no_single_limit_and_fills_no_default() -> None:
    quota = (
        MakeGPUResourceQuota().single(maxGPUCount=2, defaultRequests={"tflops": "10", "vram": "4Gi"}).obj()
    )
    v = StaticView([GPU_NODE, OPEN_QUEUE.obj(), quota])
    pod = POD_IN_QUEUE.copy().gpus(3).obj()
    on, off = admission_options(GPU_QUOTA_ONLY), admission_options(CARD_ONLY)
    denied = validate(kinds.POD, "CREATE", pod, v, options=on)
    assert not denied.allowed and "single.maxGPUCount" in denied.message
    assert validate(kinds.POD, "CREATE", pod, v, options=off).allowed

    def annotations(options: AdmissionOptions) -> dict[str, str]:
        patched = review(pod, "CREATE", v, options=options).patched or {}
        return dict(patched["metadata"].get("annotations") or {})

    assert annotations(on)["tensor-fusion.ai/tflops-request"] == "10"
    assert not [key for key in annotations(off) if key.startswith("tensor-fusion.ai/")]
    bad_tf = POD_IN_QUEUE.copy().annotation("tensor-fusion.ai/tflops-request", "lots").obj()
    assert not validate(kinds.POD, "CREATE", bad_tf, v, options=on).allowed
    assert validate(kinds.POD, "CREATE", bad_tf, v, options=off).allowed
    second = MakeGPUResourceQuota("second").obj()
    assert not validate(kinds.GPU_RESOURCE_QUOTA, "CREATE", second, v, options=on).allowed
    assert validate(kinds.GPU_RESOURCE_QUOTA, "CREATE", second, v, options=off).allowed

    # The totals a pod alone exceeds: a gpu-quota rule too.
    totals = StaticView(
        [GPU_NODE, OPEN_QUEUE.obj(), MakeGPUResourceQuota().total(requests={"tflops": "40"}).obj()]
    )
    big = POD_IN_QUEUE.copy().annotation("tensor-fusion.ai/tflops-request", "50").obj()
    denied = validate(kinds.POD, "CREATE", big, totals, options=on)
    assert not denied.allowed and "total.requests.tflops" in denied.message
    assert validate(kinds.POD, "CREATE", big, totals, options=off).allowed
    # A shared-GPU pod no node's GPUs could hold (the A100 has 312 TFLOPS): GPUShare's, gpu-quota's rule.
    shared = POD_IN_QUEUE.copy().annotation("tensor-fusion.ai/tflops-request", "400").obj()
    denied = validate(kinds.POD, "CREATE", shared, v, options=on)
    assert not denied.allowed and "no shareable GPU in the cluster can ever hold it" in denied.message
    assert validate(kinds.POD, "CREATE", shared, v, options=off).allowed


# ------------------------------------------------------------------------------ reading the file


def test_read_config_is_the_default_without_a_file_and_one_line_errors_otherwise(tmp_path: Path) -> None:
    assert read_config(None) == SchedulerConfig.default()
    path = tmp_path / "c.yaml"
    path.write_text(scheduler_config("name: gpu-quota"))
    assert admission_options(read_config(path)) == admission_options(GPU_QUOTA_ONLY)
    with pytest.raises(GpuqError, match="cannot read"):
        read_config(tmp_path / "missing.yaml")
    path.write_text(scheduler_config("name: no-such-plugin"))
    with pytest.raises(GpuqError, match="no-such-plugin"):
        read_config(path)


def test_webhook_with_an_invalid_config_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(scheduler_config("name: capacity-card\n    arguments: {cardUnlimitedCpuMemory: maybe}"))
    code = main(["webhook", "--tls-cert-file", "x", "--tls-private-key-file", "y", "--config", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and str(path) in err and "cardUnlimitedCpuMemory" in err and "maybe" in err


def test_webhook_with_zero_workers_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["webhook", "--tls-cert-file", "x", "--tls-private-key-file", "y", "--workers", "0"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == "error: --workers: invalid value 0: expected at least 1\n"


# ------------------------------------------------------------------------------ capacity-scheduling


def test_capacity_scheduling_off_checks_no_elastic_quota_and_warns_of_none() -> None:
    on, off = (
        admission_options(scheduler_config_model("name: capacity-scheduling")),
        admission_options(GPU_QUOTA_ONLY),
    )
    inverted = MakeElasticQuota("eq").min(cpu="4").max(cpu="2").obj()
    v = StaticView([GPU_NODE])
    assert not validate(kinds.ELASTIC_QUOTA, "CREATE", inverted, v, options=on).allowed
    assert validate(kinds.ELASTIC_QUOTA, "CREATE", inverted, v, options=off).allowed
    full = MakeElasticQuota("eq").max(cpu="2").used(cpu="2").obj()
    pod = MakePod("p").image("x").req(cpu="1").obj()
    warned = validate(kinds.POD, "CREATE", pod, StaticView([GPU_NODE, full]), options=on)
    assert warned.allowed and "ElasticQuota/ns/eq" in " ".join(warned.warnings)
    assert validate(kinds.POD, "CREATE", pod, StaticView([GPU_NODE, full]), options=off).warnings == ()
