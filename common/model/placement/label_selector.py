"""Label selectors (``metav1.LabelSelector``) as kube-scheduler reads them: ``matchLabels`` and
``matchExpressions`` with ``In``, ``NotIn``, ``Exists`` and ``DoesNotExist``, every requirement ANDed
(``metav1.LabelSelectorAsSelector`` and ``labels.Selector.Matches``).

Shared by every rule that selects pods by label: PodDisruptionBudgets (preemption), inter-pod affinity
and topology spread. A selector is parsed once (:func:`parse_label_selector`); a malformed one is an
:class:`~common.model.errors.InvalidValue` naming the object and the field, as kube's conversion
refuses it (``In`` or ``NotIn`` without values, ``Exists`` with values, an unknown operator).

A *nil* selector (the field absent) is ``None`` at the call sites: what it means is each rule's
(a PodDisruptionBudget's selects nothing). An *empty* selector (``{}``) has no requirements and
matches every label set; :attr:`LabelSelector.empty` tells it apart where a rule treats it specially
(kube-scheduler's preemption ignores a PodDisruptionBudget whose selector is empty).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuq_k8s.common.model import wire
from gpuq_k8s.common.model.errors import InvalidValue

IN: Final = "In"
NOT_IN: Final = "NotIn"
EXISTS: Final = "Exists"
DOES_NOT_EXIST: Final = "DoesNotExist"
OPERATORS: Final = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST)


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``key <operator> values`` requirement (``matchLabels`` entries are ``In`` one value)."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == IN:
            return value is not None and value in self.values
        if self.operator == NOT_IN:
            return value is None or value not in self.values
        if self.operator == EXISTS:
            return value is not None
        return value is None  # DoesNotExist


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """Requirements that must all hold; none at all (``{}``) matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        """``{}``: no requirement (kube's ``Selector.Empty()``)."""
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.requirements)


EVERYTHING: Final = LabelSelector()


def parse_label_selector(raw: Any, field: str, where: str = "") -> LabelSelector | None:
    """``raw`` (a ``LabelSelector`` as decoded JSON) parsed; ``None`` for a nil selector.

    Requirements are kept in kube's order: ``matchLabels`` by key, then ``matchExpressions`` as
    written (matching ANDs them, so the order only shows in messages)."""
    if raw is None:
        return None
    selector = wire.mapping(raw, field, where)
    for key in selector:
        if key not in ("matchLabels", "matchExpressions"):
            raise InvalidValue(f"{field}.{key}", selector[key], "matchLabels or matchExpressions", where)
    match_labels = wire.string_map(selector.get("matchLabels"), f"{field}.matchLabels", where)
    requirements = [Requirement(key, IN, frozenset((value,))) for key, value in sorted(match_labels.items())]
    expressions = wire.items(selector.get("matchExpressions"), f"{field}.matchExpressions", where)
    for i, expression in enumerate(expressions):
        requirements.append(_expression(expression, f"{field}.matchExpressions[{i}]", where))
    return LabelSelector(tuple(requirements))


def _expression(expression: Mapping[str, Any], at: str, where: str) -> Requirement:
    key = expression.get("key")
    if not isinstance(key, str) or not key:
        raise InvalidValue(f"{at}.key", key, "a non-empty label key", where)
    operator = expression.get("operator")
    if operator not in OPERATORS:
        raise InvalidValue(f"{at}.operator", operator, f"one of {', '.join(OPERATORS)}", where)
    raw_values = expression.get("values")
    if raw_values is None:
        raw_values = []
    if not isinstance(raw_values, list) or not all(isinstance(v, str) for v in raw_values):
        raise InvalidValue(f"{at}.values", raw_values, "a list of strings", where)
    if operator in (IN, NOT_IN) and not raw_values:
        raise InvalidValue(f"{at}.values", raw_values, f"at least one value for {operator}", where)
    if operator in (EXISTS, DOES_NOT_EXIST) and raw_values:
        raise InvalidValue(f"{at}.values", raw_values, f"no values for {operator}", where)
    return Requirement(key, str(operator), frozenset(raw_values))
