"""Exponential backoff: the one formula every retry loop uses (the informer's re-list, the status
writer's per-object retry, the scheduling queue's per-pod backoff)."""

from __future__ import annotations

from typing import Final

# The exponent is capped: 2 ** attempts for something retried thousands of times overflows a float.
_MAX_EXPONENT: Final = 64


def backoff(attempt: int, initial: float, maximum: float) -> float:
    """The delay before try number ``attempt + 1`` after ``attempt`` failures: ``initial`` after the
    first, doubling with each further one, never over ``maximum``; 0 before any failure.

    kube-scheduler's pod backoff (1 s doubling to 10 s) is this. A caller that retries against a
    shared server spreads its retries by a jitter factor of its own (the informer's: 0.5 to 1).
    """
    if attempt <= 0:
        return 0.0
    return float(min(initial * 2.0 ** min(attempt - 1, _MAX_EXPONENT), maximum))
