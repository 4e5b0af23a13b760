"""Scheduler metrics (design.md "Metrics"), in a registry of their own (tests build many).

Every name starts with ``gpuq_`` (never a name kube-scheduler exports, so both can be scraped by one
Prometheus), except the capacity-card design's ``volcano_queue_card_*``. No ``_created`` series.
Counters and histograms are updated as things happen. Gauges that mirror state (pending pods per
queue pool, per-queue card usage, quota usage) are computed at scrape time by a collector over the
live scheduler, so keeping them right costs nothing per pod and they can never drift from the state
they describe.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from gpuq_k8s.common.kube.metrics import register_build_info

SCHEDULED: Final = "scheduled"
UNSCHEDULABLE: Final = "unschedulable"
ERROR: Final = "error"
# The kinds the scheduler reads (scheduler/kube/feed.py REPLAY_ORDER).
OBJECT_KINDS: Final = (
    "Node", "Namespace", "PriorityClass", "Queue", "PodGroup", "ElasticQuota", "GPUResourceQuota", "Pod",
)  # fmt: skip

# kube-scheduler's buckets for attempt and extension-point latencies (exponential from 1 ms / 0.1 ms).
_ATTEMPT_BUCKETS: Final = tuple(0.001 * 2**i for i in range(15))
_POINT_BUCKETS: Final = tuple(0.0001 * 2**i for i in range(12))
# kube-scheduler's pod_scheduling_sli_duration_seconds buckets: 10 ms doubling to about 1.5 h.
_WAIT_BUCKETS: Final = tuple(0.01 * 2**i for i in range(20))
_Key = TypeVar("_Key", bound=tuple[str, ...])  # a gauge sample's label values


@dataclass(frozen=True, slots=True)
class QueueCardSample:
    queue: str
    card: str
    deserved: float
    allocated: float
    request: float
    capacity: float


@dataclass(slots=True)
class StateSnapshot:
    """What the scrape-time gauges show; the service fills it from the scheduler and its plugins."""

    pending: Mapping[str, int] = field(default_factory=dict)  # queue pool -> pods
    queue_pending: Mapping[str, int] = field(default_factory=dict)  # Volcano queue -> pending pods
    # Volcano queue -> seconds its longest-waiting pending pod has waited since its creation
    queue_longest_wait: Mapping[str, float] = field(default_factory=dict)
    queue_cards: Iterable[QueueCardSample] = ()
    gpu_quota_ratios: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (ns, type)
    elastic_used: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (ns, resource)
    elastic_min: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (ns, resource)
    elastic_max: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (ns, resource)
    elastic_min_over_capacity: Mapping[tuple[str], float] = field(default_factory=dict)  # (resource,)


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        counter = functools.partial(Counter, registry=self.registry)
        histogram = functools.partial(Histogram, registry=self.registry)
        self.attempts = counter(
            "gpuq_scheduler_schedule_attempts",
            "Scheduling attempts by result (scheduled, unschedulable, error).",
            ["result"],
        )
        self.attempt_duration = histogram(
            "gpuq_scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency (the cycle up to the bind being submitted).",
            buckets=_ATTEMPT_BUCKETS,
        )
        self.extension_point = histogram(
            "gpuq_scheduler_framework_extension_point_duration_seconds",
            "Latency of running all plugins of one extension point.",
            ["extension_point"],
            buckets=_POINT_BUCKETS,
        )
        self.wait = histogram(
            "gpuq_pod_scheduling_wait_seconds",
            "Seconds from a pod's creation to its bind succeeding, by Volcano queue (Semantics 7).",
            ["queue_name"],
            buckets=_WAIT_BUCKETS,
        )
        self.preemptions = counter(
            "gpuq_preemptions", "Pods preempted: evictions of victims the API accepted."
        )
        self.binds = counter(
            "gpuq_scheduler_binds", "Binding requests by outcome (ok, conflict, error).", ["result"]
        )
        self.status_writes = counter(
            "gpuq_scheduler_status_writes", "Batched status merge patches sent, by kind.", ["kind"]
        )
        self.internal_errors = counter(
            "gpuq_scheduler_internal_errors",
            "Errors of gpuq's own contained to one object (logged with the traceback, a Warning event "
            "on the object, the object skipped), by the object's kind.",
            ["kind"],
        )
        register_build_info(self.registry)
        for result in (SCHEDULED, UNSCHEDULABLE, ERROR):
            self.attempts.labels(result)
        for kind in OBJECT_KINDS:  # a 0 from the start, so increase() sees the first error
            self.internal_errors.labels(kind)
        self._snapshot: Callable[[], StateSnapshot] | None = None
        self.registry.register(_StateCollector(self))

    def observe(self, extension_point: str, seconds: float) -> None:
        """The framework's Observer hook."""
        self.extension_point.labels(extension_point).observe(seconds)

    def attempt(self, result: str, seconds: float) -> None:
        self.attempts.labels(result).inc()
        self.attempt_duration.observe(seconds)

    def waited(self, queue: str, seconds: float) -> None:
        """A pod of ``queue`` was bound ``seconds`` after its creation."""
        self.wait.labels(queue).observe(seconds)

    def watch(self, snapshot: Callable[[], StateSnapshot]) -> None:
        """Where the scrape-time gauges come from."""
        self._snapshot = snapshot


