"""Card types: discovery from node labels and allocatable, and ``A|B|C`` alternatives.

capacity-card.md "Node Card Discovery" names three kinds of card type on a node:

* a **whole card** per ``<prefix>/<type>.product`` label whose resource ``<prefix>/<type>`` is in the
  node's allocatable (``nvidia.com/gpu.product: NVIDIA-A100`` + ``nvidia.com/gpu: 8`` -> ``NVIDIA-A100``);
* an **MPS** slice for ``nvidia.com/gpu.shared`` (``NVIDIA-A100/mps-80g*1/8``);
* a **MIG** instance per ``nvidia.com/mig-<profile>`` (``NVIDIA-A100/mig-1g.5gb-mixed``).

Queues grant quota per card type name (``volcano.sh/card.quota``), pods choose card types with
``volcano.sh/card.name`` (``A|B`` = A preferred, else B) and PodGroups pre-declare their need with
``volcano.sh/card.request``. This module parses those three annotations strictly (the webhook denies
what they reject) and builds the :class:`CardCatalog`, the cluster-wide map between card type names and
Kubernetes resources that both processes resolve names through.

A malformed node *label* never raises out of discovery: it is collected as an
:class:`~common.model.errors.InvalidAnnotation` on :class:`NodeCards` so the scheduler can emit a
Warning event on the node (Semantics 3) and keep scheduling the rest of the cluster.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from common.model.annotations import CARD_NAME, CARD_QUOTA, CARD_REQUEST
from common.model.errors import InvalidAnnotation
from common.model.events import INVALID_ANNOTATION, EventRecord
from common.model.nodes import NodeInfo
from common.model.resources import EMPTY, Resources

CardKind = Literal["whole", "mps", "mig"]


@dataclass(frozen=True, slots=True)
class CardType:
    """One card type found on a node (DESIGN.md Semantics 2).

    ``name`` is the canonical card type name queues use in ``volcano.sh/card.quota``:
    ``NVIDIA-A100`` (whole), ``NVIDIA-A100/mps-80g*1/8`` (MPS), ``NVIDIA-A100/mig-1g.5gb-mixed`` (MIG).
    ``resource`` is the Kubernetes resource pods request for it. ``count`` is the node's allocatable
    amount of that resource in whole units (MPS replicas and MIG instances count one each).
    ``memory_mib`` is the *physical* card's memory from the ``<prefix>.memory`` label (MiB, Semantics 9).
    """

    name: str
    kind: CardKind
    product: str
    resource: str
    count: int
    memory_mib: int | None = None
    replicas: int | None = None
    mig_profile: str | None = None


# --------------------------------------------------------------------------------------------------
# Everything below is discovery, the cluster-wide catalog and the card annotations
# (capacity-card.md "Node Card Discovery", "API Design"; DESIGN.md Semantics 2, 3 and 9).

MULTI_CARD_SEPARATOR: Final = "|"
# Card amounts are kept in milli-units like every extended resource (capacity-card.md "Card Resource
# Quantification": 2 cards -> 2000), so a quota and a pod request compare without conversion.
CARD_UNIT: Final = 1000
# A quota or request above this many cards is a typo, not a cluster; refusing it keeps milli-unit
# amounts far inside int64 for the scheduler's numpy arrays.
MAX_CARD_COUNT: Final = 1_000_000_000

NVIDIA_GPU: Final = "nvidia.com/gpu"
NVIDIA_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
NVIDIA_MEMORY_LABEL: Final = "nvidia.com/gpu.memory"
NVIDIA_REPLICAS_LABEL: Final = "nvidia.com/gpu.replicas"
MPS_RESOURCE: Final = "nvidia.com/gpu.shared"
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"

# The spec's `^((.+?)/(\w+))\.product$`, with `-` also allowed in the type: resource names may contain
# it (`huawei.com/ascend-910`, spec "Single-Instance Multi-Card Request"), and a product label whose
# resource can never match would silently hide a card type. Group 1 is the whole-card resource.
PRODUCT_LABEL_RE: Final = re.compile(r"^((.+?)/([\w-]+))\.product$")
# A card type name: printable ASCII without spaces and without the alternative separator. Product
# label values are Kubernetes label values, and MPS/MIG names add `/`, `*` and `.` to them.
_CARD_NAME_RE: Final = re.compile(r"^[!-{}~]+$")
_UNSIGNED_RE: Final = re.compile(r"^[0-9]+$")

EXPECTED_CARD_NAMES: Final = (
    "a card type name or alternatives separated by '|' such as NVIDIA-A100|NVIDIA-H100 "
    "(no spaces, no empty or repeated alternative)"
)
EXPECTED_CARD_COUNT: Final = f"a non-negative integer number of cards (at most {MAX_CARD_COUNT})"


# --------------------------------------------------------------------------------------------------
# Card type names and alternatives


def parse_card_names(text: Any, where: str = "", field: str = CARD_NAME) -> tuple[str, ...]:
    """Split ``A|B|C`` into its alternatives, left = preferred (capacity-card.md "Multi-Card Requests").

    Strict: an empty alternative (``A||B``, ``|A``, ``""``), a repeated one (``A|A``) or whitespace
    anywhere raise :class:`InvalidAnnotation` naming ``where`` and ``field``. The webhook first passes
    user input through :func:`normalise_card_names`, so ``A | B`` is fixed at admission rather than
    being a scheduling-time surprise.
    """
    if not isinstance(text, str):
        raise InvalidAnnotation(field, text, EXPECTED_CARD_NAMES, where)
    return _split_card_names(text, where, field)


def _split_card_names(text: str, where: str, field: str) -> tuple[str, ...]:
    names = _split_cached(text)
    if isinstance(names, str):
        raise InvalidAnnotation(field, text, f"{EXPECTED_CARD_NAMES}; {names}", where)
    return names


@lru_cache(maxsize=4096)
def _split_cached(text: str) -> tuple[str, ...] | str:
    # Memoised because the scheduler asks for the same few `card.name` values for every pod of a
    # job; returns the problem as a string so the cache never holds an exception with a location.
    if text == "":
        return "the value is empty"
    parts = text.split(MULTI_CARD_SEPARATOR)
    seen: set[str] = set()
    for position, part in enumerate(parts, start=1):
        if part == "":
            return f"alternative {position} is empty"
        if not _CARD_NAME_RE.match(part):
            return f"alternative {position} ({part!r}) contains whitespace or a non-printable character"
        if part in seen:
            return f"{part!r} is repeated"
        seen.add(part)
    return tuple(parts)


def normalise_card_names(text: str) -> str:
    """``" A | B "`` -> ``"A|B"``: spaces around names dropped, nothing else changed.

    The webhook's mutation for ``volcano.sh/card.name``; it does not repair empty or repeated
    alternatives, which :func:`parse_card_names` then rejects with a precise message.
    """
    return MULTI_CARD_SEPARATOR.join(part.strip() for part in text.strip().split(MULTI_CARD_SEPARATOR))


def card_key(names: Sequence[str]) -> str:
    """The ledger and request key for a set of alternatives (``("A", "B")`` -> ``"A|B"``)."""
    return MULTI_CARD_SEPARATOR.join(names)


def is_composite(key: str) -> bool:
    return MULTI_CARD_SEPARATOR in key


def key_alternatives(key: str) -> tuple[str, ...]:
    """The alternatives of a key built by :func:`card_key` (``"A|B"`` -> ``("A", "B")``)."""
    return tuple(key.split(MULTI_CARD_SEPARATOR))


# --------------------------------------------------------------------------------------------------
# Card annotations: JSON objects of card type (or alternatives) -> count


class _Pairs(list[tuple[str, Any]]):
    """A JSON object's members in order, duplicates kept (json.loads would drop all but the last)."""


