"""Whether a pending pod can ever fit, or only waits for room (design.md Semantics 14).

A refusal says *why* a pod does not fit now; its outlook says whether waiting can help, and names the
number that would have to change:

- **never**: the request is over a limit itself (8 H100 asked, the queue's quota is 4; more of a
  resource than any node has allocatable). No pod leaving frees enough: the limit, the cluster or the
  request has to change.
- **wait**: the request is within the limit, but the room is taken (4 of 4 used, 1 asked). It fits
  once enough is freed.

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
    if WAIT_TEXT in lowered:
        return WAIT
    if NEVER_TEXT in lowered:
        return NEVER
    return None
