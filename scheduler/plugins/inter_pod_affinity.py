"""InterPodAffinity (kube-scheduler's ``interpodaffinity``): glue over
:mod:`common.model.placement.pod_affinity` and the :class:`~scheduler.cluster.pod_index.PodIndex`.

Two members of one kube-scheduler plugin, as Volcano splits it: :class:`InterPodAffinity`, the
PreFilter and Filter that ``predicates`` runs (``predicate.PodAffinityEnable``), and
:class:`InterPodAffinityScore`, the PreScore and Score that ``nodeorder`` runs with
``podaffinity.weight``. Both read the scheduler's one pod index (``Handle.shared``).

Per attempt, each question (the pods a term, or all required terms together, select) is the index's
per-row count brought up to date, and each domain sum one ``bincount`` over the topology key's value
codes: a few numpy passes over N rows per term, whatever the number of pods. Which existing pods'
terms match the incoming pod is kept per (namespace, labels) until a distinct term appears or goes,
or a Namespace changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.events import EventRecord, invalid_annotation
from gpuq_k8s.common.model.placement import pod_affinity as rules
from gpuq_k8s.common.model.placement.pod_affinity import AffinityTerm, PodAffinity
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cluster.pod_index import Int64Array, PodIndex, PodMatcher, TermKind, TermRows
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    FilterPlugin,
    FilterResult,
    FloatArray,
    Handle,
    PreFilterPlugin,
    PreScorePlugin,
    ReasonMasks,
    ScorePlugin,
)
from gpuq_k8s.scheduler.framework.status import Status

# kube's EventsToRegister: an assigned pod added, relabelled or deleted; a node added or relabelled.
# gpuq adds Namespace changes (namespaceSelector reads their labels).
EVENTS: Final = frozenset(
    {
        ClusterEvent.POD_BOUND,
        ClusterEvent.POD_LABELS_CHANGED,
        ClusterEvent.POD_DELETED,
        ClusterEvent.NODE_ADDED,
        ClusterEvent.NODE_CHANGED,
        ClusterEvent.NAMESPACE_CHANGED,
    }
)
_MAX_CLASSES: Final = 4096
_FILTER_STATE: Final = "PreFilter" + plugin_names.INTER_POD_AFFINITY
_SCORE_STATE: Final = "PreScore" + plugin_names.INTER_POD_AFFINITY


def pod_index(handle: Handle) -> PodIndex:
    """The scheduler's one pod index (made by the first plugin that asks)."""
    return handle.shared(PodIndex, lambda: PodIndex(handle.cluster, handle.objects))


def matcher_of(*terms: AffinityTerm) -> PodMatcher:
    """The pods matching every one of (resolved) ``terms``."""
    return PodMatcher(
        tuple((t.selector, None if t.any_namespace else t.namespaces) for t in terms), live_only=False
    )


class _Existing:
    """Which existing pods' terms of each kind match an incoming pod, per (namespace, labels), valid
    while the distinct terms and the Namespaces stay the same."""

    def __init__(self, index: PodIndex) -> None:
        self._index = index
        self._version = (-1, -1)
        self._matched: dict[tuple[TermKind, str, frozenset[tuple[str, str]]], tuple[TermRows, ...]] = {}

    def matching(self, kind: TermKind, pod: PodInfo) -> tuple[TermRows, ...]:
        index = self._index
        if not index.has_existing_terms(kind):
            return ()
        version = (index.term_set_version, index.namespace_generation)
        if version != self._version or len(self._matched) >= _MAX_CLASSES:
            self._matched.clear()
            self._version = version
        key = (kind, pod.namespace, frozenset(pod.labels.items()))
        found = self._matched.get(key)
        if found is None:
            ns_labels = index.namespace_labels(pod.namespace)
            found = self._matched[key] = tuple(
                entry
                for entry in index.existing_terms(kind)
                if entry.term.matches(pod.namespace, pod.labels, ns_labels)
            )
        return found


