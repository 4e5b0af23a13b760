"""A PodGroup's phase and counts from its pods, as Volcano's scheduler writes them, and a Queue's
counts from its PodGroups, as Volcano's queue controller writes them (design.md Semantics 18).

Volcano's ``jobStatus`` (``pkg/scheduler/framework/session.go``), at each session's close:

- *allocated* are the pods placed (allocated, binding, bound, running) or finished (succeeded,
  failed); a pod being deleted is neither (Volcano's Releasing);
- allocated >= minMember: **Running**, and **Completed** once every allocated pod has finished
  (succeeded or failed: the job is over, its quota and reservations are free);
- otherwise the group goes back to **Pending**, unless it is **Inqueue** (admitted, its pods not
  all placed yet);
- ``status.running``, ``succeeded`` and ``failed`` count the pods in those phases.

Two deliberate differences, both where Volcano's rule meets pods that are gone: a group needs at
least one allocated pod to be Running (Volcano's rule makes a group of minMember 0 with no pods
Running, then Completed), and a Completed group whose finished pods are deleted afterwards (a Job's
``ttlSecondsAfterFinished``) stays Completed (Volcano's would fall back to Pending and be enqueued
again, reserving its minResources for a job that is over). Volcano's Unknown phase (running pods of
a group its session found unschedulable) is not produced: gpuq keeps no such session condition.

Volcano's queue controller counts, per Queue, its PodGroups by phase into ``status.pending``,
``running``, ``unknown``, ``inqueue`` and ``completed`` (:func:`queue_counts`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

PENDING: Final = "Pending"
INQUEUE: Final = "Inqueue"
RUNNING: Final = "Running"
COMPLETED: Final = "Completed"
UNKNOWN: Final = "Unknown"
QUEUE_COUNTED: Final = {
    PENDING: "pending",
    RUNNING: "running",
    UNKNOWN: "unknown",
    INQUEUE: "inqueue",
    COMPLETED: "completed",
}


@dataclass(frozen=True, slots=True)
class Members:
    """A PodGroup's pods by what Volcano's jobStatus counts: ``placed`` are bound (or being bound)
    and neither finished nor being deleted, ``running`` those of them whose phase is Running."""

    placed: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0

    @property
    def allocated(self) -> int:
        return self.placed + self.succeeded + self.failed

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed


def podgroup_phase(current: str, min_member: int, members: Members) -> str:
    """The phase a PodGroup in ``current`` moves to (see the module doc)."""
    allocated = members.allocated
    if allocated and allocated >= min_member:
        return COMPLETED if members.finished == allocated else RUNNING
    if current == COMPLETED and not members.placed:
        return COMPLETED  # its finished pods were deleted: still over
    if current == INQUEUE:
        return INQUEUE
    return PENDING


def podgroup_counts(members: Members) -> dict[str, int]:
    """``status.running``, ``succeeded`` and ``failed``. Zeros are written as 0 (Volcano's Go leaves
    them out, omitempty): gpuq patches only the status keys it owns, so a count that dropped to 0
    must be written to replace the old one."""
    return {"running": members.running, "succeeded": members.succeeded, "failed": members.failed}


def queue_counts(phases: Iterable[str]) -> dict[str, int]:
    """A Queue's ``status.pending``, ``running``, ``unknown``, ``inqueue`` and ``completed``: its
    PodGroups by phase (every key, zeros written as 0, as :func:`podgroup_counts` says why)."""
    tally = Counter(phases)
    return {field: tally[phase] for phase, field in QUEUE_COUNTED.items()}
