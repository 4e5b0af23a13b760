"""The scrape-time quota gauges, read from the quota engines.

The engines live inside the plugins (``capacity-scheduling`` holds an
:class:`~common.model.elastic.ledger.ElasticQuotaInfos`, ``gpu-quota`` a
:class:`~common.model.gpu_quota.store.GPUQuotaStore`, ``capacity-card`` a
:class:`~common.model.capacity_card.engine.CapacityCard`); they are found by type and only read here.
Status writes are the scheduler's own batched ``sync_status``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.capacity_card.engine import CapacityCard
from gpuq_k8s.common.model.elastic.ledger import ElasticQuotaInfos
from gpuq_k8s.common.model.gpu_quota.store import GPUQuotaStore
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.quantity import units_to_number
from gpuq_k8s.common.model.queues import queue_of
from gpuq_k8s.common.model.wire import rfc3339_seconds
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.metrics import QueueCardSample, StateSnapshot

T = TypeVar("T")


@runtime_checkable
class GuaranteedPool(Protocol):
    """The capacity-scheduling plugin's view of the sum of ElasticQuota min against the nodes."""

    def min_over_capacity(self) -> dict[str, int]: ...


def find_engine(scheduler: Scheduler, cls: type[T]) -> T | None:
    """The first engine of type ``cls`` held by a configured plugin (None when not configured)."""
    for plugin in scheduler.framework.plugins:
        for value in _attributes(plugin):
            if isinstance(value, cls):
                return value
    return None


def _attributes(obj: object) -> Iterator[Any]:
    if hasattr(obj, "__dict__"):
        yield from vars(obj).values()
    for slot in getattr(type(obj), "__slots__", ()):
        if hasattr(obj, slot):
            yield getattr(obj, slot)


@dataclass(slots=True)
class QuotaStatus:
    """Status sync and metric samples for one scheduler."""

    scheduler: Scheduler
    elastic: ElasticQuotaInfos | None = None
    gpu: GPUQuotaStore | None = None
    cards: CapacityCard | None = None
    gpu_ratios: dict[tuple[str, str], float] = field(default_factory=dict)
    wall_clock: Callable[[], float] = time.time

    @classmethod
    def of(cls, scheduler: Scheduler) -> QuotaStatus:
        return cls(
            scheduler,
            find_engine(scheduler, ElasticQuotaInfos),
            find_engine(scheduler, GPUQuotaStore),
            find_engine(scheduler, CapacityCard),
        )

    def observe_status(self, kind: Kind, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Every status the scheduler writes passes here: a GPUResourceQuota's ``availablePercent``
        (two decimals, per limited resource) gives ``gpuq_gpu_quota_usage_ratio`` without asking the store
        again (its ``status()`` is stateful: it emits the threshold event once)."""
        if kind != kinds.GPU_RESOURCE_QUOTA:
            return
        for resource, percent in (status.get("availablePercent") or {}).items():
            try:
                self.gpu_ratios[(namespace, str(resource))] = round(1.0 - float(percent) / 100.0, 6)
            except (TypeError, ValueError):
                continue

    def snapshot(self) -> StateSnapshot:
        """The scrape-time gauges."""
        queue = self.scheduler.queue
        pools = {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}
        for queued in queue.pods():
            pool = queued.pool if queued.pool in pools else "active"
            pools[pool] += 1
        # Gated: kept out by a PreEnqueue plugin (spec.schedulingGates: the queue's gated pool, counted
        # above), and held for a PodGroup not yet Inqueue (kube-scheduler gates those too).
        held = self.scheduler.podgroups.held
        pools["gated"] += sum(1 for keys in held.values() for key in keys if queue.get(key) is None)
        samples: list[QueueCardSample] = []
        if self.cards is not None:
            samples = [
                QueueCardSample(m.queue, m.card, m.deserved, m.allocated, m.request, m.capacity)
                for m in self.cards.metrics()
            ]
        used: dict[tuple[str, str], float] = {}
        lower: dict[tuple[str, str], float] = {}
        upper: dict[tuple[str, str], float] = {}
        if self.elastic is not None:
            for namespace in self.elastic.namespaces():
                for resource, amount in self.elastic.used_numbers(namespace).items():
                    used[(namespace, resource)] = float(amount)
                info = self.elastic.get(namespace)
                if info is not None:
                    for resource, amount in info.min.to_numbers().items():
                        lower[(namespace, resource)] = float(amount)
                    for resource, amount in info.max.to_numbers().items():
                        upper[(namespace, resource)] = float(amount)
        # A quota deleted since its last status write no longer has a ratio.
        live = set(self.gpu.namespaces()) if self.gpu is not None else {ns for ns, _ in self.gpu_ratios}
        ratios = {k: v for k, v in self.gpu_ratios.items() if k[0] in live}
        over: dict[tuple[str], float] = {}
        plugin = self.scheduler.framework.plugin(plugin_names.CAPACITY_SCHEDULING)
        if isinstance(plugin, GuaranteedPool):
            over = {
                (resource,): float(units_to_number(resource, amount))
                for resource, amount in plugin.min_over_capacity().items()
            }
        pending, longest = self.queue_pending_and_wait()
        return StateSnapshot(pools, pending, longest, samples, ratios, used, lower, upper, over)

    def queue_pending(self) -> dict[str, int]:
        return self.queue_pending_and_wait()[0]

    def queue_pending_and_wait(self) -> tuple[dict[str, int], dict[str, float]]:
        """Pods of ours not placed yet (held by their PodGroup or in the scheduling queue; not those
        assumed on a node, waiting in Permit or being bound) per Volcano queue (Semantics 7), and the
        longest any of them has waited since its creation. Every known Queue is listed, 0 included,
        so a panel or an alert sees a queue before its first wait."""
        scheduler = self.scheduler
        counts = {name: 0 for _, name, _ in scheduler.objects.list(kinds.QUEUE)}
        longest = dict.fromkeys(counts, 0.0)
        groups = {key: g.model for key, g in scheduler.podgroups.groups.items() if g.model is not None}
        assumed = scheduler.cluster.pods
        now = self.wall_clock()
        for key, pod in scheduler.pending.items():
            if key not in assumed:
                queue = queue_of(pod, groups)
                counts[queue] = counts.get(queue, 0) + 1
                created = rfc3339_seconds(pod.creation_timestamp)
                waited = max(0.0, now - created) if created is not None else 0.0
                longest[queue] = max(longest.get(queue, 0.0), waited)
        return counts, longest
