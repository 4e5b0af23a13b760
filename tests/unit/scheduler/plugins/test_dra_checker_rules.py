"""The DRA checker of the e2e tests (tests/e2e/dra_checker.py) can fail: each rule it knows, broken on
purpose in objects made here, is reported; a clean allocation is not."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.e2e.dra_checker import (
    CARD_QUOTA,
    EXTENDED_ANNOTATION,
    QUEUE_NAME,
    TF_GPU_IDS,
    extended_violations,
    gpu_quota_violations,
    gpu_share_violations,
    quota_violations,
    violations,
)
from tests.testing import dra

D = dra.DRIVER
CLASS = dra.device_class("gpu", D)
SHARED_CLASS = dra.device_class("shared", D)
SLICE = dra.resource_slice(
    "n1", "n1", [dra.device("gpu-0", {"model": "h100"}), dra.device("gpu-1", {"model": "a100"})]
)
SHARED = dra.resource_slice(
    "n2", "n2", [dra.device("s-0", {"model": "h100"}, {"memory": "80Gi"}, allowMultipleAllocations=True)]
)
PARTS = dra.resource_slice(
    "n3",
    "n3",
    [
        dra.device(
            f"p-{i}",
            consumesCounters=[{"counterSet": "c", "counters": {"slices": {"value": "3"}}}],
        )
        for i in range(3)
    ],
    sharedCounters=[{"name": "c", "counters": {"slices": {"value": "7"}}}],
)
H100 = f'device.attributes["{D}"].model == "h100"'


def allocated(
    name: str, request: dict[str, Any], node: str, *results: dict[str, Any], pod: str = ""
) -> dict[str, Any]:
    claim = dra.claim(name, "ns", request, uid=f"u-{name}")
    status: dict[str, Any] = {
        "allocation": {
            "devices": {"results": [{"request": request["name"], "driver": D, **r} for r in results]},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }
    if pod:
        status["reservedFor"] = [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}]
    claim["status"] = status
    return claim


def bound_pod(name: str, claim: str, node: str) -> dict[str, Any]:
    body = dra.use_claims(
        {
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "c"}]},
        },
        claim,
    )
    body["spec"]["nodeName"] = node
    return body


def check(claims: list[dict[str, Any]], pods: list[dict[str, Any]] = ()) -> list[str]:  # type: ignore[assignment]
    return violations([SLICE, SHARED, PARTS], [CLASS, SHARED_CLASS], claims, list(pods))


def test_a_clean_allocation_passes() -> None:
    claims = [
        allocated(
            "a", dra.exactly("gpu", "gpu", selector=H100), "n1", {"pool": "n1", "device": "gpu-0"}, pod="p"
        ),
        allocated(
            "b",
            dra.exactly("m", "shared", capacity={"requests": {"memory": "40Gi"}}),
            "n2",
            {"pool": "n2", "device": "s-0", "shareID": "x", "consumedCapacity": {"memory": "40Gi"}},
        ),
        allocated(
            "c",
            dra.exactly("m", "shared", capacity={"requests": {"memory": "40Gi"}}),
            "n2",
            {"pool": "n2", "device": "s-0", "shareID": "y", "consumedCapacity": {"memory": "40Gi"}},
        ),
    ]
    assert check(claims, [bound_pod("p", "a", "n1")]) == []


def test_each_broken_rule_is_reported() -> None:
    twice = [
        allocated("a", dra.exactly("gpu", "gpu"), "n1", {"pool": "n1", "device": "gpu-0"}),
        allocated("b", dra.exactly("gpu", "gpu"), "n1", {"pool": "n1", "device": "gpu-0"}),
    ]
    assert any("allocated 2 times" in p for p in check(twice))
    selector = [
        allocated("a", dra.exactly("gpu", "gpu", selector=H100), "n1", {"pool": "n1", "device": "gpu-1"})
    ]
    assert any("does not satisfy request gpu" in p for p in check(selector))
    share = {"pool": "n2", "device": "s-0", "consumedCapacity": {"memory": "50Gi"}}
    over = [
        allocated("a", dra.exactly("m", "shared"), "n2", share | {"shareID": "1"}),
        allocated("b", dra.exactly("m", "shared"), "n2", share | {"shareID": "2"}),
    ]
    assert any("memory over capacity" in p for p in check(over))
    counters = [
        allocated(f"c{i}", dra.exactly("p", "gpu"), "n3", {"pool": "n3", "device": f"p-{i}"})
        for i in range(3)
    ]
    assert any("counter c/slices over" in p for p in check(counters))
    claim = allocated("a", dra.exactly("gpu", "gpu"), "n1", {"pool": "n1", "device": "gpu-0"}, pod="p")
    elsewhere = check([claim], [bound_pod("p", "a", "n9")])
    assert any("allocated for another node" in p for p in elsewhere)
    unreserved = copy.deepcopy(claim)
    del unreserved["status"]["reservedFor"]
    assert any("not reserved for it" in p for p in check([unreserved], [bound_pod("p", "a", "n1")]))
    count = [allocated("a", dra.exactly("gpu", "gpu", count=2), "n1", {"pool": "n1", "device": "gpu-0"})]
    assert any("request gpu got 1" in p for p in check(count))


def test_the_quota_recount_reports_a_queue_or_namespace_over_its_quota() -> None:
    """quota_violations: two claims of H100 devices reserved for pods of queue q (a whole GPU and a
    40Gi share of an 80Gi one: 1.5 cards, 120Gi) against card quotas and a VRAM total."""
    named = dra.resource_slice(
        "n4",
        "n4",
        [
            dra.device("g-0", {"productName": "NVIDIA H100"}, {"memory": "80Gi"}),
            dra.device(
                "s-0", {"productName": "NVIDIA H100"}, {"memory": "80Gi"}, allowMultipleAllocations=True
            ),
        ],
    )
    whole = allocated("w", dra.exactly("gpu", "gpu"), "n4", {"pool": "n4", "device": "g-0"}, pod="a")
    share = allocated(
        "s",
        dra.exactly("mem", "gpu"),
        "n4",
        {"pool": "n4", "device": "s-0", "shareID": "x", "consumedCapacity": {"memory": "40Gi"}},
        pod="b",
    )
    pods = []
    for name, claim in (("a", "w"), ("b", "s")):
        pod = bound_pod(name, claim, "n4")
        pod["metadata"].setdefault("annotations", {})[QUEUE_NAME] = "q"
        pods.append(pod)

    def queue(cards: float) -> dict[str, Any]:
        return {"metadata": {"name": "q", "annotations": {CARD_QUOTA: json.dumps({"NVIDIA-H100": cards})}}}

    def vram(limit: str) -> dict[str, Any]:
        return {"metadata": {"namespace": "ns"}, "spec": {"total": {"requests": {"vram": limit}}}}

    claims = [whole, share]
    assert quota_violations([named], claims, pods, [queue(2)], [vram("120Gi")]) == []
    assert quota_violations([named], claims, pods, [queue(1)], [vram("100Gi")]) == [
        "Queue/q: NVIDIA-H100 1.5 cards allocated, quota 1",
        f"GPUResourceQuota/ns: vram {120.0 * 2**30} over 100Gi",
    ]


def test_the_extended_resource_rules_hold_and_each_broken_one_is_reported() -> None:
    ext_class = dra.device_class("ext", D, extended_resource_name="example.com/gpu")
    request = dra.exactly("container-0-request-0", "ext")
    claim = allocated("p-ext", request, "n1", {"pool": "n1", "device": "gpu-0"}, pod="p")
    claim["metadata"]["annotations"] = {EXTENDED_ANNOTATION: "true"}
    claim["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": "p", "uid": "uid-p", "controller": True}]
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "resources": {"requests": {"example.com/gpu": "1"}}}],
        },
        "status": {
            "extendedResourceClaimStatus": {
                "resourceClaimName": "p-ext",
                "requestMappings": [
                    {
                        "containerName": "c",
                        "resourceName": "example.com/gpu",
                        "requestName": "container-0-request-0",
                    }
                ],
            }
        },
    }
    assert extended_violations([ext_class], [claim], [pod]) == []
    asks_two = copy.deepcopy(pod)
    asks_two["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu"] = "2"
    assert extended_violations([ext_class], [claim], [asks_two]) == [
        "Pod/ns/p: 2 example.com/gpu asked, ResourceClaim/ns/p-ext holds 1"
    ]
    no_status = copy.deepcopy(pod)
    del no_status["status"]
    assert "without extendedResourceClaimStatus" in extended_violations([ext_class], [claim], [no_status])[0]
    elsewhere = copy.deepcopy(pod)
    elsewhere["spec"]["nodeName"] = "n2"
    assert extended_violations([ext_class], [claim], [elsewhere]) == [
        "Pod/ns/p bound to n2, ResourceClaim/ns/p-ext allocated for another node"
    ]
    foreign = copy.deepcopy(claim)
    foreign["metadata"]["ownerReferences"][0]["uid"] = "other"
    del foreign["metadata"]["annotations"]
    assert extended_violations([ext_class], [foreign], [pod]) == [
        f"ResourceClaim/ns/p-ext: no {EXTENDED_ANNOTATION} annotation",
        "ResourceClaim/ns/p-ext: not controlled by Pod/ns/p",
    ]
    # a resource no class names is not the checker's (the device plugin's)
    assert extended_violations([CLASS], [], [no_status]) == []


TF_NODE = {
    "metadata": {
        "name": "n5",
        "labels": {"nvidia.com/gpu.tflops": "312", "nvidia.com/gpu.memory": "81920"},
    },
    "status": {"allocatable": {"nvidia.com/gpu": "2"}},
}


def tf_pod(name: str, ids: str, tflops: str = "100", vram: str = "30Gi", node: str = "n5") -> dict[str, Any]:
    annotations = {"tensor-fusion.ai/tflops-request": tflops, "tensor-fusion.ai/vram-request": vram}
    if ids:
        annotations[TF_GPU_IDS] = ids
    return {
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
        "spec": {"containers": [{"name": "c"}], "nodeName": node},
    }


def test_the_gpu_share_recount_reports_an_over_shared_gpu_and_bad_gpu_ids() -> None:
    """gpu_share_violations: per GPU of a node (2 cards of 312 TFLOPS, 80Gi), the tensor-fusion pods'
    requests named by their gpu-ids; a pod without gpu-ids, or naming another node's GPU, is reported."""
    clean = [tf_pod("a", "n5-gpu-0"), tf_pod("b", "n5-gpu-0", vram="50Gi"), tf_pod("c", "n5-gpu-1")]
    assert gpu_share_violations([TF_NODE], clean) == []
    over_vram = [*clean, tf_pod("d", "n5-gpu-0", vram="1Gi")]
    assert gpu_share_violations([TF_NODE], over_vram) == [
        f"n5-gpu-0: VRAM {81.0 * 2**30} shared, the card has {80.0 * 2**30}"
    ]
    over_tflops = [tf_pod(f"t{i}", "n5-gpu-1", vram="1Gi") for i in range(4)]
    assert gpu_share_violations([TF_NODE], over_tflops) == [
        "n5-gpu-1: TFLOPS 400.0 shared, the card has 312.0"
    ]
    wrong = [tf_pod("x", ""), tf_pod("y", "n6-gpu-0"), tf_pod("z", "n5-gpu-2")]
    problems = gpu_share_violations([TF_NODE], wrong)
    assert problems == [
        "Pod/ns/x: gpu-ids [], 1 distinct GPU(s) asked",
        "Pod/ns/y: n6-gpu-0 is not a GPU of its node n5 (2 GPU(s))",
        "Pod/ns/z: n5-gpu-2 is not a GPU of its node n5 (2 GPU(s))",
    ]
    pending = tf_pod("p", "", node="")
    assert gpu_share_violations([TF_NODE], [pending]) == []  # not bound: holds nothing


