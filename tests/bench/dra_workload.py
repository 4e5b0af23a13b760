"""The DRA benchmarks' workload (tests/bench/bench_dra_cycle.py in memory, tests/bench/bench_side_by_side.py
``--dra`` on the real control plane): one DeviceClass, a ResourceSlice of ``devices`` GPUs per node (even
nodes H100s, odd nodes A100s, as NVIDIA's driver publishes them: ``productName`` and ``type``
attributes, memory capacity), and three claim shapes, the pods taking them in turn (pod ``i`` the
shape ``SHAPES[i % 3]``):

* ``h100``: one exact request by the DeviceClass and a CEL selector (``productName`` contains H100);
* ``a100x2``: two devices of one request (count 2), selected the same way for A100;
* ``either``: ``firstAvailable`` [an H100, an A100].

Demand per 3 pods: 1-2 H100s and 2-3 A100s; 5,000 pods need about 6,700 of the 8,000 GPUs of 1,000
nodes x 8 (the A100 requests at most 3,400 of the 4,000 A100s). Importing this module does nothing.
"""

from __future__ import annotations

from typing import Any, Final

DRIVER: Final = "gpu.nvidia.com"
API: Final = "resource.k8s.io/v1"
CLASS_NAME: Final = DRIVER
TYPE_GPU: Final = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu"'
H100: Final = f'device.attributes["{DRIVER}"].productName.contains("H100")'
A100: Final = f'device.attributes["{DRIVER}"].productName.contains("A100")'
SHAPES: Final = ("h100", "a100x2", "either")


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "DeviceClass",
        "metadata": {"name": CLASS_NAME},
        "spec": {"selectors": [{"cel": {"expression": TYPE_GPU}}]},
    }


def resource_slice(node_name: str, i: int, devices: int) -> dict[str, Any]:
    """Node ``i``'s GPUs (H100s on even nodes, A100s on odd ones), one slice of its own pool."""
    product = "NVIDIA H100 80GB HBM3" if i % 2 == 0 else "NVIDIA A100-SXM4-80GB"
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{d}",
                    "attributes": {"type": {"string": "gpu"}, "productName": {"string": product}},
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for d in range(devices)
            ],
        },
    }


def _exactly(selector: str, count: int = 1) -> dict[str, Any]:
    return {"deviceClassName": CLASS_NAME, "count": count, "selectors": [{"cel": {"expression": selector}}]}


def claim_spec(shape: str) -> dict[str, Any]:
    """The ``spec`` of a claim of ``shape`` (one of :data:`SHAPES`), its one request named ``gpu``."""
    if shape == "h100":
        request: dict[str, Any] = {"name": "gpu", "exactly": _exactly(H100)}
    elif shape == "a100x2":
        request = {"name": "gpu", "exactly": _exactly(A100, 2)}
    elif shape == "either":
        request = {
            "name": "gpu",
            "firstAvailable": [{"name": "h100", **_exactly(H100)}, {"name": "a100", **_exactly(A100)}],
        }
    else:
        raise ValueError(f"claim shape {shape!r}: expected one of {', '.join(SHAPES)}")
    return {"devices": {"requests": [request]}}


def shape_of(i: int) -> str:
    return SHAPES[i % len(SHAPES)]


def claim_template(shape: str, namespace: str) -> dict[str, Any]:
    """The ResourceClaimTemplate ``gpu-<shape>``."""
    return {
        "apiVersion": API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"gpu-{shape}", "namespace": namespace},
        "spec": {"spec": claim_spec(shape)},
    }


def use_template(pod: dict[str, Any], shape: str) -> dict[str, Any]:
    """``pod`` (an API object) with one claim entry ``gpu`` from the template of ``shape``, its
    containers asking for it."""
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": f"gpu-{shape}"}]
    for container in pod["spec"]["containers"]:
        container.setdefault("resources", {})["claims"] = [{"name": "gpu"}]
    return pod


def generated_claim(pod_name: str, pod_uid: str, namespace: str, shape: str) -> dict[str, Any]:
    """The claim kube-controller-manager's resource-claim-controller makes for the pod from its template
    (owned by the pod; the in-memory benchmark stands in for the controller)."""
    return {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"{pod_name}-gpu",
            "namespace": namespace,
            "uid": f"claim-{pod_uid}",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid, "controller": True}
            ],
        },
        "spec": claim_spec(shape),
    }
