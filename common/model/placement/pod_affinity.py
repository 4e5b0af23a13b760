"""Inter-pod affinity and anti-affinity (kube-scheduler 1.36 ``plugins/interpodaffinity``,
``k8s.io/kube-scheduler/framework`` ``AffinityTerm``): the terms of a pod, whom a term matches, and the
Filter and Score rules over per-topology-domain counts.

**Terms.** A ``PodAffinityTerm`` selects pods by ``labelSelector`` (null: none) in ``namespaces`` (none
listed and no ``namespaceSelector``: the pod's own namespace) or in the namespaces whose labels
``namespaceSelector`` selects (``{}``: every namespace), and groups nodes by ``topologyKey``. The
incoming pod's own terms have their namespace selector resolved into names once per attempt
(:meth:`AffinityTerm.resolved`, kube's ``mergeAffinityTermNamespacesIfNotEmpty``); an existing pod's
terms are matched against the incoming pod's namespace labels (:meth:`AffinityTerm.matches`).

**matchLabelKeys / mismatchLabelKeys** are merged into the term's selector when the pod is created
(kube-apiserver 1.33+, ``applyMatchLabelKeysAndMismatchLabelKeys``: ``key In (value)`` /
``key NotIn (value)`` for each key the pod's labels hold), so the scheduler reads the merged selector.
:func:`apply_label_keys` is that merge, for pods that never went through an apiserver (``gpuq
simulate``'s manifests).

**Filter** (``satisfyPodAffinity``, ``satisfyPodAntiAffinity``, ``satisfyExistingPodsAntiAffinity``), per
node, in this order (a node is reported under the first it fails):

1. required affinity: the node has every term's topology key, and in each term's domain of the node
   there is an existing pod matching *all* the terms; unless no existing pod matching all the terms
   is in any domain and the pod matches all its own terms (the first pod of a self-affine group):
   then any node with every key passes. Failing it is UnschedulableAndUnresolvable.
2. required anti-affinity: no existing pod matching a term in that term's domain of the node.
3. existing pods' required anti-affinity: no existing pod whose anti-affinity term matches the
   incoming pod in that term's domain of the node (kube's ``existingAntiAffinityCounts``).

**Score** (``processExistingPod``): per topology domain, the sum over existing pods of the incoming
pod's preferred affinity weights (minus anti-affinity weights) of the terms that match them, plus the
weights of the existing pods' preferred terms that match the incoming pod (affinity plus,
anti-affinity minus) and ``hardPodAffinityWeight`` per required affinity term of an existing pod that
matches it; a node's score is the sum over the domains it is in, normalised over the candidate nodes
to ``100 * (s - min) / (max - min)`` (0 everywhere when all are equal).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.placement.label_selector import (
    IN,
    NOT_IN,
    NOTHING,
    LabelSelector,
    parse_selector,
)

BoolArray = npt.NDArray[np.bool_]
Int64Array = npt.NDArray[np.int64]

AFFINITY_RULES_NOT_MATCH: Final = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_RULES_NOT_MATCH: Final = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH: Final = "node(s) didn't satisfy existing pods anti-affinity rules"
MAX_NODE_SCORE: Final = 100
# kube-scheduler's InterPodAffinityArgs.hardPodAffinityWeight default (and its bounds).
DEFAULT_HARD_POD_AFFINITY_WEIGHT: Final = 1
MAX_HARD_POD_AFFINITY_WEIGHT: Final = 100

POD_AFFINITY: Final = "podAffinity"
POD_ANTI_AFFINITY: Final = "podAntiAffinity"
REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED: Final = "preferredDuringSchedulingIgnoredDuringExecution"
_TERM_KEYS: Final = frozenset(
    {"labelSelector", "namespaces", "topologyKey", "namespaceSelector", "matchLabelKeys", "mismatchLabelKeys"}
)
_WEIGHTED_KEYS: Final = frozenset({"weight", "podAffinityTerm"})


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A parsed ``PodAffinityTerm`` (kube's ``fwk.AffinityTerm``): a value, hashable."""

    selector: LabelSelector
    namespaces: frozenset[str]
    namespace_selector: LabelSelector
    topology_key: str

    @property
    def any_namespace(self) -> bool:
        """The term selects pods of every namespace (``namespaceSelector: {}``)."""
        return self.namespace_selector.empty

    def matches(self, namespace: str, labels: Mapping[str, str], namespace_labels: Mapping[str, str]) -> bool:
        """kube's ``AffinityTerm.Matches``: a pod of ``namespace`` (whose Namespace has
        ``namespace_labels``) with ``labels``."""
        if namespace in self.namespaces or self.namespace_selector.matches(namespace_labels):
            return self.selector.matches(labels)
        return False

    def resolved(self, namespaces_matching: Callable[[LabelSelector], frozenset[str]]) -> AffinityTerm:
        """The incoming pod's form: a non-empty namespace selector replaced by the names of the
        namespaces it selects now (kube's ``mergeAffinityTermNamespacesIfNotEmpty``); ``{}`` stays
        (every namespace)."""
        selector = self.namespace_selector
        if selector.empty or selector.nothing:
            return self
        return AffinityTerm(
            self.selector, self.namespaces | namespaces_matching(selector), NOTHING, self.topology_key
        )

    def matches_resolved(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """:meth:`matches` of a :meth:`resolved` term (its namespaces are names, or every one)."""
        if namespace in self.namespaces or self.namespace_selector.empty:
            return self.selector.matches(labels)
        return False


@dataclass(frozen=True, slots=True)
class WeightedTerm:
    term: AffinityTerm
    weight: int


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """A pod's inter-pod terms: required and preferred, affinity and anti-affinity."""

    required: tuple[AffinityTerm, ...] = ()
    anti_required: tuple[AffinityTerm, ...] = ()
    preferred: tuple[WeightedTerm, ...] = ()
    anti_preferred: tuple[WeightedTerm, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.required or self.anti_required or self.preferred or self.anti_preferred)

    @property
    def has_preferred(self) -> bool:
        return bool(self.preferred or self.anti_preferred)


NO_AFFINITY: Final = PodAffinity()


def _strings(raw: Any, where: str, at: str) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(v, str) and v for v in raw):
        raise InvalidValue(at, raw, "a list of non-empty strings", where)
    return list(raw)


