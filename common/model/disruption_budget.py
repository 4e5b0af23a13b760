"""PodDisruptionBudgets (``policy/v1``) as preemption weighs them (design.md "Preemption").

kube-scheduler's DefaultPreemption prefers victims whose eviction violates no budget: it sorts the
pods it could evict on a node, most important first, and splits them into those whose eviction
would take some matching budget below zero and those it would not (``filterPodsWithPDBViolation``),
then gives back (reprieves) the violating ones first. A budget matches a pod of its namespace whose
labels its selector matches; a nil or empty selector matches nothing there (``selector.Empty()``), a
pod without labels matches no budget, and a pod already in the budget's ``status.disruptedPods``
(evicted through the Eviction API, not yet gone) does not count against it again.

What a budget allows is its ``status.disruptionsAllowed``, written by kube-controller-manager's
disruption controller; :class:`Budgets` reads it. A budget that has no status yet (a manifest of
``gpuq simulate``, or one the controller has not processed) has it derived from its spec as the
controller would, every bound pod it selects counted healthy (gpuq knows no readiness) and every
pod it selects, pending included, expected (gpuq knows no controller's scale)
(:func:`derived_disruptions_allowed`). kube-scheduler counts such a budget as allowing nothing.

Pure: the scheduler reads the objects and the pods (``Framework.disruption_budgets``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gpuq_k8s.common.model import kinds, wire
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.placement.label_selector import NOTHING, LabelSelector, parse_selector
from gpuq_k8s.common.model.pods import PodInfo

KIND: Final = kinds.POD_DISRUPTION_BUDGET.kind
_PERCENT: Final = re.compile(r"^(0|[1-9][0-9]*)%$")


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """One PodDisruptionBudget: its selector, its spec's bound and what its status allows.

    ``min_available`` and ``max_unavailable`` are an int or a percentage (``"50%"``); at most one is
    set. ``disruptions_allowed`` is None when the object has no status written by the controller.
    """

    namespace: str
    name: str
    selector: LabelSelector = NOTHING
    min_available: int | str | None = None
    max_unavailable: int | str | None = None
    disruptions_allowed: int | None = None
    disrupted_pods: frozenset[str] = field(default_factory=frozenset)

    @property
    def ref(self) -> str:
        return kinds.POD_DISRUPTION_BUDGET.ref(self.namespace, self.name)

    def selects(self, pod: PodInfo) -> bool:
        """Whether the budget covers ``pod`` for preemption (see the module doc): its namespace, a
        non-empty selector that matches the pod's labels, and the pod has labels."""
        selector = self.selector
        return (
            pod.namespace == self.namespace
            and bool(pod.labels)
            and not selector.empty
            and selector.matches(pod.labels)  # NOTHING (a nil selector) matches nothing
        )


def parse_disruption_budget(obj: Any) -> DisruptionBudget:
    """A PodDisruptionBudget API object parsed; an :class:`InvalidValue` naming it and the field when
    it is malformed (what the apiserver refuses: both bounds set, a negative or malformed bound, a
    malformed selector)."""
    _, spec, status, namespace, name, where = wire.object_parts(
        obj, KIND, namespaced=kinds.POD_DISRUPTION_BUDGET.namespaced
    )
    selector = parse_selector(spec.get("selector"), "spec.selector", where)
    min_available = _bound(spec.get("minAvailable"), "spec.minAvailable", where)
    max_unavailable = _bound(spec.get("maxUnavailable"), "spec.maxUnavailable", where)
    if min_available is not None and max_unavailable is not None:
        raise InvalidValue(
            "spec.maxUnavailable", max_unavailable, "unset when spec.minAvailable is set (at most one)", where
        )
    allowed = status.get("disruptionsAllowed")
    if allowed is not None and (isinstance(allowed, bool) or not isinstance(allowed, int) or allowed < 0):
        raise InvalidValue("status.disruptionsAllowed", allowed, "an integer >= 0", where)
    disrupted = wire.mapping(status.get("disruptedPods"), "status.disruptedPods", where)
    return DisruptionBudget(
        namespace=namespace,
        name=name,
        selector=selector,
        min_available=min_available,
        max_unavailable=max_unavailable,
        disruptions_allowed=allowed,
        disrupted_pods=frozenset(str(key) for key in disrupted),
    )


