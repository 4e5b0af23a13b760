"""``v1.NodeSelector`` matched against one node: as ResourceSlices and devices use it (``nodeSelector``),
as a DRA allocation result carries it (``status.allocation.nodeSelector``), and as a PersistentVolume's
node affinity and a StorageClass's allowed topologies state it (the volume rules).

Semantics of ``component-helpers/scheduling/corev1/nodeaffinity``: terms are ORed, the requirements
of a term ANDed; an empty term list or a term without requirements matches nothing; ``NotIn`` and
``DoesNotExist`` match a node without the label; ``Gt``/``Lt`` compare one integer and do not match
a label that is not one; ``matchFields`` supports ``metadata.name`` with ``In``/``NotIn``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuq_k8s.common.model import wire
from gpuq_k8s.common.model.errors import InvalidValue

OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
NAME_FIELD: Final = "metadata.name"


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]
    field: bool = False  # matchFields (metadata.name) rather than labels

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if self.field:
            return (name in self.values) == (self.operator == "In")
        value = labels.get(self.key)
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        try:
            number = int(value) if value is not None else None
        except ValueError:
            return False
        bound = int(self.values[0])
        return number is not None and (number > bound if op == "Gt" else number < bound)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "operator": self.operator, "values": list(self.values)}


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """``terms``: each a tuple of requirements (expressions then fields)."""

    terms: tuple[tuple[Requirement, ...], ...]

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        return any(term and all(r.matches(name, labels) for r in term) for term in self.terms)

    def to_dict(self) -> dict[str, Any]:
        out = []
        for term in self.terms:
            item: dict[str, Any] = {}
            expressions = [r.to_dict() for r in term if not r.field]
            fields = [r.to_dict() for r in term if r.field]
            if expressions:
                item["matchExpressions"] = expressions
            if fields:
                item["matchFields"] = fields
            out.append(item)
        return {"nodeSelectorTerms": out}


def only_node(name: str) -> NodeSelector:
    """The selector of exactly one node (``metadata.name In [name]``)."""
    return NodeSelector(((Requirement(NAME_FIELD, "In", (name,), field=True),),))


def _requirement(raw: Any, at: str, where: str, field: bool) -> Requirement:
    item = wire.mapping(raw, at, where)
    key = item.get("key")
    if not isinstance(key, str) or not key:
        raise InvalidValue(f"{at}.key", key, "a non-empty key", where)
    operator = item.get("operator")
    if operator not in OPERATORS or (field and operator not in ("In", "NotIn")):
        allowed = "In, NotIn" if field else ", ".join(OPERATORS)
        raise InvalidValue(f"{at}.operator", operator, f"one of {allowed}", where)
    raw_values = item.get("values") or []
    if not isinstance(raw_values, list) or not all(isinstance(v, str) for v in raw_values):
        raise InvalidValue(f"{at}.values", raw_values, "a list of strings", where)
    values = tuple(raw_values)
    if operator in ("In", "NotIn") and not values:
        raise InvalidValue(f"{at}.values", raw_values, f"at least one value for {operator}", where)
    if operator in ("Exists", "DoesNotExist") and values:
        raise InvalidValue(f"{at}.values", raw_values, f"no values for {operator}", where)
    if operator in ("Gt", "Lt") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
        raise InvalidValue(f"{at}.values", raw_values, f"exactly one integer for {operator}", where)
    if field and key != NAME_FIELD:
        raise InvalidValue(f"{at}.key", key, f"{NAME_FIELD} (the only supported field)", where)
    return Requirement(key, str(operator), values, field)


def parse_node_selector(raw: Any, field: str, where: str) -> NodeSelector:
    """A ``v1.NodeSelector`` mapping; an :class:`InvalidValue` naming the field otherwise."""
    selector = wire.mapping(raw, field, where)
    terms = []
    for t, term in enumerate(
        wire.items(selector.get("nodeSelectorTerms"), f"{field}.nodeSelectorTerms", where)
    ):
        at = f"{field}.nodeSelectorTerms[{t}]"
        expressions = wire.items(term.get("matchExpressions"), f"{at}.matchExpressions", where)
        fields = wire.items(term.get("matchFields"), f"{at}.matchFields", where)
        terms.append(
            tuple(
                _requirement(e, f"{at}.matchExpressions[{i}]", where, False)
                for i, e in enumerate(expressions)
            )
            + tuple(_requirement(e, f"{at}.matchFields[{i}]", where, True) for i, e in enumerate(fields))
        )
    return NodeSelector(tuple(terms))
