"""Pod topology spread (kube-scheduler 1.36 ``plugins/podtopologyspread``): a pod's constraints, the
system default constraints, and the Filter and Score rules over per-topology-domain counts.

**Constraints.** ``topologySpreadConstraints`` of the pod, each ``maxSkew``, ``topologyKey``,
``whenUnsatisfiable`` (``DoNotSchedule``: Filter; ``ScheduleAnyway``: Score), ``labelSelector`` (null:
no pod), ``minDomains`` (default 1), ``nodeAffinityPolicy`` (default ``Honor``: only nodes the pod's
nodeSelector and required node affinity select count), ``nodeTaintsPolicy`` (default ``Ignore``;
``Honor``: nodes with a NoSchedule/NoExecute taint the pod does not tolerate do not count) and
``matchLabelKeys`` (``key = value`` of each key the pod's labels hold, ANDed into the selector; kube's
``mergeLabelSetWithSelector``). Pods are counted in the incoming pod's namespace, never while being
deleted, and an empty selector counts none (kube's ``countPodsMatchSelector``).

**System defaults** (``defaultingType: System``, which Volcano's nodeorder uses): a pod with no
constraint at all gets ``kubernetes.io/hostname`` maxSkew 3 and ``topology.kubernetes.io/zone``
maxSkew 5, both ScheduleAnyway, selecting the pods its Services, ReplicationController, ReplicaSet
or StatefulSet select (:func:`default_selector`, kube's ``helper.DefaultSelector``); none when that
selector is empty.

**Filter**, per constraint in order (a node fails at the first): a node without the topology key is
UnschedulableAndUnresolvable (``missing required label``); else the matching pods in the node's domain,
plus 1 if the pod matches its own selector, minus the global minimum (the fewest matching pods in a
domain of an *eligible* node: one with every constraint's key that the inclusion policies admit; 0
when fewer than ``minDomains`` such domains exist) must not exceed ``maxSkew``.

**Score** over the candidate nodes (kube's ``PreScore``/``Score``/``NormalizeScore``): a node missing a
key of explicit constraints is ignored (scores 0); otherwise per constraint the matching pods in its
domain (for ``kubernetes.io/hostname`` those on the node itself) times ``log(domains + 2)`` plus
``maxSkew - 1``, summed and rounded; normalised as ``100 * (max + min - s) // max`` (100 everywhere
when max is 0), so the emptiest domain scores highest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.placement.label_selector import (
    EVERYTHING,
    IN,
    LabelSelector,
    Requirement,
    parse_selector,
    selector_from_set,
    selector_of,
)

BoolArray = npt.NDArray[np.bool_]
Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

CONSTRAINTS_NOT_MATCH: Final = "node(s) didn't match pod topology spread constraints"
NODE_LABEL_NOT_MATCH: Final = CONSTRAINTS_NOT_MATCH + " (missing required label)"
DO_NOT_SCHEDULE: Final = "DoNotSchedule"
SCHEDULE_ANYWAY: Final = "ScheduleAnyway"
HONOR: Final = "Honor"
IGNORE: Final = "Ignore"
HOSTNAME: Final = "kubernetes.io/hostname"
ZONE: Final = "topology.kubernetes.io/zone"
MAX_NODE_SCORE: Final = 100
_FIELDS: Final = frozenset(
    {
        "maxSkew",
        "topologyKey",
        "whenUnsatisfiable",
        "labelSelector",
        "minDomains",
        "nodeAffinityPolicy",
        "nodeTaintsPolicy",
        "matchLabelKeys",
    }
)
_FIELD: Final = "spec.topologySpreadConstraints"


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A parsed constraint (kube's internal ``topologySpreadConstraint``): a value, hashable."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str
    selector: LabelSelector
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE


# kube-scheduler's systemDefaultConstraints; their selector comes from the pod's owners.
SYSTEM_DEFAULTS: Final = (
    SpreadConstraint(3, HOSTNAME, SCHEDULE_ANYWAY, EVERYTHING),
    SpreadConstraint(5, ZONE, SCHEDULE_ANYWAY, EVERYTHING),
)


def _int(raw: Mapping[str, Any], key: str, where: str, at: str, *, default: int | None) -> int:
    value = raw.get(key)
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidValue(f"{at}.{key}", value, "an integer of at least 1", where)
    return value


def _choice(
    raw: Mapping[str, Any], key: str, choices: tuple[str, ...], *, default: str | None, where: str, at: str
) -> str:
    value = raw.get(key)
    if value is None and default is not None:
        return default
    if value not in choices:
        raise InvalidValue(f"{at}.{key}", value, f"one of {', '.join(choices)}", where)
    return str(value)


# Parsed constraints by (their text, the pod's labels when matchLabelKeys reads them): pods of a
# workload repeat them, and a pod is read at PreFilter and PreScore. Bounded; errors are never kept.
_PARSED: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[SpreadConstraint, ...]] = {}
_MAX_PARSED: Final = 4096


def pod_constraints(
    raw: Sequence[Any], labels: Mapping[str, str], where: str
) -> tuple[SpreadConstraint, ...]:
    """:func:`parse_constraints` of a pod the apiserver admitted, kept per distinct constraints."""
    text = repr(raw)
    key = (text, tuple(sorted(labels.items())) if "matchLabelKeys" in text else ())
    parsed = _PARSED.get(key)
    if parsed is None:
        parsed = parse_constraints(list(raw), labels, where)
        if len(_PARSED) >= _MAX_PARSED:
            _PARSED.clear()
        _PARSED[key] = parsed
    return parsed


def parse_constraints(
    raw: Any, labels: Mapping[str, str], where: str, *, admission: bool = False
) -> tuple[SpreadConstraint, ...]:
    """A pod's ``spec.topologySpreadConstraints`` (its ``labels`` feed ``matchLabelKeys``); a malformed
    constraint is an :class:`InvalidValue` naming the pod and the field. ``admission``: also what only
    the apiserver's validation refuses (two constraints of one topologyKey and whenUnsatisfiable,
    minDomains with ScheduleAnyway, matchLabelKeys without a labelSelector), for pods that never went
    through one; the scheduler, like kube-scheduler, takes the pods the apiserver admitted as they are."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidValue(_FIELD, raw, "a list of topology spread constraints", where)
    out: list[SpreadConstraint] = []
    seen: set[tuple[str, str]] = set()
    for i, item in enumerate(raw):
        at = f"{_FIELD}[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidValue(at, item, "a topology spread constraint", where)
        for name in item:
            if name not in _FIELDS:
                raise InvalidValue(f"{at}.{name}", item[name], f"one of {', '.join(sorted(_FIELDS))}", where)
        max_skew = _int(item, "maxSkew", where, at, default=None)
        key = item.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise InvalidValue(f"{at}.topologyKey", key, "a non-empty topology key (a node label)", where)
        when = _choice(
            item, "whenUnsatisfiable", (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY), default=None, where=where, at=at
        )
        if admission and (key, when) in seen:
            raise InvalidValue(f"{at}.topologyKey", key, f"one constraint per topologyKey and {when}", where)
        seen.add((key, when))
        min_domains = _int(item, "minDomains", where, at, default=1)
        if admission and item.get("minDomains") is not None and when != DO_NOT_SCHEDULE:
            raise InvalidValue(f"{at}.minDomains", item["minDomains"], f"unset with {when}", where)
        selector = parse_selector(item.get("labelSelector"), f"{at}.labelSelector", where)
        keys = item.get("matchLabelKeys")
        if keys is not None:
            if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
                raise InvalidValue(f"{at}.matchLabelKeys", keys, "a list of label keys", where)
            if admission and item.get("labelSelector") is None and keys:
                raise InvalidValue(f"{at}.matchLabelKeys", keys, "unset when labelSelector is not set", where)
            selector = merge_label_set(selector, {k: labels[k] for k in keys if k in labels})
        out.append(
            SpreadConstraint(
                max_skew,
                key,
                when,
                selector,
                min_domains,
                _choice(item, "nodeAffinityPolicy", (HONOR, IGNORE), default=HONOR, where=where, at=at),
                _choice(item, "nodeTaintsPolicy", (HONOR, IGNORE), default=IGNORE, where=where, at=at),
            )
        )
    return tuple(out)