def parse_term(raw: Any, namespace: str, where: str, at: str) -> AffinityTerm:
    """One ``PodAffinityTerm`` of a pod in ``namespace``; malformed: an :class:`InvalidValue`."""
    if not isinstance(raw, Mapping):
        raise InvalidValue(at, raw, "a pod affinity term (labelSelector, topologyKey, ...)", where)
    for name in raw:
        if name not in _TERM_KEYS:
            raise InvalidValue(f"{at}.{name}", raw[name], f"one of {', '.join(sorted(_TERM_KEYS))}", where)
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise InvalidValue(f"{at}.topologyKey", key, "a non-empty topology key (a node label)", where)
    selector = parse_selector(raw.get("labelSelector"), f"{at}.labelSelector", where)
    names = _strings(raw.get("namespaces"), where, f"{at}.namespaces")
    _strings(raw.get("matchLabelKeys"), where, f"{at}.matchLabelKeys")
    _strings(raw.get("mismatchLabelKeys"), where, f"{at}.mismatchLabelKeys")
    raw_ns_selector = raw.get("namespaceSelector")
    ns_selector = parse_selector(raw_ns_selector, f"{at}.namespaceSelector", where)
    if not names and raw_ns_selector is None:
        names = [namespace]
    return AffinityTerm(selector, frozenset(names), ns_selector, key)


