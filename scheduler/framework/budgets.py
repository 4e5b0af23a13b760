"""The PodDisruptionBudgets preemption weighs, read from the object store (the scheduler's informer,
``gpuq simulate``'s manifests, a live cluster read once) and parsed once per change.

A malformed budget (an object that predates validation or a manifest the apiserver would refuse)
gets a Warning event naming the field (design.md Semantics 3) and protects nothing, as kube-scheduler
ignores a budget whose selector it cannot convert. What each budget allows now is
:class:`~common.model.disruption_budget.Budgets`' to say.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.disruption_budget import (
    NO_BUDGETS,
    Budgets,
    DisruptionBudget,
    parse_disruption_budget,
)
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.events import invalid_annotation
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.framework.handle import EventSink


class BudgetView:
    """``budgets(pods)``: every readable PodDisruptionBudget with what it allows (``pods``: the bound
    and pending pods a budget without status counts, asked for only when one has no status)."""

    def __init__(self, objects: ObjectStore, record: EventSink) -> None:
        self._objects = objects
        self._record = record
        self._parsed: dict[tuple[str, str], DisruptionBudget | None] = {}
        for namespace, name, obj in objects.list(kinds.POD_DISRUPTION_BUDGET):
            self._changed(kinds.POD_DISRUPTION_BUDGET, namespace, name, obj)
        objects.subscribe(self._changed)

    def _changed(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        if kind is not kinds.POD_DISRUPTION_BUDGET:
            return
        key = (namespace, name)
        if obj is None:
            self._parsed.pop(key, None)
            return
        try:
            self._parsed[key] = parse_disruption_budget(obj)
        except GpuqError as err:
            self._parsed[key] = None
            self._record(invalid_annotation(kinds.POD_DISRUPTION_BUDGET.ref(namespace, name), str(err)))

    def budgets(self, pods: Callable[[], Iterable[PodInfo]]) -> Budgets:
        readable = [budget for _, budget in sorted(self._parsed.items()) if budget is not None]
        if not readable:
            return NO_BUDGETS
        if all(budget.disruptions_allowed is not None for budget in readable):
            return Budgets(readable)
        return Budgets(readable, pods())
