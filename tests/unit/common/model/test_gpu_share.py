"""The per-GPU allocation of tensor-fusion pods, pure (common/model/gpu_share; design.md Semantics 19).

Strategy cases follow tensor-fusion's GpuAllocator (``internal/gpuallocator/strategy_compact_first.go``:
CompactFirst picks the most used GPU that fits; ``strategy_low_load.go``: LowLoadFirst the least used;
``filter/resource_filter.go``: a GPU qualifies when its TFLOPS and VRAM left cover the request).
"""

from __future__ import annotations

import pytest

from gpuq_k8s.common.model.errors import InvalidAnnotation
from gpuq_k8s.common.model.gpu_share.choice import Placement, Refusal, choose, least_used, whole_refusal
from gpuq_k8s.common.model.gpu_share.devices import NodeGPUs, node_gpus
from gpuq_k8s.common.model.gpu_share.gpu_ids import read_gpu_ids
from gpuq_k8s.common.model.gpu_share.ledger import Share, ShareLedger
from gpuq_k8s.common.model.gpu_share.request import ShareRequest, share_request
from tests.testing.builders import MakeNode, MakePod

GiB = 2**30
# Two 100-TFLOPS, 80 GiB cards (milli-TFLOPS, bytes).
TWO = NodeGPUs("node-a", "nvidia.com/gpu", "NVIDIA-A100", 2, 100_000, 80 * GiB)
PACK, SPREAD = Placement.COMPACT_FIRST, Placement.LOW_LOAD_FIRST


def _ledger(*shares: tuple[tuple[int, ...], int, int], whole: int = 0) -> ShareLedger:
    ledger = ShareLedger()
    for i, (devices, tflops, vram) in enumerate(shares):
        ledger.reserve_share(f"ns/s{i}", Share("node-a", devices, tflops, vram))
    if whole:
        ledger.reserve_whole("ns/whole", "node-a", whole)
    return ledger


@pytest.mark.parametrize(
    ("name", "shares", "whole", "request_", "placement", "expected"),
    [
        # CompactFirst: the GPU already used 30 TFLOPS takes the next 20 (packs)
        ("pack onto the used GPU", [((0,), 30_000, 10 * GiB)], 0, ShareRequest(20_000, GiB), PACK, (0,)),
        # LowLoadFirst: an idle GPU takes it (spreads)
        ("spread onto the idle GPU", [((0,), 30_000, 10 * GiB)], 0, ShareRequest(20_000, GiB), SPREAD, (1,)),
        # the used GPU has 70 TFLOPS left: pack still goes elsewhere for 80
        ("pack skips a GPU without room", [((0,), 30_000, 0)], 0, ShareRequest(80_000, 0), PACK, (1,)),
        # VRAM limits: 10 GiB left on gpu-0 for 16 asked
        ("VRAM limits", [((0,), 0, 70 * GiB)], 0, ShareRequest(0, 16 * GiB), PACK, (1,)),
        # two GPUs asked (gpu-count 2)
        ("two GPUs", [], 0, ShareRequest(10_000, GiB, 2), PACK, (0, 1)),
        # a card held whole leaves one device for shares: pack goes to the shared one
        ("whole card held", [((1,), 10_000, 0)], 1, ShareRequest(10_000, 0), SPREAD, (1,)),
    ],
)
def test_choice_follows_the_placement(
    name: str,
    shares: list[tuple[tuple[int, ...], int, int]],
    whole: int,
    *,
    request_: ShareRequest,
    placement: Placement,
    expected: tuple[int, ...],
) -> None:
    ledger = _ledger(*shares, whole=whole)
    assert choose(TWO, ledger.use("node-a"), request_, placement) == expected, name


