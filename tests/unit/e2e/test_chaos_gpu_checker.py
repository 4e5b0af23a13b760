"""The chaos soak's checker on shared GPUs (tests/e2e/chaos/invariants.py; design.md Semantics 19): it
catches a device asked beyond its card, and knows a tensor-fusion pod fits only where it can share a
GPU, beside the whole-GPU pods."""

from __future__ import annotations

from typing import Any

from tests.e2e.chaos import invariants as inv
from tests.e2e.chaos import workload as w
from tests.testing.builders import MakeNode, MakePod

GPU_NODE = inv.node_view(
    MakeNode("g").labels(dict(w.GPU_LABELS)).obj() | {"status": {"allocatable": dict(w.GPU_NODE)}}
)
CPU_NODE = inv.node_view(
    MakeNode("c").labels(dict(w.CPU_LABELS)).obj() | {"status": {"allocatable": dict(w.CPU_NODE)}}
)
NODES = {"g": GPU_NODE, "c": CPU_NODE}


def _tf(name: str, tflops: int, node: str = "", gpu_ids: str = "") -> inv.PodView:
    a = {
        f"{inv.TF}{k}-{kind}": v
        for k, v in (("tflops", str(tflops)), ("vram", "10Gi"))
        for kind in ("request", "limit")
    }
    if gpu_ids:
        a[inv.GPU_IDS] = gpu_ids
    obj: dict[str, Any] = MakePod(name, w.NAMESPACES["gq"]).req(cpu="500m").annotations(a).obj()
    if node:
        obj["spec"]["nodeName"] = node
    view = inv.pod_view(obj)
    assert view is not None
    return view


def test_a_device_asked_beyond_its_card_is_a_violation() -> None:
    pods = [_tf("a", 200, "g", "g-gpu-0"), _tf("b", 150, "g", "g-gpu-0")]
    over = inv.over_limits(inv.recount(pods, NODES))
    assert "GPU g-gpu-0: tflops recount 350 > capacity 312" in over, over


def test_a_tensor_fusion_pod_fits_only_where_a_gpu_has_its_share_left() -> None:
    assert inv.placeable(_tf("p", 50), inv.recount([], NODES), NODES) == "g"
    # every device of g carries 300 TFLOPS: none has 50 left, and the CPU node shares no GPU
    full = [_tf(f"f{i}", 300, "g", f"g-gpu-{i}") for i in range(4)]
    assert inv.placeable(_tf("p", 50), inv.recount(full, NODES), NODES) is None
    # a whole-GPU pod takes the cards the shares leave, no more
    whole = inv.pod_view(MakePod("card", "ns").req(cpu="1").gpus(1).obj())
    assert whole is not None
    assert inv.placeable(whole, inv.recount(full[:3], NODES), NODES) == "g"
    assert inv.placeable(whole, inv.recount(full, NODES), NODES) is None
