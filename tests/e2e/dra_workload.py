"""A DRA workload for the checker's e2e tests (tests/e2e/test_dra_checker.py): fake nodes whose
ResourceSlices stand in for an NVIDIA-style driver, and pods that use every allocation feature.

Per run (a name prefix, so two schedulers can each get their own copy side by side):

* two nodes with two whole GPUs each (``NVIDIA H100`` 80Gi and ``NVIDIA A100`` 40Gi);
* one node with a MIG-partitioned GPU: a counter set of 7 slices and 80Gi, consumed by seven 1g.10gb
  and two 3g.40gb partitions (the pool's counters in a slice of their own);
* one node with a shared GPU (``allowMultipleAllocations``, 80Gi of memory capacity).

Pods, each from a ResourceClaimTemplate (kube-controller-manager makes the claims) but for the two
pods sharing one ResourceClaim: 3 wanting an H100 by selector, 3 ``firstAvailable`` [H100, A100],
8 wanting a 1g partition and 2 a 3g one (14 slices asked of 7), 5 wanting 20Gi of the shared GPU
(100Gi asked of 80Gi), 2 sharing a claim for an A100, and 2 asking ``<run>.example.com/gpu: 1``, an
extended resource no node's allocatable has and a DeviceClass of whole GPUs names
(``extendedResourceName``: the scheduler makes each its implicit claim). More is asked than exists,
so a run ends with pods pending, and every rule the checker knows is exercised.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.testing import dra

RUN_LABEL = "dra.e2e.gpuq.example.com/run"
DRA = "/apis/resource.k8s.io/v1"

TEMPLATES: Mapping[str, int] = {"h100": 3, "any": 3, "mig1g": 8, "mig3g": 2, "share20": 5}
SHARED_CLAIM_PODS = 2
EXTENDED_RESOURCE_PODS = 2  # asking the extended resource of the run's "ext" DeviceClass
POD_COUNT = sum(TEMPLATES.values()) + SHARED_CLAIM_PODS + EXTENDED_RESOURCE_PODS


@dataclass
class Workload:
    run: str  # unique per run: prefixes every cluster-scoped object
    namespace: str
    scheduler: str
    driver: str = field(init=False)

    def __post_init__(self) -> None:
        self.driver = f"{self.run}.gpu.example.com"

    def _attr(self, name: str) -> str:
        return f'device.attributes["{self.driver}"].{name}'

    def classes(self) -> list[dict[str, Any]]:
        return [
            *(
                dra.device_class(f"{self.run}-{kind}", self.driver, f'{self._attr("type")} == "{kind}"')
                for kind in ("gpu", "mig", "shared")
            ),
            self.extended_class(),
        ]

    # -- extended resources backed by DRA (DRAExtendedResource) ---------------------------------------
    @property
    def extended_resource(self) -> str:
        return f"{self.run}.example.com/gpu"

    def extended_class(self) -> dict[str, Any]:
        """Whole GPUs, serving pods that ask :attr:`extended_resource`."""
        return dra.device_class(
            f"{self.run}-ext",
            self.driver,
            f'{self._attr("type")} == "gpu"',
            extended_resource_name=self.extended_resource,
        )

    def extended_pods(self, body: Any) -> list[dict[str, Any]]:
        """Pods asking one :attr:`extended_resource` (request = limit, as the API wants of an
        extended resource), no claim."""
        out = []
        for i in range(EXTENDED_RESOURCE_PODS):
            pod = body(f"{self.run}-ext-{i}")
            resources = pod["spec"]["containers"][0].setdefault("resources", {})
            resources.setdefault("requests", {})[self.extended_resource] = "1"
            resources.setdefault("limits", {})[self.extended_resource] = "1"
            pod["spec"]["nodeSelector"][RUN_LABEL] = self.run
            out.append(pod)
        return out

    def node_names(self) -> dict[str, str]:
        return {"whole-0": "", "whole-1": "", "mig-0": "", "shared-0": ""}

    def slices(self, nodes: Mapping[str, str]) -> list[dict[str, Any]]:
        """``nodes``: the role -> the node's full name."""
        out = []
        for role in ("whole-0", "whole-1"):
            gpus = [
                dra.device("gpu-0", {"type": "gpu", "productName": "NVIDIA H100"}, {"memory": "80Gi"}),
                dra.device("gpu-1", {"type": "gpu", "productName": "NVIDIA A100"}, {"memory": "40Gi"}),
            ]
            out.append(dra.resource_slice(f"{nodes[role]}-gpus", nodes[role], gpus, self.driver))
        node = nodes["mig-0"]
        pool = {"name": node, "generation": 1, "resourceSliceCount": 2}
        counters = dra.resource_slice(f"{node}-counters", node, [], self.driver)
        del counters["spec"]["devices"]
        counters["spec"]["pool"] = pool
        counters["spec"]["sharedCounters"] = [
            {"name": "gpu-0", "counters": {"slices": {"value": "7"}, "memory": {"value": "80Gi"}}}
        ]
        partitions = []
        for profile, slices, memory, count in (("1g.10gb", "1", "10Gi", 7), ("3g.40gb", "3", "40Gi", 2)):
            for i in range(count):
                partitions.append(
                    dra.device(
                        f"mig-{profile.split('.')[0]}-{i}",
                        {"type": "mig", "productName": "NVIDIA H100", "profile": profile},
                        {"memory": memory},
                        consumesCounters=[
                            {
                                "counterSet": "gpu-0",
                                "counters": {"slices": {"value": slices}, "memory": {"value": memory}},
                            }
                        ],
                    )
                )
        devices = dra.resource_slice(f"{node}-partitions", node, partitions, self.driver)
        devices["spec"]["pool"] = pool
        out += [counters, devices]
        node = nodes["shared-0"]
        shared = dra.device(
            "shared-0",
            {"type": "shared", "productName": "NVIDIA H100"},
            {"memory": "80Gi"},
            allowMultipleAllocations=True,
        )
        out.append(dra.resource_slice(f"{node}-shared", node, [shared], self.driver))
        return out

    def templates(self) -> list[dict[str, Any]]:
        gpu, mig, shared = (f"{self.run}-{k}" for k in ("gpu", "mig", "shared"))
        h100 = f'{self._attr("productName")} == "NVIDIA H100"'
        a100 = f'{self._attr("productName")} == "NVIDIA A100"'
        specs = {
            "h100": dra.exactly("gpu", gpu, selector=h100),
            "any": dra.first_available(
                "gpu",
                dra.exactly("h100", gpu, selector=h100)["exactly"] | {"name": "h100"},
                dra.exactly("a100", gpu, selector=a100)["exactly"] | {"name": "a100"},
            ),
            "mig1g": dra.exactly("part", mig, selector=f'{self._attr("profile")} == "1g.10gb"'),
            "mig3g": dra.exactly("part", mig, selector=f'{self._attr("profile")} == "3g.40gb"'),
            "share20": dra.exactly("mem", shared, capacity={"requests": {"memory": "20Gi"}}),
        }
        return [
            dra.claim_template(f"{self.run}-{name}", self.namespace, spec) for name, spec in specs.items()
        ]

    def shared_claim(self) -> dict[str, Any]:
        a100 = f'{self._attr("productName")} == "NVIDIA A100"'
        return dra.claim(
            f"{self.run}-team", self.namespace, dra.exactly("gpu", f"{self.run}-gpu", selector=a100)
        )

    def pods(self, body: Any) -> list[dict[str, Any]]:
        """Every pod, made by ``body(name)`` (a pod of the test's scheduler) and given its claims and
        the run's node selector."""
        out = []
        for template, count in TEMPLATES.items():
            for i in range(count):
                pod = dra.use_claims(
                    body(f"{self.run}-{template}-{i}"), templates=(f"{self.run}-{template}",)
                )
                pod["spec"]["nodeSelector"][RUN_LABEL] = self.run
                out.append(pod)
        for i in range(SHARED_CLAIM_PODS):
            pod = dra.use_claims(body(f"{self.run}-team-{i}"), f"{self.run}-team")
            pod["spec"]["nodeSelector"][RUN_LABEL] = self.run
            out.append(pod)
        out += self.extended_pods(body)
        return out


