"""An in-memory :class:`~scheduler.backend.ClusterBackend`: ``gpuq simulate`` and the tests.

Every call completes before it returns and is recorded, so a run can be replayed as a report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from common.model.events import EventRecord
from common.model.pods import PodInfo
from scheduler.backend import Done, Outcome
from scheduler.cluster.objects import ObjectStore


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

    def bind(self, pod: PodInfo, node: str, done: Done) -> None:
        if pod.key in self.fail_binds:
            done(Outcome(False, f"binding rejected for {pod.ref}"))
            return
        self.bindings[pod.key] = node
        self.conditions.pop(pod.key, None)
        done(Outcome(True))

    def evict(self, pod: PodInfo, reason: str, done: Done) -> None:
        self.evictions[pod.key] = reason
        self.bindings.pop(pod.key, None)
        done(Outcome(True))

    def record_event(self, event: EventRecord) -> None:
        self.events.append(event)

    def set_pod_condition(self, pod: PodInfo, reason: str, message: str, nominated_node: str = "") -> None:
        self.conditions[pod.key] = PodCondition(reason, message, nominated_node)

    def patch_status(self, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self.statuses[(kind, namespace, name)] = status
        if self.objects is not None:
            self.objects.set_status(kind, namespace, name, status)