@pytest.mark.parametrize(
    ("name", "shares", "whole", "request_", "reasons", "short", "never"),
    [
        (
            "TFLOPS limit",
            [((0,), 80_000, 0), ((1,), 90_000, 0)],
            0,
            ShareRequest(50_000, 0),
            ("gpu-0 on node-a: 20 TFLOPS left, 50 asked", "gpu-1 on node-a: 10 TFLOPS left, 50 asked"),
            ("TFLOPS",),
            False,
        ),
        (
            "VRAM limit",
            [((0,), 0, 70 * GiB), ((1,), 0, 75 * GiB)],
            0,
            ShareRequest(10_000, 16 * GiB),
            ("gpu-0 on node-a: 10Gi VRAM left, 16Gi asked", "gpu-1 on node-a: 5Gi VRAM left, 16Gi asked"),
            ("VRAM",),
            False,
        ),
        (
            "both",
            [((0,), 99_000, 79 * GiB)],
            1,
            ShareRequest(2_000, 2 * GiB),
            (
                "gpu-0 on node-a: 1 TFLOPS left, 2 asked, 1Gi VRAM left, 2Gi asked",
                "1 GPU(s) on node-a held by whole-GPU pods",
            ),
            ("TFLOPS", "VRAM", "GPUs"),
            False,
        ),
        (
            "more GPUs than the node",
            [],
            0,
            ShareRequest(0, 0, 3),
            ("node-a: 2 GPU(s) of NVIDIA-A100, 3 asked",),
            ("GPUs",),
            True,
        ),
        (
            "more than a whole GPU",
            [],
            0,
            ShareRequest(150_000, 0),
            ("gpu-0 on node-a: 100 TFLOPS left, 150 asked", "gpu-1 on node-a: 100 TFLOPS left, 150 asked"),
            ("TFLOPS",),
            True,
        ),
    ],
)
def test_refusal_names_each_device_and_what_it_lacks(
    name: str,
    shares: list[tuple[tuple[int, ...], int, int]],
    whole: int,
    *,
    request_: ShareRequest,
    reasons: tuple[str, ...],
    short: tuple[str, ...],
    never: bool,
) -> None:
    """``never``: even idle the node could not take it (preemption cannot help); ``short`` groups
    many nodes' refusals in a FitError."""
    chosen = choose(TWO, _ledger(*shares, whole=whole).use("node-a"), request_, PACK)
    assert chosen == Refusal(reasons, short, never), name
    assert isinstance(chosen, Refusal)
    assert chosen.summary == f"no GPU to share has the {' and '.join(short)} asked"


def test_unknown_tflops_is_a_reason_never_a_guess() -> None:
    unknown = NodeGPUs("node-b", "nvidia.com/gpu", "ACME-X1", 1, None, 16 * GiB)
    chosen = choose(unknown, ShareLedger().use("node-b"), ShareRequest(10_000, GiB), PACK)
    assert chosen == Refusal(
        ("gpu-0 on node-b: TFLOPS of ACME-X1 unknown (no nvidia.com/gpu.tflops node label)",),
        ("known capacity",),
        never=True,
    )
    assert choose(unknown, ShareLedger().use("node-b"), ShareRequest(0, GiB), PACK) == (0,)


def test_whole_and_shared_pods_never_meet_on_a_device() -> None:
    ledger = _ledger(((0,), 10_000, GiB))
    use = ledger.use("node-a")
    assert whole_refusal(TWO, use, 1) is None
    assert whole_refusal(TWO, use, 2) == (
        "node-a: 1 of 2 GPU(s) shared by tensor-fusion pods, 0 held whole, 2 asked whole"
    )
    ledger.reserve_whole("ns/w", "node-a", 1)
    # the one device left for shares is the one they use: a second device is never opened
    assert choose(TWO, ledger.use("node-a"), ShareRequest(95_000, 0), PACK) == Refusal(
        ("gpu-0 on node-a: 90 TFLOPS left, 95 asked", "1 GPU(s) on node-a held by whole-GPU pods"),
        ("TFLOPS", "GPUs"),
    )
    assert ledger.release("ns/w") and ledger.release("ns/s0")
    assert ledger.use("node-a").shared == 0 and ledger.use("node-a").whole == 0
    assert not ledger.release("ns/s0")
    assert ledger.recent("ns/s0") == Share("node-a", (0,), 10_000, GiB)


