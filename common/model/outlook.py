"""Whether a pending pod can ever fit, or only waits for room (design.md Semantics 14).

A refusal says *why* a pod does not fit now; its outlook says whether waiting can help, and names the
number that would have to change:

- **never**: the request is over a limit itself (8 H100 asked, the queue's quota is 4; more of a
  resource than any node has allocatable). No pod leaving frees enough: the limit, the cluster or the
  request has to change.
- **wait**: the request is within the limit, but the room is taken (4 of 4 used, 1 asked). It fits
  once enough is freed; or the card type it asks for is offered by no node yet, which a node
  autoscaler adds for a pending pod ("waits for a node offering NVIDIA-H100"): only a quota, which no
  node can change, makes such a pod *never* fit.

A refusal no change of usage can cure is *never* whatever limit it names: a per-workload minimum
(gpu-resource-quota ``single.min``), a malformed annotation of the pod's own (``gpu-count: "two"``),
a request over an ElasticQuota's ``max``.

The outlook is part of the refusal's message (so a pod's PodScheduled message, an Event and the
webhook's denial carry it) and :func:`outlook_of` reads it back from a message, for readers that have
only the message (``kubectl gpuq`` as a namespace-scoped user).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from gpuq_k8s.common.model.errors import InvalidQuantity
from gpuq_k8s.common.model.quantity import format_bytes, parse_quantity, unit_of

NEVER: Final = "never"
WAIT: Final = "wait"
NEVER_TEXT: Final = "can never fit under the current"
WAIT_TEXT: Final = "waits for room"
NODE_TEXT: Final = "waits for a node offering"


@dataclass(frozen=True, slots=True)
class Outlook:
    """``kind`` is :data:`NEVER` or :data:`WAIT`; ``within`` what stands in the way (``quota``,
    ``cluster``); ``change`` the number that would have to change, in words."""

    kind: str
    within: str
    change: str

    @property
    def never(self) -> bool:
        return self.kind == NEVER

    def __str__(self) -> str:
        if self.never:
            return f"{NEVER_TEXT} {self.within}: {self.change}"
        if self.within == "node":
            return f"{NODE_TEXT} {self.change}"
        return f"{WAIT_TEXT}: {self.change}"


def _amount(text: str) -> Fraction | None:
    try:
        return parse_quantity(text)
    except InvalidQuantity:
        return None


def _format(resource: str, amount: Fraction) -> str:
    if amount.denominator == 1:
        whole = int(amount)
        return format_bytes(whole) if unit_of(resource) == "bytes" else str(whole)
    milli = amount * 1000
    return f"{int(milli)}m" if milli.denominator == 1 else str(float(amount))


def quota_outlook(resource: str, requested: str, limit: str, used: str | None) -> Outlook | None:
    """The outlook of ``requested`` against a quota ``limit`` of which ``used`` is taken (amounts as
    the refusal quotes them); None when an amount is not a quantity (nothing sure can be said)."""
    asked, cap = _amount(requested), _amount(limit)
    if asked is None or cap is None:
        return None
    if asked > cap or used is None:
        # Over the limit itself, or a per-workload limit (no usage: nothing to wait for).
        return Outlook(NEVER, "quota", f"{resource} limit {limit} would have to be at least {requested}")
    taken = _amount(used)
    if taken is None:
        return None
    most = cap - asked
    return Outlook(
        WAIT,
        "quota",
        f"{resource} used {used} would have to drop to {_format(resource, max(most, Fraction(0)))}",
    )


def minimum_outlook(resource: str, requested: str, minimum: str) -> Outlook:
    """A request below a per-workload minimum: only the request or the minimum can change."""
    return Outlook(NEVER, "quota", f"{resource} minimum {minimum} would have to be at most {requested}")


def annotation_outlook(annotation: str) -> Outlook:
    """A pod's own annotation is malformed: no usage, quota or node change makes it readable."""
    return Outlook(NEVER, "annotations", f"{annotation} would have to be corrected")


def absent_card_outlook(card_types: str) -> Outlook:
    """No node offers any of ``card_types`` (``A|B``) now, and quota allows one: a node autoscaler
    adds such a node for a pending pod (design.md Semantics 16)."""
    return Outlook(WAIT, "node", card_types)


def no_card_node_outlook(card_types: str) -> Outlook:
    """No node offers any of ``card_types``, and the cluster is not autoscaled (capacity-card's
    ``autoscaledCardTypes: false``): the cluster as it stands can never run the pod."""
    return Outlook(NEVER, "cluster", f"no node offers {card_types}")


def with_outlook(text: str, outlook: Outlook) -> str:
    """``text`` with ``outlook`` appended as its refusals carry it: ``text (outlook)``."""
    return f"{text} ({outlook})"


def capacity_outlook(resource: str, asked: int, largest: int, most_free: int) -> Outlook:
    """A pod asking ``asked`` units of ``resource`` (integer units of :func:`unit_of`), where the
    largest node has ``largest`` allocatable and the one with the most free has ``most_free``."""
    shown = _units(resource, asked)
    if asked > largest:
        return Outlook(
            NEVER,
            "cluster",
            f"no node has {shown} {resource} allocatable (the largest has {_units(resource, largest)})",
        )
    return Outlook(
        WAIT,
        "cluster",
        f"the most {resource} free on one node is {_units(resource, most_free)}, {shown} asked",
    )


def _units(resource: str, amount: int) -> str:
    if unit_of(resource) == "milli":
        return _format(resource, Fraction(amount, 1000))
    return _format(resource, Fraction(amount))


def outlook_of(message: str | None) -> str | None:
    """:data:`NEVER`, :data:`WAIT` or None (not said) for a pending pod's message. A message naming
    both (one card type can never fit, another waits) waits: something can still free room."""
    if not message:
        return None
    lowered = message.lower()
    if WAIT_TEXT in lowered or NODE_TEXT in lowered:
        return WAIT
    if NEVER_TEXT in lowered:
        return NEVER
    return None
