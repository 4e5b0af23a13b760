"""nodeSelector, required node affinity and tolerations, compiled once per pod, evaluated over all nodes.

Semantics follow kube-scheduler (``component-helpers/scheduling/corev1/nodeaffinity``): nodeSelector
entries are ANDed; ``nodeSelectorTerms`` are ORed, the expressions of a term ANDed; ``NotIn`` and
``DoesNotExist`` match a node without the label; ``Gt``/``Lt`` take exactly one integer and fail on
a label that is not an integer; an empty term list matches nothing; ``matchFields`` supports
``metadata.name``. Unknown keys and operators are errors naming the pod (kubectl's strict
validation): a misspelt ``requiredDuringSchedulingIgnoreDuringExecution`` silently dropped by an
apiserver would schedule the pod anywhere, which is the opposite of what its author asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.nodes import Taint
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cluster.state import ClusterState

BoolArray = npt.NDArray[np.bool_]

OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED: Final = "preferredDuringSchedulingIgnoredDuringExecution"
_SCHEDULE_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
UNSCHEDULABLE_TAINT: Final = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
NOT_READY_TAINT: Final = Taint("node.kubernetes.io/not-ready", "", "NoSchedule")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]
    field: bool = False  # matchFields (metadata.name) rather than labels


@dataclass(frozen=True, slots=True)
class NodeSelection:
    """A pod's hard node constraints, validated."""

    selector: tuple[tuple[str, str], ...]
    terms: tuple[tuple[Requirement, ...], ...] | None  # None: no required node affinity

    @property
    def unconstrained(self) -> bool:
        return not self.selector and self.terms is None


def _requirement(expr: Any, where: str, field: bool) -> Requirement:
    if not isinstance(expr, Mapping):
        raise InvalidValue(where, expr, "a mapping with key, operator and values")
    unknown = set(expr) - {"key", "operator", "values"}
    if unknown:
        bad = sorted(unknown)[0]
        raise InvalidValue(f"{where}.{bad}", expr[bad], "only the keys key, operator, values")
    key = expr.get("key")
    if not isinstance(key, str) or not key:
        raise InvalidValue(f"{where}.key", key, "a non-empty label key")
    operator = expr.get("operator")
    if operator not in OPERATORS or (field and operator not in ("In", "NotIn")):
        allowed = "In, NotIn" if field else ", ".join(OPERATORS)
        raise InvalidValue(f"{where}.operator", operator, f"one of {allowed}")
    values = expr.get("values") or []
    if not isinstance(values, list) or not all(isinstance(v, str | int) for v in values):
        raise InvalidValue(f"{where}.values", values, "a list of strings")
    texts = tuple(str(v) for v in values)
    if operator in ("In", "NotIn") and not texts:
        raise InvalidValue(f"{where}.values", values, f"at least one value for {operator}")
    if operator in ("Exists", "DoesNotExist") and texts:
        raise InvalidValue(f"{where}.values", values, f"no values for {operator}")
    if operator in ("Gt", "Lt"):
        if len(texts) != 1:
            raise InvalidValue(f"{where}.values", values, f"exactly one integer for {operator}")
        try:
            int(texts[0])
        except ValueError:
            raise InvalidValue(f"{where}.values", values, f"an integer for {operator}") from None
    if field and key != "metadata.name":
        raise InvalidValue(f"{where}.key", key, "metadata.name (the only supported field)")
    return Requirement(key, str(operator), texts, field)


def compile_selection(pod: PodInfo) -> NodeSelection:
    """Validate and compile ``pod``'s nodeSelector and required node affinity."""
    where = pod.ref
    selector = tuple(sorted((str(k), str(v)) for k, v in pod.node_selector.items()))
    terms: tuple[tuple[Requirement, ...], ...] | None = None
    node_affinity = (pod.affinity or {}).get("nodeAffinity")
    if node_affinity is not None:
        if not isinstance(node_affinity, Mapping):
            raise InvalidValue("spec.affinity.nodeAffinity", node_affinity, "a mapping", where)
        for key in node_affinity:
            if key not in (_REQUIRED, _PREFERRED):
                raise InvalidValue(
                    f"spec.affinity.nodeAffinity.{key}", "...", f"{_REQUIRED} or {_PREFERRED}", where
                )
        required = node_affinity.get(_REQUIRED)
        if required is not None:
            base = f"spec.affinity.nodeAffinity.{_REQUIRED}"
            if not isinstance(required, Mapping) or set(required) - {"nodeSelectorTerms"}:
                raise InvalidValue(base, required, "a mapping with nodeSelectorTerms", where)
            raw_terms = required.get("nodeSelectorTerms") or []
            if not isinstance(raw_terms, list):
                raise InvalidValue(f"{base}.nodeSelectorTerms", raw_terms, "a list of terms", where)
            compiled: list[tuple[Requirement, ...]] = []
            for t, term in enumerate(raw_terms):
                at = f"{base}.nodeSelectorTerms[{t}]"
                if not isinstance(term, Mapping) or set(term) - {"matchExpressions", "matchFields"}:
                    raise InvalidValue(at, term, "a mapping with matchExpressions and/or matchFields", where)
                try:
                    reqs = [
                        _requirement(e, f"{at}.matchExpressions[{i}]", False)
                        for i, e in enumerate(term.get("matchExpressions") or [])
                    ] + [
                        _requirement(e, f"{at}.matchFields[{i}]", True)
                        for i, e in enumerate(term.get("matchFields") or [])
                    ]
                except InvalidValue as err:
                    raise err.located(where) from None
                compiled.append(tuple(reqs))
            terms = tuple(compiled)
    return NodeSelection(selector, terms)


