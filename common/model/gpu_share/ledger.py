"""The GPU shares in use: per node, what each device's shares hold and how many cards whole-card pods
hold (design.md Semantics 19). The cache of tensor-fusion's GpuAllocator, as scheduler-plugins'
capacityscheduling keeps its quota: reserved in the scheduling cycle (so two pods in flight never take
the same room), released on Unreserve and when a pod leaves, rebuilt from the pods the cluster holds
(their ``tensor-fusion.ai/gpu-ids``) after a restart.

A whole-card pod's cards are not named (the device plugin picks them on the node), so the ledger counts
them: on a node of ``D`` devices with ``W`` held whole, at most ``D - W`` devices carry shares, and a
whole-card pod asking ``n`` fits only while ``W + n + (devices with shares) <= D``. Neither kind of pod
can then be given a device the other holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

# Allocations of pods that left, kept so that a pod put back (preemption's dry run takes victims off
# the cluster and puts them back) lands on the devices it held even where its pod carries no
# annotation (gpuq simulate). Bounded: an entry forgotten only costs a fresh choice.
_MAX_RECENT: Final = 4096


@dataclass(frozen=True, slots=True)
class Share:
    """A shared-GPU pod's allocation: ``devices`` (indices) of ``node``, each giving it ``tflops``
    milli-TFLOPS and ``vram`` bytes."""

    node: str
    devices: tuple[int, ...]
    tflops: int
    vram: int


@dataclass(frozen=True, slots=True)
class DeviceUse:
    """What the shares on one device hold."""

    tflops: int = 0
    vram: int = 0
    pods: int = 0


@dataclass(frozen=True, slots=True)
class NodeUse:
    """One node's usage: the devices carrying shares and the cards held whole."""

    devices: Mapping[int, DeviceUse] = field(default_factory=dict)
    whole: int = 0

    @property
    def shared(self) -> int:
        return len(self.devices)


_IDLE: Final = NodeUse()


class ShareLedger:
    """Shares and whole cards by pod key; each pod is reserved once (a second reserve is refused)."""

    def __init__(self) -> None:
        self._shares: dict[str, Share] = {}
        self._whole: dict[str, tuple[str, int]] = {}
        self._use: dict[str, dict[int, DeviceUse]] = {}
        self._whole_count: dict[str, int] = {}
        self._recent: dict[str, Share] = {}
        # per node, a number that changes with every reservation or release there (caches key on it)
        self._versions: dict[str, int] = {}
        self._serial = 0

    def version(self, node: str) -> int:
        return self._versions.get(node, 0)

    def _touch(self, node: str) -> None:
        self._serial += 1
        self._versions[node] = self._serial

    def nodes_in_use(self) -> list[str]:
        """The nodes where some device carries a share or some card is held whole."""
        return list(self._use.keys() | self._whole_count.keys())

    def __contains__(self, key: str) -> bool:
        return key in self._shares or key in self._whole

    def share(self, key: str) -> Share | None:
        return self._shares.get(key)

    def recent(self, key: str) -> Share | None:
        """The allocation pod ``key`` held when it last left (see ``_MAX_RECENT``)."""
        return self._recent.get(key)

    def use(self, node: str) -> NodeUse:
        devices = self._use.get(node)
        whole = self._whole_count.get(node, 0)
        if not devices and not whole:
            return _IDLE
        return NodeUse(dict(devices or {}), whole)

    def reserve_share(self, key: str, share: Share) -> None:
        if key in self:
            raise ValueError(f"pod {key} is reserved already")
        devices = self._use.setdefault(share.node, {})
        for index in share.devices:
            old = devices.get(index) or DeviceUse()
            devices[index] = DeviceUse(old.tflops + share.tflops, old.vram + share.vram, old.pods + 1)
        self._shares[key] = share
        self._touch(share.node)

    def reserve_whole(self, key: str, node: str, cards: int) -> None:
        if key in self:
            raise ValueError(f"pod {key} is reserved already")
        self._whole[key] = (node, cards)
        self._whole_count[node] = self._whole_count.get(node, 0) + cards
        self._touch(node)

    def release(self, key: str) -> bool:
        """Give back what pod ``key`` holds; False when it holds nothing."""
        share = self._shares.pop(key, None)
        if share is not None:
            devices = self._use[share.node]
            for index in share.devices:
                old = devices[index]
                if old.pods <= 1:
                    del devices[index]
                else:
                    devices[index] = DeviceUse(old.tflops - share.tflops, old.vram - share.vram, old.pods - 1)
            if not devices:
                del self._use[share.node]
            self._touch(share.node)
            if len(self._recent) >= _MAX_RECENT:
                self._recent.clear()
            self._recent[key] = share
            return True
        whole = self._whole.pop(key, None)
        if whole is None:
            return False
        node, cards = whole
        self._touch(node)
        left = self._whole_count[node] - cards
        if left:
            self._whole_count[node] = left
        else:
            del self._whole_count[node]
        return True

    def busy_nodes(self) -> list[str]:
        """The nodes where some device carries a share."""
        return list(self._use) if self._use else []

    def shares(self) -> Mapping[str, Share]:
        return self._shares