# -- tensor-fusion pods (design.md Semantics 19) ------------------------------------------------------
# Pods with tensor-fusion's requests and no GPU resource, placed by gpuq's GPUShare on one GPU of a node
# whose device plugin publishes whole cards: two A100s of 312 TFLOPS and 80Gi. Six pods of 100 TFLOPS
# and 30Gi: the devices hold four (two per GPU, by VRAM). A gpuq feature: kube-scheduler has no such
# placement (it would bind them as CPU pods), so its run leaves them out.
TF_PODS = 6
TF_SHARE: Mapping[str, str] = {
    "tensor-fusion.ai/tflops-request": "100",
    "tensor-fusion.ai/vram-request": "30Gi",
}
TF_NODE: Mapping[str, str] = {"cpu": "8", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "2"}
TF_LABELS: Mapping[str, str] = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.memory": "81920",
    "nvidia.com/gpu.tflops": "312",
}
TF_ROLE = "tf-0"


def tf_pods(workload: Workload, body: Any) -> list[dict[str, Any]]:
    """The tensor-fusion pods, made by ``body(name)`` and given the annotations and the run's node
    selector."""
    out = []
    for i in range(TF_PODS):
        pod = body(f"{workload.run}-tf-{i}")
        pod["metadata"].setdefault("annotations", {}).update(TF_SHARE)
        pod["spec"].setdefault("nodeSelector", {})[RUN_LABEL] = workload.run
        out.append(pod)
    return out
