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
import orjson

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.devices.generated import generate_claims
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.events import invalid_annotation
from gpuq_k8s.common.model.outlook import outlook_of
from gpuq_k8s.common.model.pods import DEFAULT_SCHEDULER, GPUQ_SCHEDULER, PodInfo
from gpuq_k8s.common.model.quoting import quote
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.scheduler.cycle import Attempt, Scheduler, SchedulerSettings
from gpuq_k8s.scheduler.framework.registry import Registry
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins.priority import resolve_priority
from gpuq_k8s.scheduler.queue import GATED as GATED_POOL
from gpuq_k8s.scheduler.simulate.loader import Manifests, object_reference

BOUND: Final = "Bound"
PENDING: Final = "Pending"
GATED: Final = "Gated"  # kept out by a PreEnqueue plugin (spec.schedulingGates): never attempted
PREEMPTED: Final = "Preempted"
REJECTED: Final = "Rejected"  # by --admission (gpuq_k8s/admission.py)
# ``--explain`` (the pods left Pending) and ``--explain=all`` (every pod).
EXPLAIN_PENDING: Final = "pending"
EXPLAIN_ALL: Final = "all"
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
    manifests: Manifests,
    settings: SchedulerSettings,
    registry: Registry,
    *,
    explain: bool = False,
    scheduler_name: str = GPUQ_SCHEDULER,
) -> Simulation:
    """The simulated cluster, its scheduler acting as ``scheduler_name`` (it schedules the pods whose
    schedulerName that is; bound pods of any scheduler count as usage)."""
    clock = VirtualClock()
    backend = MemoryBackend()
    scheduler = Scheduler(
        settings,
        registry,
        backend,
        clock=clock,
        keep_attempts=explain,
        wall_clock=clock.datetime,
        scheduler_name=scheduler_name,
    )
    backend.objects = scheduler.objects
    backend.cluster = scheduler.cluster
    errors: list[str] = []
    templates: dict[tuple[str, str], Mapping[str, Any]] = {}
    for obj in manifests.objects:
        if obj.get("kind") == kinds.RESOURCE_CLAIM_TEMPLATE.kind:
            meta = obj.get("metadata") or {}
            templates[(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))] = obj
            continue
        try:
            scheduler.put_object(_with_uid(obj))
        except GpuqError as err:
            # Semantics 3, as the cluster scheduler's feed does: an object the apiserver holds but a
            # plugin cannot read gets a Warning event and is treated as the plugin documents.
            scheduler.framework.record(invalid_annotation(object_reference(obj), str(err)))
    for node in manifests.nodes:
        scheduler.set_node(node)
    # The PV controller binds what it binds without a scheduler (claims of Immediate classes) before
    # any pod is tried, as in a cluster (scheduler/memory_backend.py).
    backend.run_controllers()
    pods: list[PodInfo] = []
    for parsed in manifests.pods:
        try:
            claiming = _with_generated_claims(scheduler, parsed, templates)
            pods.append(replace(claiming, priority=resolve_priority(claiming, scheduler.objects)))
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


def _with_generated_claims(
    scheduler: Scheduler, pod: PodInfo, templates: Mapping[tuple[str, str], Mapping[str, Any]]
) -> PodInfo:
    """The resource-claim-controller's part (common/model/devices/generated.py): a pending pod's claims
    from its ResourceClaimTemplates, stored; a pod with claims gets a UID if it has none (it owns
    them, and reservedFor names it by UID)."""
    if pod.claim_sources and not pod.uid:
        # reservedFor names the pod by UID, as the apiserver gives every pod one
        pod = replace(pod, uid=f"simulated-{pod.namespace}-{pod.name}")
    if pod.bound or not any(s.template is not None and s.claim is None for s in pod.claim_sources):
        return pod
    pod, claims = generate_claims(pod, lambda namespace, name: templates.get((namespace, name)))
    for claim in claims:
        if scheduler.objects.get(kinds.RESOURCE_CLAIM, pod.namespace, claim["metadata"]["name"]) is None:
            scheduler.put_object(claim)
    return pod


