"""Volcano's starvation prevention: a target job and the nodes locked for it (the ``reserve`` action and
the ``reservation`` plugin; design.md Semantics 15).

Volcano v1.1 added the ``elect`` and ``reserve`` actions and the ``reservation`` plugin
(docs/design/job-resource-reservation-design.md) and sunset them in May 2022 (commit b27b4bbe7, PR
#2236): elect chose a *target job*, the job of the highest priority that has waited longest
(``reservation.go`` ``targetJobFn``); reserve, while the target job was not ready, locked one more node
per session, the unlocked node with the most idle resources (``reservedNodesFn``); locked nodes were to
take no other job's pods until the target job was ready. gpuq keeps that meaning; the rules are here, the
state and its place in the pod-at-a-time cycle in ``scheduler/actions/reserve.py`` and
``scheduler/plugins/reservation.py``.

Where gpuq chooses (design.md Semantics 15 says why): equal priority and equal waiting go to the job key
that sorts first (Volcano: map order); a lock ends after ``lockTimeoutSeconds`` (the design's v1.2.1
``timeout``, never implemented by Volcano), and a job whose lock timed out is elected again only once
every other candidate has had its turn.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, ClassVar, Final

from pydantic import Field

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.plugin_args import PluginArgs, expect

DEFAULT_LOCK_TIMEOUT_SECONDS: Final = 300.0
_NEWEST: Final = datetime.max.replace(tzinfo=UTC)


class ReservationArgs(PluginArgs):
    """The ``reservation`` arguments: how long nodes stay locked for one target job (gpuq's own: Volcano's
    plugin took none and held its locks until the target job was ready)."""

    PLUGIN: ClassVar[str] = plugin_names.RESERVATION

    lock_timeout: Annotated[
        float,
        Field(gt=0, le=86400, allow_inf_nan=False),
        expect("a positive number of seconds up to 86400 such as 300"),
    ] = Field(DEFAULT_LOCK_TIMEOUT_SECONDS, alias="lockTimeoutSeconds")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A job that waits: its key (a PodGroup's ``namespace/name``, or a pod's key for a pod without
    one), its priority (Volcano's ``JobInfo.Priority``) and since when it waits (the creation time of
    the PodGroup or of its oldest pending pod: Volcano's ``ScheduleStartTimestamp``)."""

    key: str
    priority: int
    since: datetime = _NEWEST


def waiting_since(timestamps: Iterable[str]) -> datetime:
    """The earliest of RFC 3339 ``creationTimestamp`` texts; one missing or unreadable waits least."""
    earliest = _NEWEST
    for text in timestamps:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            continue
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        earliest = min(earliest, moment)
    return earliest


def elect(candidates: Sequence[Candidate], passed_over: Container[str] = ()) -> Candidate | None:
    """The target job: the highest priority, then the longest waiting (Volcano's ``targetJobFn``), then
    the first key. Jobs in ``passed_over`` (their lock timed out) only when every candidate is."""
    fresh = [c for c in candidates if c.key not in passed_over] or list(candidates)
    if not fresh:
        return None
    return min(fresh, key=lambda c: (-c.priority, c.since, c.key))


def max_idle_node(nodes: Iterable[tuple[str, Sequence[int]]], locked: Container[str]) -> str | None:
    """The node to lock next: Volcano's ``getUnlockedNodesWithMaxIdle`` over ``(name, idle)`` pairs in
    the order given (gpuq: by name). A node replaces the best so far when the best's idle is at most
    its own in every resource (``Idle.LessEqual``), so of equal nodes the last wins, and a node that is
    better in one resource but worse in another does not displace the best."""
    best: tuple[str, Sequence[int]] | None = None
    for name, idle in nodes:
        if name in locked:
            continue
        if best is None or all(have <= other for have, other in zip(best[1], idle, strict=True)):
            best = (name, idle)
    return best[0] if best is not None else None


@dataclass(frozen=True, slots=True)
class Lock:
    """The target job, when it was elected (the scheduler's clock), how long its lock may last, and the
    nodes locked for it, in the order they were locked."""

    target: str
    elected_at: float
    timeout: float
    nodes: tuple[str, ...] = ()

    def expired(self, now: float) -> bool:
        return now - self.elected_at >= self.timeout

    def with_node(self, node: str) -> Lock:
        return Lock(self.target, self.elected_at, self.timeout, (*self.nodes, node))

    def refuses(self, job: str) -> bool:
        """Whether the locked nodes refuse a pod of ``job``: every job's but the target's."""
        return bool(self.nodes) and job != self.target