def _parsed(index: PodIndex, pod: PodInfo) -> PodAffinity:
    """The pod's terms with their namespace selectors resolved (an InvalidValue names the field)."""
    affinity = rules.parse_pod_affinity(pod.namespace, pod.affinity, pod.ref)
    if affinity is rules.NO_AFFINITY:
        return affinity
    resolve = index.namespaces_matching
    return PodAffinity(
        tuple(t.resolved(resolve) for t in affinity.required),
        tuple(t.resolved(resolve) for t in affinity.anti_required),
        tuple(rules.WeightedTerm(w.term.resolved(resolve), w.weight) for w in affinity.preferred),
        tuple(rules.WeightedTerm(w.term.resolved(resolve), w.weight) for w in affinity.anti_preferred),
    )


def _shared_existing(handle: Handle, index: PodIndex) -> _Existing:
    return handle.shared(_Existing, lambda: _Existing(index))


@dataclass(frozen=True, slots=True)
class _FilterState:
    required: tuple[AffinityTerm, ...]
    anti_required: tuple[AffinityTerm, ...]
    existing_fails: BoolArray | None
    self_match: bool


class InterPodAffinity(PreFilterPlugin, FilterPlugin):
    """Required pod affinity and anti-affinity, both directions (module doc)."""

    name = plugin_names.INTER_POD_AFFINITY
    events = EVENTS

    def __init__(self, handle: Handle) -> None:
        super().__init__(handle)
        self.index = pod_index(handle)
        self._existing = _shared_existing(handle, self.index)
        self._warned: set[str] = set()

    def _warn_invalid(self) -> None:
        """Existing pods whose terms could not be read (never admitted by an apiserver) say so once."""
        for key, message in self.index.invalid.items():
            if key not in self._warned:
                self._warned.add(key)
                namespace, _, name = key.partition("/")
                self.handle.record(
                    invalid_annotation(f"Pod/{namespace}/{name}", f"{message}; its pod affinity is ignored")
                )

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        if self.index.invalid:
            self._warn_invalid()
        affinity = _parsed(self.index, pod)
        n = self.handle.cluster.n
        # Existing pods' anti-affinity terms that match this pod, by the domains holding such pods
        # (kube's existingAntiAffinityCounts: only pods on nodes with the term's key count).
        existing_fails: BoolArray | None = None
        for entry in self._existing.matching(TermKind.REQUIRED_ANTI_AFFINITY, pod):
            if entry.total:
                at_node, _, positive = self.index.in_domain(entry.rows[:n], entry.term.topology_key)
                if positive:
                    blocked = at_node > 0
                    existing_fails = blocked if existing_fails is None else existing_fails | blocked
        if not (affinity.required or affinity.anti_required) and existing_fails is None:
            return Status.skip()
        self_match = rules.matches_all(affinity.required, pod.namespace, pod.labels)
        state.write(
            _FILTER_STATE, _FilterState(affinity.required, affinity.anti_required, existing_fails, self_match)
        )
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        pre = state.read(_FILTER_STATE, _FilterState)
        n = self.handle.cluster.n
        if pre is None:
            if self.pre_filter(state, pod).is_skip:
                return FilterResult.all_pass(n)
            pre = state.read(_FILTER_STATE, _FilterState)
            assert pre is not None
        index = self.index
        no = np.zeros(n, dtype=np.bool_)
        affinity_fails, anti_fails, existing_fails = no, no, no
        if pre.required:
            counts, total = index.counts(matcher_of(*pre.required))
            has_keys = np.ones(n, dtype=np.bool_)
            everywhere = np.ones(n, dtype=np.bool_)
            any_matched = False
            for term in pre.required:
                if total:
                    at_node, has, positive = index.in_domain(counts, term.topology_key)
                    everywhere &= at_node > 0
                    any_matched = any_matched or positive
                else:
                    has = index.has_key(term.topology_key, n)
                    everywhere = no
                has_keys &= has
            affinity_fails = ~rules.required_affinity_passes(
                has_keys, everywhere, any_matched, pre.self_match
            )
        if pre.anti_required:
            anti_fails = no.copy()
            for term in pre.anti_required:
                counts, total = index.counts(matcher_of(term))
                if total:
                    anti_fails |= index.in_domain(counts, term.topology_key)[0] > 0
        if pre.existing_fails is not None:
            existing_fails = pre.existing_fails
        passed: BoolArray = ~(affinity_fails | anti_fails | existing_fails)

        def reasons() -> ReasonMasks:
            out: list[tuple[BoolArray, str]] = []
            left = np.ones(n, dtype=np.bool_)
            for mask, message in (
                (affinity_fails, rules.AFFINITY_RULES_NOT_MATCH),
                (anti_fails, rules.ANTI_AFFINITY_RULES_NOT_MATCH),
                (existing_fails, rules.EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH),
            ):
                hit = left & mask
                if hit.any():
                    out.append((hit, message))
                left &= ~mask
            return out

        return FilterResult(passed, reasons, unresolvable=affinity_fails)


