"""Whether a shared-GPU pod could ever be placed (common/model/gpu_share/admission.py): the webhook's
rule over tensor-fusion pods (design.md Semantics 10, 19)."""

from __future__ import annotations

import pytest

from gpuq_k8s.common.model.gpu_share.admission import never_placed
from gpuq_k8s.common.model.gpu_share.devices import NodeGPUs
from gpuq_k8s.common.model.gpu_share.request import ShareRequest

GIB = 2**30
A100 = NodeGPUs("a", "nvidia.com/gpu", "NVIDIA-A100", 2, 312_000, 80 * GIB)
UNKNOWN = NodeGPUs("u", "nvidia.com/gpu", "ACME-X1", 4, None, None)


@pytest.mark.parametrize(
    ("request_", "nodes", "expected"),
    [
        pytest.param(
            ShareRequest(312_000, 80 * GIB, 2), [A100], None, id="exactly a whole idle node: placeable"
        ),
        pytest.param(
            ShareRequest(312_001, 0),
            [A100],
            "no shareable GPU in the cluster can ever hold it "
            "(the cluster has 1 node(s) with 2 NVIDIA-A100 of 312 TFLOPS and 80Gi VRAM)",
            id="TFLOPS over the card",
        ),
        pytest.param(ShareRequest(1_000, GIB, 3), [A100], "no shareable GPU", id="more GPUs than a node has"),
        pytest.param(
            ShareRequest(0, GIB, 3),
            [A100, UNKNOWN],
            "unknown TFLOPS and unknown VRAM",
            id="unknown VRAM holds no VRAM asked",
        ),
        pytest.param(ShareRequest(0, 0, 3), [A100, UNKNOWN], None, id="nothing asked of an unknown amount"),
        pytest.param(ShareRequest(10**9, 10**15, 99), [], None, id="no shareable GPU at all: no verdict"),
    ],
)
def test_never_placed(request_: ShareRequest, nodes: list[NodeGPUs], expected: str | None) -> None:
    found = never_placed(request_, nodes)
    if expected is None:
        assert found is None
    else:
        assert found is not None and expected in found