def _with_uid(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """A claim or volume of the input without a UID gets one, as the apiserver gives every object one:
    the PV controller binds a volume to a claim by its UID (``spec.claimRef.uid``)."""
    kind = obj.get("kind")
    meta = obj.get("metadata") or {}
    if kind not in (kinds.PERSISTENT_VOLUME_CLAIM.kind, kinds.PERSISTENT_VOLUME.kind) or meta.get("uid"):
        return obj
    namespace = f"{meta.get('namespace') or 'default'}-" if kind == kinds.PERSISTENT_VOLUME_CLAIM.kind else ""
    return {**obj, "metadata": {**meta, "uid": f"simulated-{namespace}{meta.get('name')}"}}


def prepare(
    manifests: Manifests,
    settings: Any,
    registry: Registry,
    *,
    explain: bool = False,
    scheduler_name: str = GPUQ_SCHEDULER,
) -> Simulation | list[str]:
    """:func:`build`, or the problems that stop the run (one line each): the input's, else the
    configuration's or the objects'."""
    if manifests.errors:
        return manifests.errors
    try:
        sim = build(manifests, settings, registry, explain=explain, scheduler_name=scheduler_name)
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
                if scheduler.run_enqueue() or scheduler.run_reserve():
                    continue
                break
            if progress is not None:
                progress(1)
        scheduler.reject_waiting()
        scheduler.sync_status()
        state = scheduler.fingerprint()
        upcoming = scheduler.queue.next_backoff()
        # A rolled-back gang wakes the pods its release can help at once (no backoff to wait for).
        ready = scheduler.queue.has_active()
        if (upcoming is None and not ready) or state == previous:
            break
        previous = state
        if upcoming is not None and not ready:
            clock.now = max(clock.now, upcoming)
    scheduler.sync_status()


def _explain(scheduler: Scheduler, attempt: Attempt) -> dict[str, Any]:
    """Node by node, the filter reasons or the plugins' scores of ``attempt``. Each score column is
    rounded and converted once (``tolist``), not element by element: with 500 nodes and 5,000 pods
    that is 2.5 million entries."""
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
                    detail = result.detail(hit) if result.detail is not None else None
                    filtered.setdefault(hit, []).append(f"{message} ({detail})" if detail else message)
            for hit in np.flatnonzero(first).tolist():
                filtered.setdefault(hit, [])
    columns = {plugin: _numbers(values) for plugin, values in attempt.scores.items()}
    totals = _numbers(attempt.total) if attempt.total is not None else None
    nodes: dict[str, Any] = {}
    for row in sorted(cluster.live_rows(), key=lambda r: cluster.names[r]):
        name = cluster.names[row]
        if row in filtered:
            nodes[name] = {"filtered": ", ".join(filtered[row]) or "rejected", "scores": {}, "total": 0}
            continue
        scores = {plugin: values[row] for plugin, values in columns.items()}
        nodes[name] = {"filtered": None, "scores": scores, "total": totals[row] if totals is not None else 0}
    return nodes


def _numbers(values: Any) -> list[float | int]:
    """A score column as the report's numbers, rounded to 6 decimals, whole numbers as integers."""
    rounded = np.round(np.asarray(values, dtype=np.float64), 6).tolist()
    return [int(v) if v.is_integer() else v for v in rounded]


def explains(entry: Mapping[str, Any], mode: str | None) -> bool:
    """Whether ``--explain=<mode>`` explains this report entry: ``all`` every pod, ``pending`` (the
    default of ``--explain``) the pods left Pending."""
    return mode == EXPLAIN_ALL or (mode == EXPLAIN_PENDING and entry["phase"] == PENDING)


def node_detail(sim: Simulation, entry: Mapping[str, Any]) -> dict[str, Any] | None:
    """The per-node detail of one report entry (``"nodes"``), None when it has none (no attempt kept,
    or the pod was preempted)."""
    key = f"{entry['namespace']}/{entry['name']}"
    attempt = sim.scheduler.attempts.get(key)
    if attempt is None or entry["phase"] == PREEMPTED:
        return None
    return _explain(sim.scheduler, attempt)


def _not_ours(scheduler: Scheduler, pod: PodInfo) -> str:
    """design.md "gpuq simulate": a pod of another scheduler is reported, not scheduled."""
    named = pod.scheduler_name
    if named == DEFAULT_SCHEDULER:
        named += " (the apiserver's default when spec.schedulerName is unset)"
    return f"not scheduled by gpuq: schedulerName {named}, not {scheduler.scheduler_name}"


def report(sim: Simulation, *, explain: bool | str | None = False) -> dict[str, Any]:
    """The report (design.md "gpuq simulate"). ``explain``: which pods carry their per-node detail
    (``"all"`` or True, ``"pending"``; none by default): a large run streams it instead, pod by pod
    (:func:`node_detail`, as ``gpuq simulate --explain`` writes it)."""
    mode = EXPLAIN_ALL if explain is True else (explain or None)
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
        elif (queued := scheduler.queue.get(pod.key)) is not None and queued.pool == GATED_POOL:
            entry.update(node=None, phase=GATED, reason=queued.message)
            live = pod
        else:
            reason = scheduler.reasons.get(pod.key)
            if reason is None and not scheduler.responsible_for(pod):
                reason = _not_ours(scheduler, pod)
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
        if explains(entry, mode):
            detail = node_detail(sim, entry)
            if detail is not None:
                entry["nodes"] = detail
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


def write_json(
    out: Mapping[str, Any],
    write: Callable[[str], Any],
    detail: Callable[[Mapping[str, Any]], dict[str, Any] | None] | None = None,
) -> None:
    """``out`` as JSON indented by two spaces, written piece by piece: each pod's entry, with
    ``detail(entry)`` as its ``"nodes"`` when that is not None, is made, written and dropped, so
    ``--explain=all`` at 5,000 pods x 500 nodes never holds the 2.5 million node entries at once.
    orjson writes each piece (the standard library's encoder runs in pure Python when it indents)."""
    pods = out["pods"]
    write('{\n  "pods": [')
    for index, pod in enumerate(pods):
        nodes = detail(pod) if detail is not None else None
        entry = {**pod, "nodes": nodes} if nodes is not None else pod
        text = orjson.dumps(entry, option=orjson.OPT_INDENT_2).decode()
        write(("," if index else "") + "\n    " + text.replace("\n", "\n    "))
    write("\n  ]" if pods else "]")
    for key, value in out.items():
        if key != "pods":
            text = orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
            write(f',\n  "{key}": ' + text.replace("\n", "\n  "))
    write("\n}\n")


def amounts(resources: Resources) -> dict[str, int | float]:
    """A resource vector as JSON numbers in each resource's own unit (the report's convention)."""
    return resources.to_numbers()


def load_errors(manifests: Manifests) -> Sequence[str]:
    return manifests.errors
