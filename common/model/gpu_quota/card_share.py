"""A card share: the TFLOPS and VRAM one allocatable unit of a card type is worth (design.md Semantics 5).

A pod without tensor-fusion annotations is charged to its namespace's GPUResourceQuota
(gpu-resource-quota.md) by the card it lands on: :func:`card_share` works out what one unit of that
card (a whole card, one MIG instance, one MPS replica) is worth from the node's labels and
:mod:`common.model.gpu_specs`, and :func:`with_unidentified_cards` gives GPU resources that card
discovery could not name a card type too, so a quota is not bypassed on them. ``None`` marks an amount
gpuq cannot tell: it is never guessed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from gpuq_k8s.common.model.cards.card_type import CardType
from gpuq_k8s.common.model.cards.discovery import NodeCards, is_gpu_resource
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.gpu_quota.quota import TFLOPS
from gpuq_k8s.common.model.gpu_specs import card_tflops
from gpuq_k8s.common.model.limits import decimal
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.quantity import to_units

DEFAULT_LABEL_PREFIX: Final = "nvidia.com/gpu"
UNIDENTIFIED: Final = "(no product label)"

_MIG_PROFILE: Final = re.compile(r"^(?:(?P<c>[0-9]{1,4})c\.)?(?P<g>[0-9]{1,4})g\.(?P<gb>[0-9]{1,6})gb")


@dataclass(frozen=True, slots=True)
class CardShare:
    """What one allocatable unit of a card type is worth: ``None`` where gpuq cannot tell."""

    tflops: int | None  # milli-TFLOPS
    vram: int | None  # bytes


def card_share(
    card: CardType, node_labels: Mapping[str, str] | None = None, label_prefix: str = DEFAULT_LABEL_PREFIX
) -> CardShare:
    """TFLOPS and VRAM of one unit of ``card`` (a whole card, one MIG instance, one MPS replica).

    Whole card: ``.memory`` label (MiB, Semantics 9) and TFLOPS from the ``<prefix>.tflops`` node
    label, else :mod:`common.model.gpu_specs`.

    MIG ``[<c>c.]<g>g.<n>gb``: VRAM is the profile's ``n`` GiB (NVIDIA names profiles by the card's
    nominal memory split in eighths: on a 40 GB A100 ``1g.5gb`` is 1/8 of 40 GiB, so the profile
    number is the exact share of the nominal size); TFLOPS is ``c`` (else ``g``) sevenths of the
    card (A30: quarters), the compute slices the instance owns.

    MPS: memory and TFLOPS divided by ``replicas`` (rounded up: never under-charge).
    """
    labels = node_labels or {}
    tflops_milli: int | None = None
    label = labels.get(f"{label_prefix}.tflops")
    if label is not None:
        try:
            tflops_milli = to_units(TFLOPS, label, f"{label_prefix}.tflops")
        except InvalidValue:
            tflops_milli = None
    if tflops_milli is None:
        table = card_tflops(card.product)
        tflops_milli = round(table * 1000) if table is not None else None
    vram = card.memory_mib * 2**20 if card.memory_mib is not None else None

    if card.kind == "mig" and card.mig_profile:
        match = _MIG_PROFILE.match(card.mig_profile)
        if match is None:
            return CardShare(None, None)
        slices = 4 if "A30" in card.product.upper() else 7
        used_slices = int(match.group("c") or match.group("g"))
        vram = int(match.group("gb")) * 2**30
        if tflops_milli is not None:
            tflops_milli = math.ceil(tflops_milli * min(used_slices, slices) / slices)
    elif card.kind == "mps" and card.replicas:
        if tflops_milli is not None:
            tflops_milli = math.ceil(tflops_milli / card.replicas)
        if vram is not None:
            vram = math.ceil(vram / card.replicas)
    return CardShare(tflops_milli, vram)


def with_unidentified_cards(node: NodeInfo, cards: NodeCards) -> NodeCards:
    """``cards`` plus a nameless card type for each GPU resource of ``node`` that card discovery could
    not name (no ``.product`` label). Queues cannot quote such a card, but a GPUResourceQuota must not
    be bypassed on it (Semantics 5: each pod is one worker): TFLOPS come from a ``.tflops`` label and
    a whole card's VRAM from its ``.memory`` label when the node has them; otherwise they are
    underivable and a quota that limits them refuses the node, as for an unknown product."""
    named = {card.resource for card in cards.cards}
    extra: list[CardType] = []
    for resource in sorted(node.allocatable):
        if resource in named or not is_gpu_resource(resource):
            continue
        # A whole card's memory label; an MPS replica's or MIG instance's share needs the card type.
        memory = node.labels.get(f"{resource}.memory", "") if resource.endswith("/gpu") else ""
        memory_mib = decimal(memory) or None  # 0 and malformed alike: no memory known
        count = node.allocatable.amount(resource) // 1000
        extra.append(
            CardType(f"{resource} {UNIDENTIFIED}", "whole", UNIDENTIFIED, resource, count, memory_mib)
        )
    if not extra:
        return cards
    return NodeCards(cards.node, cards.cards + tuple(extra), cards.problems)
