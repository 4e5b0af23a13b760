"""Kubernetes label selectors (``metav1.LabelSelector``) with ``metav1.LabelSelectorAsSelector``'s
semantics, shared by inter-pod affinity, topology spread and PodDisruptionBudgets.

* ``matchLabels`` and ``matchExpressions`` are ANDed; ``matchLabels: {k: v}`` is ``k In (v)``;
* ``In``: the label is present with one of the values; ``NotIn``: absent, or present with none of
  them; ``Exists`` / ``DoesNotExist``: present / absent;
* an empty selector (``{}``) matches every label set, a null one (an absent field) none
  (:data:`NOTHING`);
* ``In``/``NotIn`` need at least one value, ``Exists``/``DoesNotExist`` none, and another operator is
  refused, naming the field, as the apiserver's validation refuses it.

A :class:`LabelSelector` is a value: equal selectors (whatever the order their terms were written
in) are equal and hash alike, so per-selector results (the pod index's counts) are shared by every
pod that asks the same question.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpuq_k8s.common.model.errors import InvalidValue

IN: Final = "In"
NOT_IN: Final = "NotIn"
EXISTS: Final = "Exists"
DOES_NOT_EXIST: Final = "DoesNotExist"
OPERATORS: Final = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST)
_SELECTOR_KEYS: Final = frozenset({"matchLabels", "matchExpressions"})
# apimachinery's validation of label keys (a qualified name) and values.
_NAME: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_PREFIX: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
KEY_EXPECTED: Final = (
    "a label key: a name of at most 63 characters (alphanumerics, '-', '_', '.'), optionally "
)
KEY_EXPECTED_PREFIX: Final = "behind a DNS subdomain prefix and '/'"
VALUE_EXPECTED: Final = (
    "a label value: empty, or at most 63 characters (alphanumerics, '-', '_', '.') "
    "starting and ending with an alphanumeric"
)


def valid_key(key: str) -> bool:
    """A label key as apimachinery validates it (``[prefix/]name``)."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_NAME.match(name))


def valid_value(value: str) -> bool:
    return len(value) <= 63 and bool(_VALUE.match(value))


def _check(key: str, values: Iterable[str], where: str, key_at: str, value_at: str) -> None:
    if not valid_key(key):
        raise InvalidValue(key_at, key, KEY_EXPECTED + KEY_EXPECTED_PREFIX, where)
    for value in values:
        if not valid_value(value):
            raise InvalidValue(value_at, value, VALUE_EXPECTED, where)


_EXPRESSION_KEYS: Final = frozenset({"key", "operator", "values"})


