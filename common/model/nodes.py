"""Nodes as the quota model sees them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuq_k8s.common.model import kinds, wire
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.placement.image_locality import node_images
from gpuq_k8s.common.model.resources import EMPTY, Resources


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """The fields of a Node gpuq decides on, parsed once from the API object.

    ``allocatable`` falls back to ``capacity`` for resources the kubelet has not reported as
    allocatable yet, as kube-scheduler's NodeInfo does.
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    allocatable: Resources = EMPTY
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    # ``status.images``: every name an image goes by -> its size in bytes (ImageLocality).
    images: Mapping[str, int] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        return kinds.NODE.ref("", self.name)

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> NodeInfo:
        meta, spec, status, _, name, where = wire.object_parts(
            obj, kinds.NODE.kind, namespaced=kinds.NODE.namespaced
        )
        try:
            capacity = Resources.parse(status.get("capacity"), "status.capacity", non_negative=True)
            allocatable = Resources.parse(status.get("allocatable"), "status.allocatable", non_negative=True)
            taint_items = wire.items(spec.get("taints"), "spec.taints")
            conditions = wire.items(status.get("conditions"), "status.conditions")
            labels, annotations = wire.labels_and_annotations(meta)
            images = node_images(status)
        except InvalidValue as err:
            raise err.located(where) from None
        merged = capacity.without(allocatable) + allocatable if capacity else allocatable
        taints = tuple(
            Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or "NoSchedule"))
            for t in taint_items
        )
        # A node without a Ready condition (a manifest for `gpuq simulate`) is taken as ready; one
        # that reports Ready=False or Unknown is not.
        ready = True
        for condition in conditions:
            if condition.get("type") == "Ready":
                ready = condition.get("status") == "True"
        return cls(
            name=name,
            labels=labels,
            annotations=annotations,
            allocatable=merged,
            taints=taints,
            unschedulable=bool(spec.get("unschedulable")),
            ready=ready,
            images=images,
        )
