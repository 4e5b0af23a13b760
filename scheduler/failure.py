"""What a failed attempt leaves behind (kube-scheduler's ``handleSchedulingFailure`` and ``FitError``).

An unschedulable pod gets the PodScheduled=False condition (Unschedulable, with its nominated node
after a preemption), a FailedScheduling event, and is parked in the queue until an event that one of
the plugins that rejected it cares about; a failed bind is an error, not a verdict on the cluster:
the condition says SchedulerError and the pod is retried after its backoff (design.md "Data flow").
The last message per pod is kept for ``gpuq simulate``'s report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Final

import numpy as np

from gpuq_k8s.common.model.events import FAILED_SCHEDULING, EventRecord
from gpuq_k8s.common.model.outlook import NEVER_TEXT, NODE_TEXT, Outlook, capacity_outlook
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.backend import ClusterBackend
from gpuq_k8s.scheduler.cluster.state import ClusterState
from gpuq_k8s.scheduler.framework.handle import EventSink
from gpuq_k8s.scheduler.framework.results import BoolArray, FilterOutcome, PostFilterResult
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.queue import SchedulingQueue

UNSCHEDULABLE_REASON: Final = "Unschedulable"
SCHEDULER_ERROR_REASON: Final = "SchedulerError"


def fit_error(num_nodes: int, outcome: FilterOutcome | None, prefilter: Status | None, post: str = "") -> str:
    """kube-scheduler's FitError message: ``0/5 nodes are available: 2 ..., 3 Insufficient cpu.``

    Each node counts under the reasons of the first plugin that rejected it; the "count reason"
    strings are sorted, as kube-scheduler sorts them, so the message is stable.
    """
    message = f"0/{num_nodes} nodes are available:"
    if prefilter is not None and prefilter.reasons:
        message += f" {prefilter.message}."
    if outcome is not None:
        histogram: Counter[str] = Counter()
        for _, result, first in outcome.results:
            if not first.any():
                continue
            for mask, reason in result.reasons():
                count = int(np.count_nonzero(mask & first))
                if count:
                    histogram[reason] += count
        parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
        if parts:
            message += f" {', '.join(parts)}."
    if post:
        message += f" {post}"
    return message


def capacity_note(
    cluster: ClusterState,
    pod: PodInfo,
    outcome: FilterOutcome,
    message: str,
    dra_served: frozenset[str] = frozenset(),
) -> str:
    """The cluster's outlook for a pod no node could take (:mod:`common.model.outlook`), as a sentence
    to append to its FitError message; "" when node resources are not what stops it.

    Never: some resource is asked beyond every live node's allocatable. Waits for room: a node was
    short of a resource the pod asks (``Insufficient <resource>``), unless a quota already says the
    pod can never fit. Nothing when the pod waits for a node offering its card type (a node
    autoscaler adds it, with the resources the pod asks: Semantics 16)."""
    n = cluster.n
    alive = cluster.alive[:n]
    if not alive.any() or NODE_TEXT in message:
        return ""
    request = cluster.pod_vector(pod)
    columns = np.flatnonzero(request[: len(cluster.columns.names)]).tolist()
    # Extended resources DRA serves (DRAExtendedResource) need no allocatable: devices decide them.
    columns = [c for c in columns if cluster.columns.names[c] not in dra_served]
    largest: dict[int, int] = {}
    for column in columns:
        largest[column] = int(cluster.allocatable[:n, column][alive].max())
        if request[column] > largest[column]:
            resource = cluster.columns.names[column]
            return f" {_sentence(capacity_outlook(resource, int(request[column]), largest[column], 0))}"
    if "Insufficient " not in message or NEVER_TEXT in message.lower():
        return ""
    short: dict[str, BoolArray] = {}  # "Insufficient <resource>" -> the rows it rejected
    for _, result, first in outcome.results:
        if first.any():
            for mask, reason in result.reasons():
                if reason.startswith("Insufficient "):
                    short[reason] = short.get(reason, np.zeros_like(first)) | (mask & first)
    for column in columns:
        resource = cluster.columns.names[column]
        rejected = short.get(f"Insufficient {resource}")
        if rejected is None:
            continue
        # Only nodes that could hold the pod once emptied are waited for.
        asked = int(request[column])
        hit = rejected[:n] & (cluster.allocatable[:n, column] >= asked)
        if hit.any():
            most_free = int(cluster.free[:n, column][hit].max())
            return f" {_sentence(capacity_outlook(resource, asked, largest[column], most_free))}"
    return ""


def _sentence(outlook: Outlook) -> str:
    text = str(outlook)
    return f"{text[0].upper()}{text[1:]}."


class FailureHandler:
    """Reports failures through the backend and parks or requeues the pod; ``reasons`` keeps the
    last PodScheduled message per pod key (the scheduler forgets it when the pod is bound)."""

    def __init__(
        self,
        backend: ClusterBackend,
        queue: SchedulingQueue,
        record: EventSink,
        reasons: dict[str, str],
    ) -> None:
        self.backend = backend
        self.queue = queue
        self.record = record
        self.reasons = reasons

    def park(
        self, pod: PodInfo, message: str, rejected_by: Iterable[str], nominated: str | None = None
    ) -> None:
        """Unschedulable: condition, event, and parked until an event ``rejected_by`` cares about.
        ``nominated``: the pod's nominatedNodeName to write ("" clears it, None leaves it)."""
        self.reasons[pod.key] = message
        self.backend.set_pod_condition(pod, UNSCHEDULABLE_REASON, message, nominated)
        self.record(EventRecord(pod.ref, "Warning", FAILED_SCHEDULING, message))
        self.queue.unschedulable(pod, rejected_by, message)

    def unschedulable(
        self,
        pod: PodInfo,
        status: Status,
        outcome: FilterOutcome | None,
        post: PostFilterResult | None,
        message: str,
        *,
        nominated: str | None = None,
    ) -> None:
        """A failed attempt: ``pod`` is parked under the plugins that rejected it, with its
        nomination (``nominated``, as :meth:`park` writes it)."""
        rejected_by = {status.plugin} if status.plugin not in ("", "Filter", "PreFilter") else set()
        if outcome is not None:
            rejected_by |= {name for name, _, first in outcome.results if first.any()}
        self.park(pod, message, rejected_by, nominated)
        if post is not None and post.status.is_success and post.victims:
            # Victims were evicted: retry the preemptor now. Those the backend deleted at once are
            # gone and it fits; those terminating still count, and the retry parks it again (not
            # eligible to preempt twice) until their deletes arrive. Never without victims: nothing
            # changed, and the retry would loop.
            self.queue.activate(pod.key)

    def bind_failed(self, pod: PodInfo, message: str) -> None:
        """The bind of ``pod`` (unbound again, already unreserved) failed: retry after its backoff."""
        self.reasons[pod.key] = message
        self.backend.set_pod_condition(pod, SCHEDULER_ERROR_REASON, message)
        self.queue.requeue(pod)
