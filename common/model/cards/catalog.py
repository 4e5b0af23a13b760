"""The cluster-wide card catalog: card type name <-> Kubernetes resource, and the total per card type
(capacity-card "Plugin Initialization"). Both processes resolve card names through it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.cards.card_type import CARD_UNIT, MIG_RESOURCE_PREFIX, MPS_RESOURCE
from gpuq_k8s.common.model.cards.discovery import NodeCards, is_gpu_resource
from gpuq_k8s.common.model.errors import InvalidAnnotation
from gpuq_k8s.common.model.resources import EMPTY, Resources


@dataclass(frozen=True, slots=True)
class CardCatalog:
    """Card type name <-> Kubernetes resource for the whole cluster, and the total per card type.

    capacity-card.md "Plugin Initialization": *build mapping: card name -> K8s resource name* and
    *calculate cluster total resources*. ``names`` is sorted and a card type's **id** is its index:
    every per-card numpy array in :mod:`common.model.capacity_card` is indexed by it. ``capacity`` is
    the allocatable sum over nodes in milli-units. A card name found with two different resources on
    different nodes keeps the first (node name order) and is reported in ``problems``.
    """

    names: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    capacity: Resources = EMPTY
    problems: tuple[InvalidAnnotation, ...] = ()
    _ids: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)
    _by_resource: Mapping[str, tuple[str, ...]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def build(cls, nodes_cards: Iterable[NodeCards]) -> CardCatalog:
        resource_of: dict[str, tuple[str, str]] = {}  # name -> (resource, first node)
        totals: dict[str, int] = {}
        problems: list[InvalidAnnotation] = []
        for node_cards in sorted(nodes_cards, key=lambda n: n.node):
            for card in node_cards.cards:
                known = resource_of.get(card.name)
                if known is None:
                    resource_of[card.name] = (card.resource, node_cards.node)
                elif known[0] != card.resource:
                    problems.append(
                        InvalidAnnotation(
                            f"card type {card.name}",
                            card.resource,
                            f"the same resource as on node {known[1]} ({known[0]})",
                            kinds.NODE.ref("", node_cards.node),
                        )
                    )
                    continue
                totals[card.name] = totals.get(card.name, 0) + card.count * CARD_UNIT
        names = tuple(sorted(resource_of))
        resources = tuple(resource_of[name][0] for name in names)
        by_resource: dict[str, list[str]] = {}
        for name, resource in zip(names, resources, strict=True):
            by_resource.setdefault(resource, []).append(name)
        return cls(
            names=names,
            resources=resources,
            capacity=Resources(totals),
            problems=tuple(problems),
            _ids={name: i for i, name in enumerate(names)},
            _by_resource={r: tuple(n) for r, n in by_resource.items()},
        )

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self._ids

    def id_of(self, name: str) -> int | None:
        return self._ids.get(name)

    def resource_of(self, name: str) -> str | None:
        """The Kubernetes resource pods request for a card type; None if no node has it."""
        index = self._ids.get(name)
        return None if index is None else self.resources[index]

    def is_card_resource(self, resource: str) -> bool:
        return resource in self._by_resource

    def names_for_resource(self, resource: str) -> tuple[str, ...]:
        """The card types that use a resource (``nvidia.com/gpu`` -> every whole NVIDIA card type)."""
        return self._by_resource.get(resource, ())

    def node_matrix(self, nodes_cards: Sequence[NodeCards]) -> npt.NDArray[np.bool_]:
        """``has[n, c]``: node n has card type id c; shape (N, C), rows in the order given.

        The scheduler builds it once per node-set change; every vectorised quota rule of the
        capacity-card engine takes it.
        """
        has = np.zeros((len(nodes_cards), len(self.names)), dtype=np.bool_)
        for row, node_cards in enumerate(nodes_cards):
            for card in node_cards.cards:
                index = self._ids.get(card.name)
                if index is not None and self.resources[index] == card.resource:
                    has[row, index] = True
        return has


def card_names_resources(names: Sequence[str], catalog: CardCatalog) -> frozenset[str]:
    """The Kubernetes resources the known card types among ``names`` use (unknown names ignored)."""
    return frozenset(r for r in (catalog.resource_of(n) for n in names) if r is not None)


def card_names_share_resource(names: Sequence[str], catalog: CardCatalog) -> bool:
    """All known alternatives use one Kubernetes resource (spec "Single-Instance Multi-Card Request").

    ``NVIDIA-A100|NVIDIA-H800/mps-80*1/2`` does not (``nvidia.com/gpu`` vs ``nvidia.com/gpu.shared``):
    the pod's ``resources`` are fixed at creation and cannot follow the card type chosen later.
    """
    return len(card_names_resources(names, catalog)) <= 1


def pod_card_resources(requests: Mapping[str, int], catalog: CardCatalog) -> Resources:
    """The card resources a pod requests: its requests that are some card type's resource, > 0."""
    return Resources({r: v for r, v in requests.items() if v > 0 and catalog.is_card_resource(r)})


def absent_card_resource(name: str, requested: Iterable[str]) -> str | None:
    """The resource a pod requests for a card type no node offers yet, read from the type's name as
    card discovery names types (capacity-card "Node Card Discovery"): ``<product>/mig-<profile>-mixed``
    is ``nvidia.com/mig-<profile>``, ``<product>/mps-...`` is ``nvidia.com/gpu.shared``, any other name
    a whole card: the one whole-card GPU resource among ``requested`` (``nvidia.com/gpu``,
    ``<vendor>/gpu``). None when the name and the requests do not tell."""
    asked = set(requested)
    product, mig, profile = name.partition("/mig-")
    if product and mig and profile.endswith("-mixed"):
        resource = MIG_RESOURCE_PREFIX + profile.removesuffix("-mixed")
        return resource if resource in asked else None
    product, mps, _ = name.partition("/mps-")  # <product>/mps-<memory>g*1/<replicas>
    if product and mps:
        return MPS_RESOURCE if MPS_RESOURCE in asked else None
    whole = sorted(
        r
        for r in requested
        if is_gpu_resource(r) and r != MPS_RESOURCE and not r.startswith(MIG_RESOURCE_PREFIX)
    )
    return whole[0] if len(whole) == 1 else None
