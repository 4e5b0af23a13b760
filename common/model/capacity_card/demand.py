"""What a pod asks of the card quotas, and what it is charged on a node (capacity-card.md "Job
Resource Card Requests"; design.md Semantics 1).

A pod's ``volcano.sh/card.name`` lists the card types it accepts (``A|B``); each other card resource it
requests may land on any card type of that resource. The pod is charged under the *concrete* card type
of the node it lands on, never ``A|B``: Semantics 1 resolves the type there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuq_k8s.common.model.annotations import CARD_NAME
from gpuq_k8s.common.model.capacity_card.args import CapacityCardArgs
from gpuq_k8s.common.model.capacity_card.quota import CPU_MEMORY
from gpuq_k8s.common.model.cards.catalog import CardCatalog, absent_card_resource
from gpuq_k8s.common.model.cards.discovery import NodeCards, is_gpu_resource
from gpuq_k8s.common.model.cards.names import card_key, parse_card_names
from gpuq_k8s.common.model.errors import InvalidAnnotation
from gpuq_k8s.common.model.outlook import no_card_node_outlook
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.resources import EMPTY, Resources


@dataclass(frozen=True, slots=True)
class CardDemand:
    """What a pod asks of the card quotas, resolved against the catalog.

    ``groups`` holds one tuple of candidate card types per charge, in preference order: the
    ``card.name`` alternatives the pod requests the resource of, then, for each other card resource
    the pod requests, every card type of that resource (Semantics 1: charged to the node's type).
    On a node, each group is charged to its first candidate the node has (and has quota for).
    ``amounts`` is the milli-unit amount each candidate would be charged. ``pending`` is the
    reservation key of each group while the pod is unbound (``A|B`` -> amount).
    """

    alternatives: tuple[str, ...] = ()
    groups: tuple[tuple[str, ...], ...] = ()
    amounts: Mapping[str, int] = field(default_factory=dict)
    cpu_memory: Resources = EMPTY

    @property
    def uses_cards(self) -> bool:
        return bool(self.groups)

    @property
    def pending(self) -> Resources:
        return Resources({card_key(group): self.amounts[group[0]] for group in self.groups})


class NoNodeOffers(InvalidAnnotation):
    """A ``card.name`` none of whose card types any node offers, in a cluster whose card types are not
    autoscaled (capacity-card's ``autoscaledCardTypes: false``): it can never fit as the cluster
    stands (design.md Semantics 14, 16)."""

    def _render(self) -> str:
        return f"{super()._render()} ({no_card_node_outlook(str(self.value))})"


def pod_card_demand(pod: PodInfo, catalog: CardCatalog, *, autoscaled: bool = False) -> CardDemand:
    """The card demand of a pod; raises :class:`InvalidAnnotation` naming the pod when it has none.

    Refused (upstream's ``GetTaskRequestResourceFailed``): a malformed ``card.name``; a ``card.name``
    none of whose card types any node has (:class:`NoNodeOffers`; with ``autoscaled``, such a type
    stays a candidate, its resource read from its name by
    :func:`~common.model.cards.catalog.absent_card_resource`, and the pod waits for a node offering
    it); a ``card.name`` whose card types' resources the pod does not request (spec "Job Resource Card
    Requests": the resource must be in ``resources``).
    """
    requested = {
        r: v
        for r, v in pod.requests.items()
        if v > 0 and (catalog.is_card_resource(r) or (autoscaled and is_gpu_resource(r)))
    }
    groups: list[tuple[str, ...]] = []
    amounts: dict[str, int] = {}
    alternatives: tuple[str, ...] = ()
    covered: set[str] = set()
    text = pod.annotations.get(CARD_NAME)
    if text is not None:
        alternatives = parse_card_names(text, pod.ref)
        known = [
            (
                name,
                catalog.resource_of(name) or (absent_card_resource(name, requested) if autoscaled else None),
            )
            for name in alternatives
        ]
        group = tuple(name for name, resource in known if resource is not None and resource in requested)
        if not group:
            resources = sorted({r for _, r in known if r is not None})
            if not resources and not autoscaled:
                expected = "card types that some node has (none of these has been discovered on any node)"
                raise NoNodeOffers(CARD_NAME, text, expected, pod.ref)
            if not resources:
                expected = (
                    "card types whose resource the pod requests (a GPU resource such as nvidia.com/gpu)"
                )
            else:
                expected = (
                    f"a pod that requests {' or '.join(resources)} for these card types in its resources"
                )
            raise InvalidAnnotation(CARD_NAME, text, expected, pod.ref)
        resource_of = dict(known)
        for name in group:
            resource = resource_of[name]
            assert resource is not None
            amounts[name] = requested[resource]
            covered.add(resource)
        groups.append(group)
    for resource in sorted(requested):
        if resource in covered:
            continue
        group = catalog.names_for_resource(resource)
        if not group:
            continue  # a GPU resource no node offers, asked without card.name: no card type to charge
        groups.append(group)
        for name in group:
            amounts[name] = requested[resource]
    return CardDemand(alternatives, tuple(groups), amounts, pod.requests.only(CPU_MEMORY))


def charged_cpu_memory(demand: CardDemand, args: CapacityCardArgs) -> Resources:
    """The cpu and memory a pod is checked for and charged: none for a card pod under
    ``cardUnlimitedCpuMemory`` (Story 3)."""
    if args.card_unlimited_cpu_memory and demand.uses_cards:
        return EMPTY
    return demand.cpu_memory


def resolve_charge(
    demand: CardDemand,
    node_cards: NodeCards,
    args: CapacityCardArgs,
    allowed: Mapping[str, bool] | None = None,
    *,
    node_known: bool = True,
) -> Resources:
    """What a pod is charged on a node: cpu, memory and each group's concrete card type (Semantics 1).

    Each group goes to its first candidate the node has and (when ``allowed`` is given, from
    :attr:`~common.model.capacity_card.task.TaskCheck.allowed_names`) has quota for; without an
    allowed one, the first the node has (a pod already bound is charged whatever it took). A group the
    node has no candidate for charges nothing: the node cannot run it, or the pod was bound by
    something that ignored the quota. On a node that is not known (``node_known`` False: a pod bound
    to a node deleted before the scheduler listed the nodes) the card type cannot be read, and each
    group is charged to its first candidate, as if the node had them all: a bound pod's cards are
    never left uncounted.
    """
    charge = dict(charged_cpu_memory(demand, args))
    for group in demand.groups:
        present = [name for name in group if not node_known or node_cards.by_name(name) is not None]
        chosen = next((n for n in present if allowed is None or allowed.get(n, False)), None)
        if chosen is None and present:
            chosen = present[0]
        if chosen is not None:
            charge[chosen] = charge.get(chosen, 0) + demand.amounts[chosen]
    return Resources(charge)
