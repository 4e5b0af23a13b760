"""The NVIDIA-style cluster of ``tests/fixtures/dra/cluster/nvidia.yaml``, parsed, with a fresh allocator."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuq_k8s.common.model.devices.allocator import Allocator
from gpuq_k8s.common.model.devices.claims import ResourceClaim
from gpuq_k8s.common.model.devices.classes import DeviceClass
from gpuq_k8s.common.model.devices.ledger import DeviceLedger
from gpuq_k8s.common.model.devices.pools import Inventory
from gpuq_k8s.common.model.devices.slices import ResourceSlice
from gpuq_k8s.common.model.nodes import NodeInfo

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dra" / "cluster" / "nvidia.yaml"


def documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(FIXTURE.read_text()) if d]


@dataclass
class Cluster:
    classes: dict[str, DeviceClass]
    slices: list[ResourceSlice]
    claims: dict[str, ResourceClaim]
    ledger: DeviceLedger = field(default_factory=DeviceLedger)

    def __post_init__(self) -> None:
        self.inventory = Inventory.build(self.slices)
        counter = iter(range(1000))
        self.allocator = Allocator(
            self.inventory, self.classes, self.ledger, share_id=lambda: f"share-{next(counter)}"
        )

    def claim(self, name: str, as_name: str | None = None) -> ResourceClaim:
        """A fixture claim, optionally under another name (one per pod, as a template makes them)."""
        claim = self.claims[name]
        if as_name is None:
            return claim
        return ResourceClaim(claim.namespace, as_name, claim.spec)


def cluster() -> Cluster:
    docs = documents()
    return Cluster(
        classes={c.name: c for c in (DeviceClass.from_dict(d) for d in docs if d["kind"] == "DeviceClass")},
        slices=[ResourceSlice.from_dict(d) for d in docs if d["kind"] == "ResourceSlice"],
        claims={
            c.name: c for c in (ResourceClaim.from_dict(d) for d in docs if d["kind"] == "ResourceClaim")
        },
    )


def node(name: str) -> NodeInfo:
    return NodeInfo(name, {"kubernetes.io/hostname": name})
