"""The pods of the webhook-scope tests: those gpuq governs (its schedulerName, its annotations, GPU
requests when the webhook sets the schedulerName) and those it leaves alone, by variant, and each as
the body of a create in a namespace."""

from __future__ import annotations

from typing import Any

import yaml

from gpuq_k8s.common.model.annotations import (
    CARD_NAME,
    GROUP_NAME,
    QUEUE_NAME,
    RESOURCE_STRATEGY_WEIGHT,
    TF_GPU_COUNT,
)
from gpuq_k8s.common.model.pods import GPUQ_SCHEDULER
from tests.testing.builders import MakePod


def plain_pods(set_scheduler_name: bool) -> dict[str, MakePod]:
    """Pods gpuq does not govern, by variant (a GPU request too, unless the schedulerName mutation is on)."""
    variants = {
        "no-scheduler": MakePod().scheduler(None).req(cpu="10m"),
        "default-scheduler": MakePod().scheduler("default-scheduler").req(cpu="10m"),
        "other-annotation": MakePod().scheduler(None).annotations({"example.com/team": "a"}),
        "other-scheduler": MakePod().scheduler("volcano"),
    }
    if not set_scheduler_name:
        variants["gpu-not-mutated"] = MakePod().scheduler(None).gpus(1)
    return variants


def governed_pods(set_scheduler_name: bool) -> dict[str, MakePod]:
    """Pods gpuq governs, by variant (GPU requests too when the schedulerName mutation is on)."""
    variants = {
        "gpuq-scheduler": MakePod().scheduler(GPUQ_SCHEDULER).req(cpu="10m"),
        "card-name": MakePod().scheduler(None).annotations({CARD_NAME: "NVIDIA-A100"}),
        "group": MakePod().scheduler(None).annotations({GROUP_NAME: "pg"}),
        "queue": MakePod().scheduler("default-scheduler").annotations({QUEUE_NAME: "q"}),
        "tensor-fusion": MakePod().scheduler(None).annotations({TF_GPU_COUNT: "1"}),
        "strategy": MakePod().scheduler(None).annotations({RESOURCE_STRATEGY_WEIGHT: "1"}),
    }
    if set_scheduler_name:
        variants["gpu-mutated"] = MakePod().scheduler(None).gpus(1)
        variants["mig-limit"] = MakePod().scheduler(None).lim({"nvidia.com/mig-1g.5gb": 1})
    return variants


def pod_body(pod: MakePod, namespace: str, variant: str) -> dict[str, Any]:
    """``pod`` as created in ``namespace`` under a generated name starting with ``variant``."""
    obj = pod.image("registry.k8s.io/pause:3.10").spec(automountServiceAccountToken=False).obj()
    obj = yaml.safe_load(yaml.safe_dump(obj))  # a copy per namespace
    obj["metadata"] = {**obj["metadata"], "namespace": namespace, "generateName": f"{variant}-"}
    obj["metadata"].pop("name", None)
    return dict(obj)
