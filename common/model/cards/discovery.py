"""Node card discovery: the card types of one node from its labels and allocatable (capacity-card
"Node Card Discovery"; design.md Semantics 2 and 9).

Three kinds of card type on a node:

* a **whole card** per ``<prefix>/<type>.product`` label whose resource ``<prefix>/<type>`` is in the
  node's allocatable (``nvidia.com/gpu.product: NVIDIA-A100`` + ``nvidia.com/gpu: 8`` -> ``NVIDIA-A100``);
* an **MPS** slice for ``nvidia.com/gpu.shared`` (``NVIDIA-A100/mps-80g*1/8``);
* a **MIG** instance per ``nvidia.com/mig-<profile>`` (``NVIDIA-A100/mig-1g.5gb-mixed``).

A malformed node *label* never raises out of discovery: it is collected as an
:class:`~common.model.errors.InvalidAnnotation` on :class:`NodeCards` so the scheduler can emit a
Warning event on the node (Semantics 3) and keep scheduling the rest of the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.cards.card_type import (
    CARD_NAME_RE,
    CARD_UNIT,
    MIG_RESOURCE_PREFIX,
    MPS_RESOURCE,
    NVIDIA_GPU,
    NVIDIA_MEMORY_LABEL,
    NVIDIA_PRODUCT_LABEL,
    NVIDIA_REPLICAS_LABEL,
    PRODUCT_LABEL_RE,
    CardType,
)
from gpuq_k8s.common.model.errors import InvalidAnnotation
from gpuq_k8s.common.model.events import EventRecord, invalid_annotation
from gpuq_k8s.common.model.limits import decimal
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.quoting import quote


@dataclass(frozen=True, slots=True)
class NodeCards:
    """The card types of one node, and what was wrong with its card labels.

    ``cards`` is sorted by name; each resource maps to at most one card type on a node (a MIG-mixed
    node has one card type per MIG profile resource). ``problems`` are malformed or missing labels
    that kept a card type from being discovered (or a label unusable); see :meth:`events`.
    """

    node: str
    cards: tuple[CardType, ...] = ()
    problems: tuple[InvalidAnnotation, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(card.name for card in self.cards)

    def by_name(self, name: str) -> CardType | None:
        return next((card for card in self.cards if card.name == name), None)

    def by_resource(self, resource: str) -> CardType | None:
        """The node's card type for a Kubernetes resource: what a pod requesting it is charged to."""
        return next((card for card in self.cards if card.resource == resource), None)

    def events(self) -> tuple[EventRecord, ...]:
        """One Warning event per label problem, on the Node (design.md Semantics 3)."""
        ref = kinds.NODE.ref("", self.node)
        return tuple(invalid_annotation(ref, str(problem)) for problem in self.problems)


def _round_half_up(numerator: int, denominator: int) -> int:
    # Exact integer rounding, half away from zero, for non-negative amounts (Semantics 2): Python's
    # round() rounds half to even and would name a 1.5 GiB slice "2g" but a 2.5 GiB one "2g" too.
    return (2 * numerator + denominator) // (2 * denominator)


class _LabelReader:
    """Reads integer card labels once each, recording every problem once."""

    def __init__(self, node: NodeInfo) -> None:
        self.labels = node.labels
        self.where = node.ref
        self.problems: dict[str, InvalidAnnotation] = {}

    def problem(self, field: str, value: Any, expected: str) -> None:
        self.problems.setdefault(field, InvalidAnnotation(field, value, expected, self.where))

    def integer(self, key: str, *, positive: bool) -> int | None:
        """The label as an integer; None when absent or malformed (malformed is recorded)."""
        value = self.labels.get(key)
        if value is None:
            return None
        number = decimal(value)
        if number is None or (positive and number == 0):
            self.problem(key, value, "a positive integer" if positive else "a non-negative integer")
            return None
        return number

    def product(self, key: str) -> str | None:
        value = self.labels.get(key)
        if value is None:
            return None
        if not CARD_NAME_RE.match(value):
            self.problem(key, value, "a card product name without spaces or '|', such as NVIDIA-A100")
            return None
        return value


def is_gpu_resource(resource: str) -> bool:
    """A device-plugin GPU resource whatever the node's labels: ``nvidia.com/gpu``, MPS replicas,
    MIG instances, and ``<vendor>/gpu``."""
    return (
        resource in (NVIDIA_GPU, MPS_RESOURCE)
        or resource.startswith(MIG_RESOURCE_PREFIX)
        or resource.endswith("/gpu")
    )


# The last node discovered and its cards: each plugin that keeps card types (capacity-card's cards,
# the GPU quota's shares) discovers the node it is told of, one after the other, with the very same
# NodeInfo; the second asks again for the same frozen object and gets the same answer without the
# work (a cold start at 15,000 nodes discovered every node twice). Keyed by identity, one entry: no
# equality test on the labels, nothing kept but the last node.
_last: list[tuple[NodeInfo, NodeCards]] = []