def _required(raw: Any, namespace: str, where: str, at: str) -> tuple[AffinityTerm, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidValue(at, raw, "a list of pod affinity terms", where)
    return tuple(parse_term(term, namespace, where, f"{at}[{i}]") for i, term in enumerate(raw))


def _preferred(raw: Any, namespace: str, where: str, at: str) -> tuple[WeightedTerm, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidValue(at, raw, "a list of {weight, podAffinityTerm}", where)
    out: list[WeightedTerm] = []
    for i, item in enumerate(raw):
        here = f"{at}[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidValue(here, item, "a mapping with weight and podAffinityTerm", where)
        for name in item:
            if name not in _WEIGHTED_KEYS:
                raise InvalidValue(f"{here}.{name}", item[name], "only weight and podAffinityTerm", where)
        weight = item.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise InvalidValue(f"{here}.weight", weight, "an integer from 1 to 100", where)
        term = parse_term(item.get("podAffinityTerm"), namespace, where, f"{here}.podAffinityTerm")
        out.append(WeightedTerm(term, weight))
    return tuple(out)


def _section(affinity: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any]:
    raw = affinity.get(name)
    if raw is None:
        return {}
    at = f"spec.affinity.{name}"
    if not isinstance(raw, Mapping):
        raise InvalidValue(at, raw, f"a mapping with {REQUIRED} and/or {PREFERRED}", where)
    for key in raw:
        if key not in (REQUIRED, PREFERRED):
            raise InvalidValue(f"{at}.{key}", raw[key], f"{REQUIRED} or {PREFERRED}", where)
    return raw


def has_pod_affinity(affinity: Mapping[str, Any]) -> bool:
    """Whether a pod's ``spec.affinity`` holds any inter-pod section (cheap: no parsing)."""
    return bool(affinity) and (
        affinity.get(POD_AFFINITY) is not None or affinity.get(POD_ANTI_AFFINITY) is not None
    )


# Parsed terms by (namespace, the sections' text): pods of a workload repeat their terms, and a pod is
# read at PreFilter, PreScore and when it is bound. Bounded; errors are never kept.
_PARSED: dict[tuple[str, str], PodAffinity] = {}
_MAX_PARSED: Final = 4096
# The last sections seen by identity (a pod's own sections at its next read), with the objects kept
# alive so that their ids stay theirs.
_BY_IDENTITY: dict[tuple[str, int, int], tuple[object, object, PodAffinity]] = {}


def parse_pod_affinity(namespace: str, affinity: Mapping[str, Any], where: str) -> PodAffinity:
    """The inter-pod terms of a pod in ``namespace`` with ``spec.affinity`` ``affinity`` (a malformed
    term: an :class:`InvalidValue` naming ``where`` and the field)."""
    if not has_pod_affinity(affinity):
        return NO_AFFINITY
    pos_raw, neg_raw = affinity.get(POD_AFFINITY), affinity.get(POD_ANTI_AFFINITY)
    identity = (namespace, id(pos_raw), id(neg_raw))
    known = _BY_IDENTITY.get(identity)
    if known is not None and known[0] is pos_raw and known[1] is neg_raw:
        return known[2]
    key = (namespace, f"{pos_raw!r}|{neg_raw!r}")
    parsed = _PARSED.get(key)
    if parsed is None:
        parsed = _parse(namespace, affinity, where)
        if len(_PARSED) >= _MAX_PARSED:
            _PARSED.clear()
        _PARSED[key] = parsed
    if len(_BY_IDENTITY) >= _MAX_PARSED:
        _BY_IDENTITY.clear()
    _BY_IDENTITY[identity] = (pos_raw, neg_raw, parsed)
    return parsed


def _parse(namespace: str, affinity: Mapping[str, Any], where: str) -> PodAffinity:
    pos = _section(affinity, POD_AFFINITY, where)
    neg = _section(affinity, POD_ANTI_AFFINITY, where)
    base, anti = f"spec.affinity.{POD_AFFINITY}", f"spec.affinity.{POD_ANTI_AFFINITY}"
    parsed = PodAffinity(
        _required(pos.get(REQUIRED), namespace, where, f"{base}.{REQUIRED}"),
        _required(neg.get(REQUIRED), namespace, where, f"{anti}.{REQUIRED}"),
        _preferred(pos.get(PREFERRED), namespace, where, f"{base}.{PREFERRED}"),
        _preferred(neg.get(PREFERRED), namespace, where, f"{anti}.{PREFERRED}"),
    )
    return NO_AFFINITY if parsed.empty else parsed


def matches_all(terms: Sequence[AffinityTerm], namespace: str, labels: Mapping[str, str]) -> bool:
    """kube's ``podMatchesAllAffinityTerms`` over resolved terms: false for no terms."""
    return bool(terms) and all(term.matches_resolved(namespace, labels) for term in terms)


# -- the apiserver's merge (kube-apiserver's PrepareForCreate), for pods that never met one ---------


def _merge_keys(term: Mapping[str, Any], labels: Mapping[str, str]) -> Mapping[str, Any]:
    match_keys = term.get("matchLabelKeys") or []
    mismatch_keys = term.get("mismatchLabelKeys") or []
    selector = term.get("labelSelector")
    if not (match_keys or mismatch_keys) or not isinstance(selector, Mapping):
        return term  # a null selector matches nothing: nothing to merge (as the apiserver)
    expressions = list(selector.get("matchExpressions") or [])
    for keys, operator in ((match_keys, IN), (mismatch_keys, NOT_IN)):
        for key in keys:
            if isinstance(key, str) and key in labels:
                expressions.append({"key": key, "operator": operator, "values": [labels[key]]})
    return {**term, "labelSelector": {**selector, "matchExpressions": expressions}}


def apply_label_keys(affinity: Mapping[str, Any], labels: Mapping[str, str]) -> Mapping[str, Any]:
    """``spec.affinity`` with every inter-pod term's ``matchLabelKeys`` / ``mismatchLabelKeys`` merged
    into its selector from the pod's ``labels``, as kube-apiserver does when the pod is created."""
    if not has_pod_affinity(affinity):
        return affinity
    out = dict(affinity)
    for name in (POD_AFFINITY, POD_ANTI_AFFINITY):
        section = affinity.get(name)
        if not isinstance(section, Mapping):
            continue
        merged = dict(section)
        required = section.get(REQUIRED)
        if isinstance(required, list):
            merged[REQUIRED] = [_merge_keys(t, labels) if isinstance(t, Mapping) else t for t in required]
        preferred = section.get(PREFERRED)
        if isinstance(preferred, list):
            merged[PREFERRED] = [
                {**w, "podAffinityTerm": _merge_keys(w["podAffinityTerm"], labels)}
                if isinstance(w, Mapping) and isinstance(w.get("podAffinityTerm"), Mapping)
                else w
                for w in preferred
            ]
        out[name] = merged
    return out


# -- Filter and Score over node rows -----------------------------------------------------------------


def required_affinity_passes(
    has_keys: BoolArray, matched_everywhere: BoolArray, any_matched: bool, self_match: bool
) -> BoolArray:
    """Rows passing the required affinity rule (1. above): ``has_keys`` (the node has every term's
    key), ``matched_everywhere`` (each term's domain of the node holds a pod matching all terms),
    ``any_matched`` (such a pod is in some domain of some term), ``self_match`` (the pod matches all
    its own terms)."""
    if not any_matched and self_match:
        return has_keys
    passed: BoolArray = has_keys & matched_everywhere
    return passed


def normalize_scores(raw: Int64Array, candidates: BoolArray) -> Int64Array:
    """InterPodAffinity's NormalizeScore over the candidate rows (others: 0):
    ``int(100 * ((s - min) / (max - min)))``, 0 everywhere when max == min."""
    out = np.zeros(raw.shape[0], dtype=np.int64)
    if not candidates.any():
        return out
    values = raw[candidates]
    low, high = int(values.min()), int(values.max())
    if high == low:
        return out
    scaled = float(MAX_NODE_SCORE) * ((raw - low) / float(high - low))
    out[candidates] = scaled[candidates].astype(np.int64)
    return out