class _StateCollector(Collector):
    def __init__(self, metrics: SchedulerMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return list(self._families(StateSnapshot()))

    def collect(self) -> Iterable[Metric]:
        source = self.metrics._snapshot
        return list(self._families(source() if source is not None else StateSnapshot()))

    @staticmethod
    def _families(state: StateSnapshot) -> Iterator[Metric]:
        yield _gauge(
            "gpuq_scheduler_pending_pods",
            "Pending pods by scheduling queue pool (active, backoff, unschedulable; gated: "
            "spec.schedulingGates, or a PodGroup not yet Inqueue).",
            ["queue"],
            {(pool,): count for pool, count in state.pending.items()},
        )
        yield _gauge(
            "gpuq_queue_pending_pods",
            "Pods of gpuq not bound yet, by Volcano queue (Semantics 7); every known Queue, 0 included.",
            ["queue_name"],
            {(queue,): count for queue, count in state.queue_pending.items()},
        )
        yield _gauge(
            "gpuq_queue_pending_wait_seconds",
            "Seconds the longest-waiting pod of gpuq not bound yet has waited since its creation, by "
            "Volcano queue; every known Queue, 0 when none waits.",
            ["queue_name"],
            {(queue,): seconds for queue, seconds in state.queue_longest_wait.items()},
        )
        families = {
            name: GaugeMetricFamily(
                f"volcano_queue_card_{name}",
                f"Cards {text} per queue and card type.",
                labels=["queue_name", "card_name"],
            )
            for name, text in (
                ("deserved", "the queue deserves (its card quota)"),
                ("allocated", "allocated to bound pods"),
                ("request", "requested by the queue's pods, bound or pending"),
                ("capacity", "the queue may use at most"),
            )
        }
        for sample in state.queue_cards:
            labels = [sample.queue, sample.card]
            families["deserved"].add_metric(labels, sample.deserved)
            families["allocated"].add_metric(labels, sample.allocated)
            families["request"].add_metric(labels, sample.request)
            families["capacity"].add_metric(labels, sample.capacity)
        yield from families.values()
        yield _gauge(
            "gpuq_gpu_quota_usage_ratio",
            "GPUResourceQuota used / limit per namespace and resource type.",
            ["namespace", "resource_type"],
            state.gpu_quota_ratios,
        )
        yield _gauge(
            "gpuq_elastic_quota_used",
            "ElasticQuota usage per namespace, in the resource's own unit.",
            ["namespace", "resource"],
            state.elastic_used,
        )
        # The guarantee and the ceiling beside the usage: a dashboard shows who borrows and how close
        # each namespace is to its max without reading the ElasticQuota objects.
        for bound, values in (("min", state.elastic_min), ("max", state.elastic_max)):
            yield _gauge(
                f"gpuq_elastic_quota_{bound}",
                f"ElasticQuota spec.{bound} per namespace, in the resource's own unit.",
                ["namespace", "resource"],
                values,
            )
        yield _gauge(
            "gpuq_elastic_quota_min_over_capacity",
            "By how much the sum of every ElasticQuota's min exceeds what the nodes have allocatable, "
            "per resource some min lists, in the resource's own unit (0: it fits).",
            ["resource"],
            state.elastic_min_over_capacity,
        )


def _gauge(
    name: str, documentation: str, labels: list[str], samples: Mapping[_Key, float]
) -> GaugeMetricFamily:
    """A gauge family with one sample per ``samples`` entry (label values -> value), in label order."""
    family = GaugeMetricFamily(name, documentation, labels=labels)
    for values, value in sorted(samples.items()):
        family.add_metric(list(values), value)
    return family
