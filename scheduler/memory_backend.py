"""An in-memory :class:`~scheduler.backend.ClusterBackend`: ``gpuq simulate`` and the tests.

Every call completes before it returns and is recorded, so a run can be replayed as a report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuq_k8s.common.model.events import EventRecord
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.backend import SUCCESS, Done, Outcome, Result
from gpuq_k8s.scheduler.cluster.objects import ObjectStore


@dataclass(frozen=True, slots=True)
class PodCondition:
    reason: str
    message: str
    nominated_node: str = ""


@dataclass(slots=True)
class MemoryBackend:
    objects: ObjectStore | None = None
    bindings: dict[str, str] = field(default_factory=dict)
    evictions: dict[str, str] = field(default_factory=dict)
    events: list[EventRecord] = field(default_factory=list)
    conditions: dict[str, PodCondition] = field(default_factory=dict)
    statuses: dict[tuple[str, str, str], Mapping[str, Any]] = field(default_factory=dict)
    # Pod keys whose bind should fail (tests of the Unreserve path).
    fail_binds: set[str] = field(default_factory=set)
    # Pod key -> the result its bind reports instead of DONE (tests of each bind outcome).
    bind_results: dict[str, Result] = field(default_factory=dict)
    # Pod key -> binds held back: ``done`` is called by :meth:`complete` (a bind in flight).
    held: set[str] = field(default_factory=set)
    in_flight: dict[str, tuple[str, Done]] = field(default_factory=dict)
    # How evictions end: GONE (deleted at once, ``gpuq simulate``) or DONE (accepted, the victim
    # terminating with a grace period until the test delivers its delete, as in a cluster).
    evict_result: Result = Result.GONE

    def bind(self, pod: PodInfo, node: str, done: Done) -> None:
        if pod.key in self.held:
            self.in_flight[pod.key] = (node, done)
            return
        self._answer(pod.key, node, done)

    def complete(self, key: str, result: Result = Result.DONE) -> None:
        """Answer the held bind of ``key`` with ``result``."""
        node, done = self.in_flight.pop(key)
        self.held.discard(key)
        self.bind_results.setdefault(key, result)
        self._answer(key, node, done)

    def _answer(self, key: str, node: str, done: Done) -> None:
        result = Result.NOT_BOUND if key in self.fail_binds else self.bind_results.get(key, Result.DONE)
        if result is not Result.DONE:
            done(Outcome(result, f"binding Pod/{key} to {node}: {result.value}"))
            return
        self.bindings[key] = node
        self.conditions.pop(key, None)
        done(SUCCESS)

    def evict(self, pod: PodInfo, reason: str, done: Done) -> None:
        """Deleted at once by default (no grace period to wait out in memory): GONE, the scheduler
        forgets it; with ``evict_result`` DONE it terminates until its delete is fed."""
        self.evictions[pod.key] = reason
        if self.evict_result is Result.GONE:
            self.bindings.pop(pod.key, None)
        done(Outcome(self.evict_result, f"Pod/{pod.key} evicted"))

    def record_event(self, event: EventRecord) -> None:
        self.events.append(event)

    def set_pod_condition(
        self, pod: PodInfo, reason: str, message: str, nominated_node: str | None = None
    ) -> None:
        previous = self.conditions.get(pod.key)
        if nominated_node is None:
            nominated_node = previous.nominated_node if previous is not None else ""
        self.conditions[pod.key] = PodCondition(reason, message, nominated_node)

    def patch_status(self, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self.statuses[(kind, namespace, name)] = status
        if self.objects is not None:
            self.objects.set_status(kind, namespace, name, status)
