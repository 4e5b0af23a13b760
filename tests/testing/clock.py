"""FakeClock: time that moves only when a test moves it.

The scheduler, its queue and the event recorder take a ``clock`` callable; a test hands them a
FakeClock and sets ``now`` (kube-scheduler's tests use ``k8s.io/utils/clock/testing.FakeClock`` alike).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class FakeClock:
    """A ``() -> float`` clock reading ``now`` (seconds), which the test sets."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now