def merge_label_set(selector: LabelSelector, labels: Mapping[str, str]) -> LabelSelector:
    """kube's ``mergeLabelSetWithSelector``: ``k = v`` of ``labels`` ANDed in (a null selector stays)."""
    if not labels or selector.nothing:
        return selector
    return selector.adding(Requirement(k, IN, frozenset({v})) for k, v in labels.items())


def apply_label_keys(raw: Sequence[Mapping[str, Any]], labels: Mapping[str, str]) -> list[Mapping[str, Any]]:
    """The constraints with ``matchLabelKeys`` merged into ``labelSelector.matchExpressions`` from
    the pod's ``labels``, as kube-apiserver 1.34+ does at creation (``applyMatchLabelKeys``)."""
    out: list[Mapping[str, Any]] = []
    for item in raw:
        keys = item.get("matchLabelKeys") if isinstance(item, Mapping) else None
        selector = item.get("labelSelector") if isinstance(item, Mapping) else None
        if not keys or not isinstance(keys, list) or not isinstance(selector, Mapping):
            out.append(item)
            continue
        expressions = list(selector.get("matchExpressions") or [])
        expressions.extend(
            {"key": k, "operator": IN, "values": [labels[k]]}
            for k in keys
            if isinstance(k, str) and k in labels
        )
        out.append({**item, "labelSelector": {**selector, "matchExpressions": expressions}})
    return out