_JSON_TYPES: Final[dict[type, str]] = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def _load_object(text: Any, key: str, where: str, expected: str) -> list[tuple[str, Any]]:
    if not isinstance(text, str):
        raise InvalidAnnotation(key, text, expected, where)

    try:
        data = json.loads(text, object_pairs_hook=_Pairs)
    except (json.JSONDecodeError, RecursionError) as err:
        reason = err.msg if isinstance(err, json.JSONDecodeError) else "nested too deeply"
        raise InvalidAnnotation(key, text, f"{expected} (invalid JSON: {reason})", where) from None
    if not isinstance(data, _Pairs):
        kind = _JSON_TYPES.get(type(data), type(data).__name__)
        raise InvalidAnnotation(key, text, f"{expected}, not a JSON {kind}", where)
    seen: set[str] = set()
    for name, _ in data:
        if name in seen:
            # json.loads would keep the last value silently; the user meant one of them.
            raise InvalidAnnotation(key, text, f"{expected} ({name!r} appears twice)", where)
        seen.add(name)
    return data


def _card_count(value: Any, name: str, key: str, where: str) -> int:
    # bool is an int in Python and 1.0 is a float in JSON: neither is a card count.
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CARD_COUNT:
        raise InvalidAnnotation(f"{key}[{name}]", value, EXPECTED_CARD_COUNT, where)
    return value * CARD_UNIT