def test_the_gpu_resource_quota_recount_counts_claims_once_tensor_fusion_pods_and_workers() -> None:
    """gpu_quota_violations: an A100 claim (312 TFLOPS, 40Gi) shared by two pods counts its device once
    and two workers; a tensor-fusion pod adds its requests and a worker."""
    a100 = dra.resource_slice(
        "n7", "n7", [dra.device("g-0", {"productName": "NVIDIA A100"}, {"memory": "40Gi"})]
    )
    claim = allocated("t", dra.exactly("gpu", "gpu"), "n7", {"pool": "n7", "device": "g-0"}, pod="a")
    pods = [bound_pod("a", "t", "n7"), bound_pod("b", "t", "n7"), tf_pod("c", "n5-gpu-0")]
    tflops = {"NVIDIA A100": 312.0}

    def quota(tflops_limit: str, vram: str, workers: int) -> dict[str, Any]:
        total = {"requests": {"tflops": tflops_limit, "vram": vram}, "maxWorkers": workers}
        return {"metadata": {"namespace": "ns"}, "spec": {"total": total}}

    assert gpu_quota_violations([a100], [claim], pods, [quota("412", "70Gi", 3)], tflops) == []
    assert gpu_quota_violations([a100], [claim], pods, [quota("411", "69Gi", 2)], tflops) == [
        "GPUResourceQuota/ns: tflops 412.0 over 411",
        f"GPUResourceQuota/ns: vram {70.0 * 2**30} over 69Gi",
        "GPUResourceQuota/ns: maxWorkers 3.0 over 2",
    ]