def discover_cards(node: NodeInfo) -> NodeCards:
    """The card types of a node from its labels and allocatable (capacity-card.md "Node Card Discovery").

    * Whole card: each ``<prefix>/<type>.product`` label whose resource ``<prefix>/<type>`` is in
      allocatable. Only that exact resource counts, so ``nvidia.com/gpu.shared`` and
      ``nvidia.com/mig-*`` never become whole cards of ``nvidia.com/gpu.product``. The product label
      alone is enough (Semantics 2); ``.memory`` only fills ``memory_mib``.
    * MPS: ``nvidia.com/gpu.shared`` -> ``<product>/mps-<round(memory MiB / 1024)>g*1/<replicas>``;
      needs the ``nvidia.com/gpu.memory`` (MiB, Semantics 9) and ``.replicas`` labels, else it is
      not discovered and the reason is recorded.
    * MIG: ``nvidia.com/mig-<profile>`` -> ``<product>/mig-<profile>-mixed``.

    A resource whose allocatable is 0 (a device plugin reporting unhealthy devices) still yields its
    card type with ``count`` 0: the node keeps its identity for quota resolution while the resource
    fit check keeps pods off it, and a card type does not vanish from the catalog when all its
    devices are briefly unhealthy. A resource absent from allocatable yields nothing.

    Asked again for the object it was just asked for (NodeInfo is frozen), it answers the same
    :class:`NodeCards` without discovering again.
    """
    if _last and _last[0][0] is node:
        return _last[0][1]
    cards = _discover(node)
    _last[:] = [(node, cards)]
    return cards


def _discover(node: NodeInfo) -> NodeCards:
    reader = _LabelReader(node)
    allocatable = node.allocatable
    found: dict[str, CardType] = {}  # by resource

    def add(card: CardType) -> None:
        clash = next((c for c in found.values() if c.name == card.name), None)
        if clash is not None:
            reader.problem(
                f"card type {card.name}",
                card.resource,
                f"one resource per card type name on a node ({quote(card.name)} is also {clash.resource})",
            )
            return
        found[card.resource] = card

    for key in sorted(node.labels):
        match = PRODUCT_LABEL_RE.match(key)
        if match is None:
            continue
        resource, _, kind = match.groups()
        if kind.startswith("mig-"):
            continue  # GPU feature discovery's per-profile MIG labels describe slices, not cards
        product = reader.product(key)
        memory = reader.integer(f"{resource}.memory", positive=True)
        reader.integer(f"{resource}.count", positive=False)
        if product is None or resource not in allocatable:
            continue
        count = allocatable.amount(resource) // CARD_UNIT
        add(CardType(product, "whole", product, resource, count, memory_mib=memory))

    mig_resources = sorted(r for r in allocatable if r.startswith(MIG_RESOURCE_PREFIX))
    if MPS_RESOURCE in allocatable or mig_resources:
        product = reader.product(NVIDIA_PRODUCT_LABEL)
        memory = reader.integer(NVIDIA_MEMORY_LABEL, positive=True)
        if product is None and NVIDIA_PRODUCT_LABEL not in node.labels:
            shared = ", ".join(([MPS_RESOURCE] if MPS_RESOURCE in allocatable else []) + mig_resources)
            reader.problem(NVIDIA_PRODUCT_LABEL, None, f"the GPU product label, required to name {shared}")
        if product is not None and MPS_RESOURCE in allocatable:
            replicas = reader.integer(NVIDIA_REPLICAS_LABEL, positive=True)
            for label, value in ((NVIDIA_MEMORY_LABEL, memory), (NVIDIA_REPLICAS_LABEL, replicas)):
                if value is None and label not in node.labels:
                    reader.problem(label, None, f"a positive integer, required to name {MPS_RESOURCE} (MPS)")
            if memory is not None and replicas is not None:
                name = f"{product}/mps-{_round_half_up(memory, 1024)}g*1/{replicas}"
                count = allocatable.amount(MPS_RESOURCE) // CARD_UNIT
                add(CardType(name, "mps", product, MPS_RESOURCE, count, memory, replicas=replicas))
        if product is not None:
            for resource in mig_resources:
                profile = resource[len(MIG_RESOURCE_PREFIX) :]
                if not profile or not CARD_NAME_RE.match(profile):
                    continue
                name = f"{product}/mig-{profile}-mixed"
                count = allocatable.amount(resource) // CARD_UNIT
                add(CardType(name, "mig", product, resource, count, memory, mig_profile=profile))

    cards = tuple(sorted(found.values(), key=lambda c: c.name))
    return NodeCards(node.name, cards, tuple(reader.problems.values()))