def _bound(value: Any, field_name: str, where: str) -> int | str | None:
    """An ``IntOrString`` bound: a non-negative integer or a percentage ``"<n>%"``."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidValue(field_name, value, "a non-negative integer or a percentage such as '50%'", where)
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and _PERCENT.match(value):
        return value
    raise InvalidValue(field_name, value, "a non-negative integer or a percentage such as '50%'", where)


def _scaled(bound: int | str, expected: int) -> int:
    """``intstr.GetScaledValueFromIntOrPercent(bound, expected, roundUp=true)``."""
    if isinstance(bound, int):
        return bound
    return math.ceil(int(bound[:-1]) * expected / 100)


def derived_disruptions_allowed(budget: DisruptionBudget, selected: Iterable[PodInfo]) -> int:
    """What the disruption controller would write for ``budget`` when ``selected`` (the pods it
    covers) are all the pods there are: bound pods are healthy, every selected pod is expected
    (``getExpectedPodCount``; a budget with neither bound allows every healthy pod)."""
    pods = list(selected)
    healthy = sum(1 for pod in pods if pod.holds_resources)
    expected = len(pods)
    if budget.max_unavailable is not None:
        desired = max(expected - _scaled(budget.max_unavailable, expected), 0)
    elif budget.min_available is not None:
        desired = _scaled(budget.min_available, expected)
    else:
        desired = 0
    return max(healthy - desired, 0)


class Budgets:
    """The budgets of a cluster with what each allows now, indexed by namespace.

    ``pods`` are the pods a derived budget counts (bound and pending); budgets with a status ignore
    them.
    """

    def __init__(self, budgets: Iterable[DisruptionBudget], pods: Iterable[PodInfo] = ()) -> None:
        self._by_namespace: dict[str, list[tuple[DisruptionBudget, int]]] = {}
        listed = list(budgets)
        derived = [b for b in listed if b.disruptions_allowed is None]
        pod_list = list(pods) if derived else []
        for budget in listed:
            allowed = budget.disruptions_allowed
            if allowed is None:
                allowed = derived_disruptions_allowed(budget, (p for p in pod_list if budget.selects(p)))
            self._by_namespace.setdefault(budget.namespace, []).append((budget, allowed))

    def __bool__(self) -> bool:
        return bool(self._by_namespace)

    def allowed(self) -> Mapping[str, int]:
        """``PodDisruptionBudget/ns/name`` -> disruptions allowed (for messages and tests)."""
        return {b.ref: n for entries in self._by_namespace.values() for b, n in entries}

    def split(self, pods: Sequence[PodInfo]) -> tuple[list[PodInfo], list[PodInfo]]:
        """``(violating, non_violating)``, each in the order given (kube's ``filterPodsWithPDBViolation``:
        walking ``pods`` in order, a pod is violating when taking it takes some budget that covers it
        below zero; a pod in a budget's ``disruptedPods`` is not counted against that budget)."""
        if not self._by_namespace:
            return [], list(pods)
        left: dict[tuple[str, str], int] = {}
        violating: list[PodInfo] = []
        fine: list[PodInfo] = []
        for pod in pods:
            violated = False
            for budget, allowed in self._by_namespace.get(pod.namespace, ()):
                if not budget.selects(pod) or pod.name in budget.disrupted_pods:
                    continue
                key = (budget.namespace, budget.name)
                left[key] = left.get(key, allowed) - 1
                if left[key] < 0:
                    violated = True
            (violating if violated else fine).append(pod)
        return violating, fine

    def violations(self, victims: Sequence[PodInfo]) -> int:
        """How many of ``victims`` (most important first) violate a budget if all are evicted."""
        return len(self.split(victims)[0])


NO_BUDGETS: Final = Budgets(())