def compile_preferred(pod: PodInfo) -> tuple[tuple[int, tuple[Requirement, ...]], ...] | None:
    """``pod``'s preferred node affinity as (weight, requirements) terms; None when it has none.

    As kube's ``NewPreferredSchedulingTerms``: a term of weight 0 or with no expressions is dropped;
    a malformed term is an :class:`InvalidValue` naming the pod and the field.
    """
    node_affinity = (pod.affinity or {}).get("nodeAffinity")
    if not isinstance(node_affinity, Mapping) or node_affinity.get(_PREFERRED) is None:
        return None
    base = f"spec.affinity.nodeAffinity.{_PREFERRED}"
    raw = node_affinity[_PREFERRED]
    if not isinstance(raw, list):
        raise InvalidValue(base, raw, "a list of {weight, preference}", pod.ref)
    terms: list[tuple[int, tuple[Requirement, ...]]] = []
    for t, term in enumerate(raw):
        at = f"{base}[{t}]"
        if not isinstance(term, Mapping) or set(term) - {"weight", "preference"}:
            raise InvalidValue(at, term, "a mapping with weight and preference", pod.ref)
        weight = term.get("weight", 0)
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
            raise InvalidValue(f"{at}.weight", weight, "an integer from 0 to 100", pod.ref)
        preference = term.get("preference") or {}
        if not isinstance(preference, Mapping) or set(preference) - {"matchExpressions", "matchFields"}:
            raise InvalidValue(f"{at}.preference", preference, "a node selector term", pod.ref)
        try:
            reqs = tuple(
                [
                    _requirement(e, f"{at}.preference.matchExpressions[{i}]", False)
                    for i, e in enumerate(preference.get("matchExpressions") or [])
                ]
                + [
                    _requirement(e, f"{at}.preference.matchFields[{i}]", True)
                    for i, e in enumerate(preference.get("matchFields") or [])
                ]
            )
        except InvalidValue as err:
            raise err.located(pod.ref) from None
        if weight and reqs:
            terms.append((weight, reqs))
    return tuple(terms)


def term_mask(cluster: ClusterState, term: Sequence[Requirement], n: int) -> BoolArray:
    """Rows whose node matches every requirement of one node selector term."""
    mask = np.ones(n, dtype=np.bool_)
    for req in term:
        mask &= _requirement_mask(cluster, req, n)
    return mask


def _requirement_mask(cluster: ClusterState, req: Requirement, n: int) -> BoolArray:
    if req.field:
        mask = np.zeros(n, dtype=np.bool_)
        rows = [cluster.row_of[v] for v in req.values if v in cluster.row_of]
        mask[rows] = True
        return mask if req.operator == "In" else ~mask
    labels = cluster.labels
    if req.operator == "In":
        return labels.one_of(req.key, req.values, n)
    if req.operator == "NotIn":
        return ~labels.one_of(req.key, req.values, n)
    if req.operator == "Exists":
        return labels.exists(req.key, n)
    if req.operator == "DoesNotExist":
        return ~labels.exists(req.key, n)
    numbers = labels.numeric(req.key, n)
    bound = int(req.values[0])
    with np.errstate(invalid="ignore"):
        result: BoolArray = numbers > bound if req.operator == "Gt" else numbers < bound
    return result


def selection_mask(cluster: ClusterState, selection: NodeSelection, n: int) -> BoolArray:
    """Rows whose node satisfies the pod's nodeSelector and required node affinity."""
    mask = np.ones(n, dtype=np.bool_)
    for key, value in selection.selector:
        mask &= cluster.labels.equals(key, value, n)
    if selection.terms is not None:
        any_term = np.zeros(n, dtype=np.bool_)
        for term in selection.terms:
            if not term:
                continue  # an empty term matches no node
            any_term |= term_mask(cluster, term, n)
        mask &= any_term
    return mask


PREFER_NO_SCHEDULE: Final = "PreferNoSchedule"


def untolerated_preferences(cluster: ClusterState, pod: PodInfo) -> list[int]:
    """Ids of the cluster's distinct PreferNoSchedule taints the pod does not tolerate (kube's
    TaintToleration score: only tolerations with no effect or PreferNoSchedule count)."""
    prefer = [t for t in pod.tolerations if str(t.get("effect") or "") in ("", PREFER_NO_SCHEDULE)]
    return [
        tid
        for tid, taint in enumerate(cluster.taints)
        if taint.effect == PREFER_NO_SCHEDULE and not tolerates(prefer, taint)
    ]


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Taint) -> bool:
    """kube's ``Toleration.ToleratesTaint``."""
    for tol in tolerations:
        effect = str(tol.get("effect") or "")
        if effect and effect != taint.effect:
            continue
        key = str(tol.get("key") or "")
        operator = str(tol.get("operator") or "Equal")
        if operator == "Exists":
            if not key or key == taint.key:
                return True
        elif key == taint.key and str(tol.get("value") or "") == taint.value:
            return True
    return False


def untolerated_taints(cluster: ClusterState, pod: PodInfo) -> list[int]:
    """Ids of the cluster's distinct NoSchedule/NoExecute taints the pod does not tolerate."""
    return [
        tid
        for tid, taint in enumerate(cluster.taints)
        if taint.effect in _SCHEDULE_EFFECTS and not tolerates(pod.tolerations, taint)
    ]