@dataclass(frozen=True, slots=True)
class Requirement:
    """One requirement: ``key operator values``."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        operator = self.operator
        if operator == IN:
            value = labels.get(self.key)
            return value is not None and value in self.values
        if operator == NOT_IN:
            value = labels.get(self.key)
            return value is None or value not in self.values
        if operator == EXISTS:
            return self.key in labels
        return self.key not in labels

    def _sort_key(self) -> tuple[str, str, tuple[str, ...]]:
        return (self.key, self.operator, tuple(sorted(self.values)))


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed selector: every requirement must hold; ``nothing`` matches no label set at all."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False
    # ``k = v`` requirements (In with one value) checked first and fast; the rest after.
    _equal: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)
    _other: tuple[Requirement, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        equal = tuple(
            (r.key, next(iter(r.values)))
            for r in self.requirements
            if r.operator == IN and len(r.values) == 1
        )
        other = tuple(r for r in self.requirements if not (r.operator == IN and len(r.values) == 1))
        object.__setattr__(self, "_equal", equal)
        object.__setattr__(self, "_other", other)

    @property
    def empty(self) -> bool:
        """Matches everything (kube's ``Selector.Empty()``: no requirement, and not :data:`NOTHING`)."""
        return not self.requirements and not self.nothing

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        for key, value in self._equal:
            if labels.get(key) != value:
                return False
        return all(requirement.matches(labels) for requirement in self._other)

    def adding(self, requirements: Iterable[Requirement]) -> LabelSelector:
        """This selector with more requirements ANDed in (kube's ``Selector.Add``); NOTHING stays so."""
        if self.nothing:
            return self
        return selector_of((*self.requirements, *requirements))

    def __str__(self) -> str:
        if self.nothing:
            return "<none>"
        parts = []
        for r in self.requirements:
            values = ",".join(sorted(r.values))
            if r.operator == IN:
                parts.append(f"{r.key}={values}" if len(r.values) == 1 else f"{r.key} in ({values})")
            elif r.operator == NOT_IN:
                parts.append(f"{r.key} notin ({values})")
            elif r.operator == EXISTS:
                parts.append(r.key)
            else:
                parts.append(f"!{r.key}")
        return ",".join(parts)


def selector_of(requirements: Iterable[Requirement]) -> LabelSelector:
    """A selector of ``requirements`` in canonical order (duplicates dropped)."""
    unique = {r._sort_key(): r for r in requirements}
    return LabelSelector(tuple(unique[key] for key in sorted(unique)))


EVERYTHING: Final = LabelSelector()
NOTHING: Final = LabelSelector(nothing=True)


def selector_from_set(labels: Mapping[str, str]) -> LabelSelector:
    """``k = v`` for every entry (kube's ``labels.SelectorFromSet``); an empty set matches everything."""
    return selector_of(Requirement(str(k), IN, frozenset({str(v)})) for k, v in labels.items())


def _values(raw: Any, where: str, at: str) -> frozenset[str]:
    if raw is None:
        return frozenset()
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise InvalidValue(f"{at}.values", raw, "a list of strings", where)
    return frozenset(raw)


def _requirement(raw: Any, where: str, at: str) -> Requirement:
    if not isinstance(raw, Mapping):
        raise InvalidValue(at, raw, "a mapping with key, operator and values", where)
    for name in raw:
        if name not in _EXPRESSION_KEYS:
            raise InvalidValue(f"{at}.{name}", raw[name], "only the keys key, operator, values", where)
    key = raw.get("key")
    if not isinstance(key, str) or not key:
        raise InvalidValue(f"{at}.key", key, "a non-empty label key", where)
    operator = raw.get("operator")
    if operator not in OPERATORS:
        raise InvalidValue(f"{at}.operator", operator, f"one of {', '.join(OPERATORS)}", where)
    values = _values(raw.get("values"), where, at)
    _check(key, values, where, f"{at}.key", f"{at}.values")
    if operator in (IN, NOT_IN) and not values:
        raise InvalidValue(f"{at}.values", raw.get("values"), f"at least one value for {operator}", where)
    if operator in (EXISTS, DOES_NOT_EXIST) and values:
        raise InvalidValue(f"{at}.values", raw.get("values"), f"no values for {operator}", where)
    return Requirement(key, str(operator), values)


def parse_selector(raw: Any, at: str, where: str = "") -> LabelSelector:
    """A ``metav1.LabelSelector`` read from ``raw`` (``None``: :data:`NOTHING`); a malformed one is an
    :class:`InvalidValue` naming ``where`` (the object) and ``at`` (the field)."""
    if raw is None:
        return NOTHING
    if not isinstance(raw, Mapping):
        raise InvalidValue(at, raw, "a label selector (matchLabels and/or matchExpressions)", where)
    for name in raw:
        if name not in _SELECTOR_KEYS:
            raise InvalidValue(f"{at}.{name}", raw[name], "only matchLabels and matchExpressions", where)
    requirements: list[Requirement] = []
    match_labels = raw.get("matchLabels")
    if match_labels is not None:
        if not isinstance(match_labels, Mapping):
            raise InvalidValue(f"{at}.matchLabels", match_labels, "a map of label keys to values", where)
        for key, value in match_labels.items():
            if not isinstance(key, str) or not key or not isinstance(value, str):
                raise InvalidValue(
                    f"{at}.matchLabels[{key}]", value, "a string value under a label key", where
                )
            _check(key, (value,), where, f"{at}.matchLabels", f"{at}.matchLabels[{key}]")
            requirements.append(Requirement(key, IN, frozenset({value})))
    expressions = raw.get("matchExpressions")
    if expressions is not None:
        if not isinstance(expressions, list):
            raise InvalidValue(f"{at}.matchExpressions", expressions, "a list of requirements", where)
        requirements.extend(
            _requirement(expression, where, f"{at}.matchExpressions[{i}]")
            for i, expression in enumerate(expressions)
        )
    return selector_of(requirements)
