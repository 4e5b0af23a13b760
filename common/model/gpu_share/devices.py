"""A node's shareable GPUs: how many devices of which card, and the TFLOPS and VRAM each is worth
(design.md Semantics 19).

The devices are the node's first whole-card type as capacity-card's discovery names it
(:func:`~common.model.cards.discovery.discover_cards`, GPU resources without a product label included
as :func:`~common.model.gpu_quota.card_share.with_unidentified_cards` does): ``count`` devices, each
worth what :func:`~common.model.gpu_quota.card_share.card_share` says one card is (the ``.tflops``
label or :mod:`common.model.gpu_specs`; the ``.memory`` label). MIG instances and MPS replicas are
already partitions of a card: they are never shared further. Device ``i`` is named ``gpu-<i>`` on its
node and ``<node>-gpu-<i>`` cluster-wide (the form of tensor-fusion's GPU objects in its tests, which
its components read from ``tensor-fusion.ai/gpu-ids``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuq_k8s.common.model.cards.discovery import discover_cards
from gpuq_k8s.common.model.gpu_quota.card_share import card_share, with_unidentified_cards
from gpuq_k8s.common.model.nodes import NodeInfo


@dataclass(frozen=True, slots=True)
class NodeGPUs:
    """The shareable GPUs of one node: ``count`` devices of card ``card`` (the Kubernetes resource
    ``resource``), each worth ``tflops`` milli-TFLOPS and ``vram`` bytes (``None``: gpuq cannot tell,
    and the ``label`` that would say)."""

    node: str
    resource: str
    card: str
    count: int
    tflops: int | None
    vram: int | None

    def name(self, index: int) -> str:
        return f"gpu-{index}"

    def gpu_id(self, index: int) -> str:
        """The device's cluster-wide id, as ``tensor-fusion.ai/gpu-ids`` lists it."""
        return f"{self.node}-gpu-{index}"

    def missing_label(self, amount: str) -> str:
        """The node label that would tell ``amount`` (``tflops`` or ``memory``) of this card."""
        return f"{self.resource}.{amount}"


def node_gpus(node: NodeInfo) -> NodeGPUs | None:
    """The node's shareable GPUs, or None when it has no whole-card GPU resource in allocatable."""
    cards = with_unidentified_cards(node, discover_cards(node))
    card = next((c for c in cards.cards if c.kind == "whole" and c.count > 0), None)
    if card is None:
        return None
    share = card_share(card, node.labels, card.resource)
    return NodeGPUs(node.name, card.resource, card.name, card.count, share.tflops, share.vram)
