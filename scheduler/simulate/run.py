"""Run a simulation and build its report (the JSON schema of design.md "gpuq simulate").

Time is virtual: when no pod is ready, the clock jumps to the end of the earliest backoff, so a
simulation of retries costs no wall-clock time. The run ends when the queue has nothing ready and
nothing backing off, or when a whole round of retries changed nothing (a fixed point).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol, runtime_checkable

import numpy as np

from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.events import invalid_annotation
from gpuq_k8s.common.model.outlook import outlook_of
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quoting import quote
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.scheduler.cycle import Attempt, Scheduler, SchedulerSettings
from gpuq_k8s.scheduler.framework.registry import Registry
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins.priority import resolve_priority
from gpuq_k8s.scheduler.simulate.loader import Manifests, object_reference

BOUND: Final = "Bound"
PENDING: Final = "Pending"
PREEMPTED: Final = "Preempted"
_MAX_ROUNDS: Final = 1000
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def datetime(self) -> datetime:
        """Virtual wall-clock time (from the epoch), so statuses and output are deterministic."""
        return EPOCH + timedelta(seconds=self.now)


@runtime_checkable
class ReportContributor(Protocol):
    """A plugin that adds sections (``queues``, ``elasticQuotas``...) or per-pod fields to the report."""

    def report(self) -> Mapping[str, list[dict[str, Any]]]: ...

    def pod_fields(self, pod: PodInfo) -> Mapping[str, Any]: ...


@dataclass(slots=True)
class Simulation:
    scheduler: Scheduler
    backend: MemoryBackend
    input_pods: list[PodInfo]
    errors: list[str] = field(default_factory=list)


def build(
    manifests: Manifests, settings: SchedulerSettings, registry: Registry, *, explain: bool = False
) -> Simulation:
    clock = VirtualClock()
    backend = MemoryBackend()
    scheduler = Scheduler(
        settings, registry, backend, clock=clock, keep_attempts=explain, wall_clock=clock.datetime
    )
    backend.objects = scheduler.objects
    errors: list[str] = []
    for obj in manifests.objects:
        try:
            scheduler.put_object(obj)
        except GpuqError as err:
            # Semantics 3, as the cluster scheduler's feed does: an object the apiserver holds but a
            # plugin cannot read gets a Warning event and is treated as the plugin documents.
            scheduler.framework.record(invalid_annotation(object_reference(obj), str(err)))
    for node in manifests.nodes:
        scheduler.set_node(node)
    pods: list[PodInfo] = []
    for parsed in manifests.pods:
        try:
            pods.append(replace(parsed, priority=resolve_priority(parsed, scheduler.objects)))
        except GpuqError as err:
            errors.append(str(err))
    # Running pods first so the pending ones are scheduled against the cluster's real usage.
    for pod in pods:
        if pod.bound:
            if pod.node_name not in scheduler.cluster.row_of and pod.holds_resources:
                named = quote(pod.node_name)
                errors.append(
                    f"{pod.ref}: spec.nodeName: invalid value {named}: expected a Node of the input"
                )
                continue
            scheduler.add_pod(pod)
    for pod in pods:
        if not pod.bound:
            scheduler.add_pod(pod)
    return Simulation(scheduler, backend, pods, errors)


def prepare(
    manifests: Manifests, settings: Any, registry: Registry, *, explain: bool = False
) -> Simulation | list[str]:
    """:func:`build`, or the problems that stop the run (one line each): the input's, else the
    configuration's or the objects'."""
    if manifests.errors:
        return manifests.errors
    try:
        sim = build(manifests, settings, registry, explain=explain)
    except GpuqError as err:
        return [str(err)]
    return sim.errors or sim


def run(sim: Simulation, progress: Callable[[int], None] | None = None) -> None:
    """Schedule until nothing more can change."""
    scheduler = sim.scheduler
    clock = scheduler.clock
    assert isinstance(clock, VirtualClock)
    previous: tuple[tuple[str, str], ...] | None = None
    for _ in range(_MAX_ROUNDS):
        scheduler.run_enqueue()
        while True:
            attempt = scheduler.schedule_one()
            if attempt is None:
                if scheduler.run_enqueue():
                    continue
                break
            if progress is not None:
                progress(1)
        scheduler.reject_waiting()
        scheduler.sync_status()
        state = scheduler.fingerprint()
        upcoming = scheduler.queue.next_backoff()
        if upcoming is None or state == previous:
            break
        previous = state
        clock.now = max(clock.now, upcoming)
    scheduler.sync_status()


def _number(value: float) -> float | int:
    rounded = round(float(value), 6)
    return int(rounded) if rounded.is_integer() else rounded


def _explain(scheduler: Scheduler, attempt: Attempt) -> dict[str, Any]:
    cluster = scheduler.cluster
    filtered: dict[int, list[str]] = {}
    if attempt.outcome is None:
        reason = attempt.message
        for row in cluster.live_rows():
            filtered[row] = [reason]
    else:
        for _, result, first in attempt.outcome.results:
            if not first.any():
                continue
            for mask, message in result.reasons():
                for hit in np.flatnonzero(mask & first).tolist():
                    filtered.setdefault(hit, []).append(message)
            for hit in np.flatnonzero(first).tolist():
                filtered.setdefault(hit, [])
    nodes: dict[str, Any] = {}
    for row in sorted(cluster.live_rows(), key=lambda r: cluster.names[r]):
        name = cluster.names[row]
        if row in filtered:
            nodes[name] = {"filtered": ", ".join(filtered[row]) or "rejected", "scores": {}, "total": 0}
            continue
        scores = {plugin: _number(values[row]) for plugin, values in attempt.scores.items()}
        total = attempt.total[row] if attempt.total is not None else 0.0
        nodes[name] = {"filtered": None, "scores": scores, "total": _number(total)}
    return nodes


def report(sim: Simulation, *, explain: bool = False) -> dict[str, Any]:
    scheduler = sim.scheduler
    contributors = [p for p in scheduler.framework.plugins if isinstance(p, ReportContributor)]
    pods: list[dict[str, Any]] = []
    for pod in sorted(sim.input_pods, key=lambda p: (p.namespace, p.name)):
        entry: dict[str, Any] = {"namespace": pod.namespace, "name": pod.name, "outlook": None}
        bound = scheduler.cluster.pods.get(pod.key)
        if pod.key in scheduler.preempted:
            victim = scheduler.preempted[pod.key]
            entry.update(node=victim.node_name, phase=PREEMPTED, reason=sim.backend.evictions.get(pod.key))
            live = victim
        elif bound is not None:
            entry.update(node=bound.node_name, phase=BOUND, reason=None)
            live = bound
        else:
            reason = scheduler.reasons.get(pod.key)
            if reason is None and not scheduler.responsible_for(pod):
                reason = f"not scheduled by {scheduler.scheduler_name} (schedulerName {pod.scheduler_name})"
            elif reason is None and pod.terminal:
                reason = f"pod is {pod.phase}"
            elif reason is None:
                group = scheduler.podgroups.group_of(pod)
                refusal = scheduler.podgroups.enqueue_refusals.get(group.key, "") if group is not None else ""
                reason = (
                    f"{group.ref} is {group.phase}" + (f": {refusal}" if refusal else "")
                    if group is not None
                    else "not scheduled"
                )
            entry.update(node=None, phase=PENDING, reason=reason, outlook=outlook_of(reason))
            live = pod
        fields: dict[str, Any] = {"cardType": None}
        for contributor in contributors:
            fields.update(contributor.pod_fields(live))
        entry.update(fields)
        if explain and pod.key in scheduler.attempts and entry["phase"] != PREEMPTED:
            entry["nodes"] = _explain(scheduler, scheduler.attempts[pod.key])
        pods.append(entry)
    out: dict[str, Any] = {
        "pods": pods,
        "queues": [],
        "podGroups": [
            {"namespace": g.namespace, "name": g.name, "phase": g.phase}
            for _, g in sorted(scheduler.podgroups.groups.items())
        ],
        "elasticQuotas": [],
        "gpuResourceQuotas": [],
    }
    for contributor in contributors:
        for section, rows in contributor.report().items():
            out.setdefault(section, []).extend(rows)
    events: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str, str]] = set()
    for event in sim.backend.events:
        key = (event.obj, event.type, event.reason, event.message)
        if key in seen:
            continue
        seen.add(key)
        events.append(
            {"object": event.obj, "type": event.type, "reason": event.reason, "message": event.message}
        )
    out["events"] = events
    return out


def amounts(resources: Resources) -> dict[str, int | float]:
    """A resource vector as JSON numbers in each resource's own unit (the report's convention)."""
    return resources.to_numbers()


def load_errors(manifests: Manifests) -> Sequence[str]:
    return manifests.errors