def parse_card_quota(text: Any, where: str = "") -> Resources:
    """``volcano.sh/card.quota`` on a Queue -> card type -> quota in milli-units.

    capacity-card.md "Queue Annotations for Card Quotas": a JSON object of single card type names to
    non-negative integers (``{"NVIDIA-A100": 10}``). A quota is per concrete card type, so an ``A|B``
    key is refused, as are floats, negatives, strings, repeated keys and anything but an object.
    """
    expected = 'a JSON object of card type name to non-negative integer, such as {"NVIDIA-A100": 4}'
    quota: dict[str, int] = {}
    for name, value in _load_object(text, CARD_QUOTA, where, expected):
        names = _split_card_names(name, where, f"{CARD_QUOTA} key")
        if len(names) > 1:
            raise InvalidAnnotation(
                f"{CARD_QUOTA} key", name, "a single card type name (quota is per card type, not A|B)", where
            )
        quota[name] = _card_count(value, name, CARD_QUOTA, where)
    return Resources(quota)


def parse_card_request(text: Any, where: str = "") -> Resources:
    """``volcano.sh/card.request`` on a PodGroup -> card key -> requested cards in milli-units.

    capacity-card.md "Job Annotations for Card Requests": keys are a card type or ``A|B``
    alternatives (job mode sums the alternatives' quotas). Keys come back canonical
    (:func:`card_key`); two keys naming the same set of alternatives are refused as ambiguous.
    """
    expected = (
        'a JSON object of card type (or A|B alternatives) to non-negative integer, such as {"NVIDIA-A100": 8}'
    )
    request: dict[str, int] = {}
    sets: dict[frozenset[str], str] = {}
    for name, value in _load_object(text, CARD_REQUEST, where, expected):
        names = _split_card_names(name, where, f"{CARD_REQUEST} key")
        as_set = frozenset(names)
        if as_set in sets:
            same = f"each set of card types once ({sets[as_set]!r} names the same)"
            raise InvalidAnnotation(f"{CARD_REQUEST} key", name, same, where)
        sets[as_set] = name
        request[card_key(names)] = _card_count(value, name, CARD_REQUEST, where)
    return Resources(request)


# --------------------------------------------------------------------------------------------------
# Node card discovery


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
        """One Warning event per label problem, on the Node (DESIGN.md Semantics 3)."""
        return tuple(
            EventRecord(f"Node//{self.node}", "Warning", INVALID_ANNOTATION, str(problem))
            for problem in self.problems
        )


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
        if not _UNSIGNED_RE.match(value) or (positive and int(value) == 0):
            self.problem(key, value, "a positive integer" if positive else "a non-negative integer")
            return None
        return int(value)

    def product(self, key: str) -> str | None:
        value = self.labels.get(key)
        if value is None:
            return None
        if not _CARD_NAME_RE.match(value):
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
    """
    reader = _LabelReader(node)
    allocatable = node.allocatable
    found: dict[str, CardType] = {}  # by resource

    def add(card: CardType) -> None:
        clash = next((c for c in found.values() if c.name == card.name), None)
        if clash is not None:
            reader.problem(
                f"card type {card.name}",
                card.resource,
                f"one resource per card type name on a node ({card.name!r} is also {clash.resource})",
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
                if not profile or not _CARD_NAME_RE.match(profile):
                    continue
                name = f"{product}/mig-{profile}-mixed"
                count = allocatable.amount(resource) // CARD_UNIT
                add(CardType(name, "mig", product, resource, count, memory, mig_profile=profile))

    cards = tuple(sorted(found.values(), key=lambda c: c.name))
    return NodeCards(node.name, cards, tuple(reader.problems.values()))


# --------------------------------------------------------------------------------------------------
# The cluster-wide catalog


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
                            f"Node//{node_cards.node}",
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

    @property
    def card_resources(self) -> frozenset[str]:
        """Every Kubernetes resource that is some card type's resource."""
        return frozenset(self._by_resource)

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


def unknown_card_names(names: Sequence[str], catalog: CardCatalog) -> tuple[str, ...]:
    """The names no node in the cluster has (yet)."""
    return tuple(n for n in names if n not in catalog)


def card_names_share_resource(names: Sequence[str], catalog: CardCatalog) -> bool:
    """All known alternatives use one Kubernetes resource (spec "Single-Instance Multi-Card Request").

    ``NVIDIA-A100|NVIDIA-H800/mps-80*1/2`` does not (``nvidia.com/gpu`` vs ``nvidia.com/gpu.shared``):
    the pod's ``resources`` are fixed at creation and cannot follow the card type chosen later.
    """
    return len(card_names_resources(names, catalog)) <= 1


def pod_card_resources(requests: Mapping[str, int], catalog: CardCatalog) -> Resources:
    """The card resources a pod requests: its requests that are some card type's resource, > 0."""
    return Resources({r: v for r, v in requests.items() if v > 0 and catalog.is_card_resource(r)})