@dataclass(frozen=True, slots=True)
class _Contribution:
    """A term's part of the score: ``weight`` per pod of ``rows`` in its ``key`` domain."""

    rows: Int64Array
    key: str
    weight: int


class InterPodAffinityScore(PreScorePlugin, ScorePlugin):
    """Preferred pod affinity and anti-affinity scoring, both directions, with existing pods' required
    affinity weighted ``hard_weight`` (kube's ``hardPodAffinityWeight``), normalised over the
    candidate nodes; times ``weight`` (nodeorder's ``podaffinity.weight``)."""

    name = plugin_names.INTER_POD_AFFINITY
    events = EVENTS

    def __init__(
        self, handle: Handle, weight: int, hard_weight: int = rules.DEFAULT_HARD_POD_AFFINITY_WEIGHT
    ):
        super().__init__(handle)
        self.weight = weight
        self.hard_weight = hard_weight
        self.index = pod_index(handle)
        self._existing = _shared_existing(handle, self.index)
        self._warned: set[EventRecord] = set()

    def pre_score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> Status:
        index = self.index
        n = self.handle.cluster.n
        parts: list[_Contribution] = []
        try:
            affinity = _parsed(index, pod)
        except InvalidValue as err:
            # Only with the filter member off (its PreFilter refuses such a pod): not scored, and said.
            event = invalid_annotation(pod.ref, f"{err}; its preferred pod affinity is not scored")
            if event not in self._warned:
                self._warned.add(event)
                self.handle.record(event)
            affinity = rules.NO_AFFINITY
        for weighted, sign in (
            *((w, 1) for w in affinity.preferred),
            *((w, -1) for w in affinity.anti_preferred),
        ):
            counts, total = index.counts(matcher_of(weighted.term))
            if total:
                parts.append(_Contribution(counts, weighted.term.topology_key, sign * weighted.weight))
        existing = self._existing
        kinds: list[tuple[TermKind, int | None]] = [
            (TermKind.PREFERRED_AFFINITY, None),
            (TermKind.PREFERRED_ANTI_AFFINITY, None),
        ]
        if self.hard_weight > 0:
            kinds.append((TermKind.REQUIRED_AFFINITY, self.hard_weight))
        for kind, fixed in kinds:
            sign = -1 if kind is TermKind.PREFERRED_ANTI_AFFINITY else 1
            for entry in existing.matching(kind, pod):
                if entry.total:
                    weight = fixed if fixed is not None else entry.weight
                    parts.append(_Contribution(entry.rows[:n], entry.term.topology_key, sign * weight))
        if not parts:
            return Status.skip()
        state.write(_SCORE_STATE, tuple(parts))
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> FloatArray:
        parts = state.read(_SCORE_STATE, tuple)
        n = feasible.shape[0]
        if parts is None:
            return np.zeros(n, dtype=np.float64)
        raw = np.zeros(n, dtype=np.int64)
        for part in parts:
            raw += self.index.in_domain(part.rows, part.key)[0] * part.weight
        scores: FloatArray = rules.normalize_scores(raw, feasible).astype(np.float64) * float(self.weight)
        return scores