def of_action(constraints: Iterable[SpreadConstraint], action: str) -> tuple[SpreadConstraint, ...]:
    return tuple(c for c in constraints if c.when_unsatisfiable == action)


# -- system defaults ---------------------------------------------------------------------------------

REPLICATION_CONTROLLER: Final = ("v1", "ReplicationController")
REPLICA_SET: Final = ("apps/v1", "ReplicaSet")
STATEFUL_SET: Final = ("apps/v1", "StatefulSet")


@dataclass(frozen=True, slots=True)
class Owner:
    """A pod's controller (the ownerReference with ``controller: true``)."""

    api_version: str
    kind: str
    name: str


def controller_of(owner_references: Sequence[Mapping[str, Any]]) -> Owner | None:
    """kube's ``metav1.GetControllerOf``."""
    for ref in owner_references:
        if ref.get("controller") is True:
            return Owner(
                str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""), str(ref.get("name") or "")
            )
    return None


def default_selector(
    labels: Mapping[str, str],
    service_selectors: Iterable[Mapping[str, str] | None],
    owner: tuple[str, str] | None,
    owner_selector: Any,
) -> LabelSelector:
    """kube's ``helper.DefaultSelector``: the selectors of the pod's namespace's Services that select
    it (a Service without a selector selects nothing), merged; then its controller's: a
    ReplicationController's ``spec.selector`` (a label map) merged in, a ReplicaSet's or StatefulSet's
    ``spec.selector`` (a label selector) ANDed in. ``owner`` is the controller's (apiVersion, kind),
    ``owner_selector`` its selector (None when it is not known); an unreadable one is skipped, as kube
    skips it."""
    merged: dict[str, str] = {}
    for selector in service_selectors:
        if selector is None:
            continue
        if all(labels.get(k) == v for k, v in selector.items()):
            merged.update(selector)
    result = selector_from_set(merged)
    if owner is None or owner_selector is None:
        return result
    if owner == REPLICATION_CONTROLLER:
        if isinstance(owner_selector, Mapping):
            merged.update({str(k): str(v) for k, v in owner_selector.items()})
            result = selector_from_set(merged)
    elif owner in (REPLICA_SET, STATEFUL_SET):
        try:
            other = parse_selector(owner_selector, "spec.selector")
        except InvalidValue:
            return result
        if not other.nothing:
            result = selector_of((*result.requirements, *other.requirements))
    return result


# -- Filter --------------------------------------------------------------------------------------------


def global_minimum(domain_counts: Int64Array, min_domains: int) -> int:
    """The global minimum of a constraint: the fewest matching pods in an eligible domain, 0 when
    fewer than ``min_domains`` eligible domains exist (``domain_counts``: one entry per domain)."""
    if domain_counts.shape[0] < min_domains or domain_counts.shape[0] == 0:
        return 0
    return int(domain_counts.min())


def skew_passes(count_at_node: Int64Array, self_match: bool, minimum: int, max_skew: int) -> BoolArray:
    """Rows whose domain may take the pod: ``matching + self - minimum <= maxSkew``."""
    limit = max_skew + minimum - (1 if self_match else 0)
    passes: BoolArray = count_at_node <= limit
    return passes


# -- Score ---------------------------------------------------------------------------------------------


def topology_normalizing_weight(size: int) -> float:
    """kube's ``topologyNormalizingWeight``: ``log(size + 2)``."""
    return math.log(size + 2)


def constraint_scores(counts: Int64Array, max_skew: int, weight: float) -> FloatArray:
    """kube's ``scoreForCount`` per row: ``count * weight + (maxSkew - 1)``."""
    scores: FloatArray = counts.astype(np.float64) * weight + float(max_skew - 1)
    return scores


def round_scores(total: FloatArray) -> Int64Array:
    """Go's ``math.Round`` (half away from zero) of non-negative scores (``total`` is consumed)."""
    total += 0.5
    np.floor(total, out=total)
    rounded: Int64Array = total.astype(np.int64)
    return rounded


def normalize_scores(raw: Int64Array, candidates: BoolArray, ignored: BoolArray | None) -> Int64Array:
    """PodTopologySpread's NormalizeScore over the candidate rows: ignored rows (None: none) 0, the
    others ``100 * (max + min - s) // max`` over the non-ignored candidates (100 when max is 0)."""
    scored = candidates if ignored is None else candidates & ~ignored
    out = np.zeros(raw.shape[0], dtype=np.int64)
    values = raw[scored]
    if not values.shape[0]:
        return out
    low, high = int(values.min()), int(values.max())
    if high == 0:
        out[scored] = MAX_NODE_SCORE
        return out
    out[scored] = MAX_NODE_SCORE * (high + low - values) // high
    return out