def test_ledger_refuses_a_second_reservation_of_one_pod() -> None:
    ledger = _ledger(((0,), 10_000, GiB))
    with pytest.raises(ValueError, match="reserved already"):
        ledger.reserve_share("ns/s0", Share("node-a", (1,), 1, 1))


def test_node_gpus_from_labels_and_specs() -> None:
    node = (
        MakeNode("a100")
        .product("NVIDIA-A100")
        .label("nvidia.com/gpu.memory", "81920")
        .alloc(cpu="8")
        .gpus(4)
        .info()
    )
    gpus = node_gpus(node)
    assert gpus == NodeGPUs("a100", "nvidia.com/gpu", "NVIDIA-A100", 4, gpus.tflops if gpus else 0, 80 * GiB)
    assert gpus is not None and gpus.tflops is not None and gpus.tflops > 0  # from gpu_specs
    labelled = MakeNode("x").product("NVIDIA-A100").label("nvidia.com/gpu.tflops", "100").gpus(1).info()
    assert (g := node_gpus(labelled)) is not None and g.tflops == 100_000 and g.vram is None
    assert node_gpus(MakeNode("cpu").alloc(cpu="8").info()) is None


TF = {"tensor-fusion.ai/tflops-request": "50", "tensor-fusion.ai/vram-request": "10Gi"}


def test_share_request_is_the_annotated_pod_without_a_gpu_resource() -> None:
    assert share_request(MakePod().name("p").req(cpu="1").annotations(TF).info()) == ShareRequest(
        50_000, 10 * GiB, 1
    )
    # a pod asking cards whole is a whole-card pod (charged by its annotations, Semantics 5)
    assert share_request(MakePod().name("p").gpus(1).annotations(TF).info()) is None
    assert share_request(MakePod().name("p").req(cpu="1").info()) is None


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        (
            {"tensor-fusion.ai/tflops-request": "fifty"},
            "Pod/ns/bad: tensor-fusion.ai/tflops-request: invalid value 'fifty': expected a Kubernetes "
            "quantity such as 20, 500m or 16Gi",
        ),
        (
            {"tensor-fusion.ai/gpu-count": "0"},
            "Pod/ns/bad: tensor-fusion.ai/gpu-count: invalid value '0': expected a whole number of GPUs",
        ),
    ],
)
def test_bad_annotation_names_pod_annotation_value_and_expectation(
    annotations: dict[str, str], message: str
) -> None:
    pod = MakePod().name("bad").req(cpu="1").annotations(annotations).info()
    with pytest.raises(InvalidAnnotation) as err:
        share_request(pod)
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("node-a-gpu-1", (1,)),
        ("node-a-gpu-1,node-a-gpu-0", (0, 1)),
        ("node-a-gpu-2", None),  # no such device
        ("node-b-gpu-0", None),  # another node's
        ("node-a-gpu-0,node-a-gpu-0", None),  # twice
        ("gpu-0", None),
    ],
)
def test_gpu_ids_read_back(value: str, expected: tuple[int, ...] | None) -> None:
    count = len(value.split(","))
    pod = MakePod().name("p").annotation("tensor-fusion.ai/gpu-ids", value).info()
    if expected is not None:
        assert read_gpu_ids(pod, TWO, count) == expected
        return
    with pytest.raises(InvalidAnnotation) as err:
        read_gpu_ids(pod, TWO, count)
    assert str(err.value) == (
        f"Pod/ns/p: tensor-fusion.ai/gpu-ids: invalid value '{value}': expected {count} distinct GPU id(s) "
        "of node node-a, comma-separated, each node-a-gpu-<index> with index below 2"
    )


def test_a_running_pod_without_room_is_counted_on_the_least_used_devices() -> None:
    ledger = _ledger(((0,), 90_000, GiB))
    assert least_used(TWO, ledger.use("node-a"), 1) == (1,)
    assert least_used(TWO, ledger.use("node-a"), 2) == (0, 1)
