"""The pod index: how many bound pods match a question, per node row and per topology domain, kept
current as pods are bound, assumed, removed and relabelled (the inputs of inter-pod affinity and
topology spread, design.md "Placement rules").

kube-scheduler answers these questions by walking every pod of every node in each PreFilter and
PreScore. Here a question is a :class:`PodMatcher` (pods matching a set of selector-and-namespaces
clauses, optionally without those being deleted): its answer is an array of matching pods per node
row, computed once when first asked and then brought up to date from a journal of pod changes (only
the pods added, removed or relabelled since it was last asked are matched). Pods of a workload ask
the same question, so a burst of them costs one full count and then a few matches per bind. Per
topology domain the answer is one ``bincount`` of those rows over the domain codes of the node label
(:meth:`PodIndex.in_domain`).

The reverse direction, existing pods' own terms (their required anti-affinity repels the incoming pod;
their affinity and preferences score it), is indexed eagerly as pods come and go: per distinct term,
how many pods carrying it are on each row (:meth:`PodIndex.existing_terms`). Workloads repeat their
terms, so there are few distinct ones however many pods carry them.

The index also keeps the Namespaces' labels (``namespaceSelector``) and bumps
:attr:`PodIndex.namespace_generation` on any Namespace change.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.placement.label_selector import LabelSelector
from gpuq_k8s.common.model.placement.pod_affinity import (
    NO_AFFINITY,
    AffinityTerm,
    PodAffinity,
    has_pod_affinity,
    parse_pod_affinity,
)
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.cluster.state import ClusterState

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Questions remembered: as many as fit this many bytes of counts (at least _MIN_MATCHERS); the least
# recently asked is dropped beyond (5,000 nodes: 1,600 questions; a question dropped is recounted over
# every pod when asked again).
_MATCHER_BYTES: Final = 64 * 2**20
_MIN_MATCHERS: Final = 256
# The journal keeps at least this many changes; a question older than its head is counted afresh.
_JOURNAL_MIN: Final = 4096
_EMPTY_LABELS: Final[Mapping[str, str]] = {}

# (selector, namespaces): namespaces None selects pods of every namespace.
Clause = tuple[LabelSelector, frozenset[str] | None]


@dataclass(frozen=True, slots=True)
class PodMatcher:
    """A question: the pods matching every clause (their selector, in their namespaces);
    ``live_only``: not the pods being deleted (topology spread bypasses terminating pods)."""

    clauses: tuple[Clause, ...]
    live_only: bool = False

    def matches(self, pod: PodInfo) -> bool:
        if self.live_only and pod.deleting:
            return False
        namespace, labels = pod.namespace, pod.labels
        for selector, namespaces in self.clauses:
            if namespaces is not None and namespace not in namespaces:
                return False
            if not selector.matches(labels):
                return False
        return True


class TermKind(enum.Enum):
    """Which of an existing pod's terms (kube's PodInfo: required/preferred, affinity/anti)."""

    REQUIRED_AFFINITY = "requiredAffinity"
    REQUIRED_ANTI_AFFINITY = "requiredAntiAffinity"
    PREFERRED_AFFINITY = "preferredAffinity"
    PREFERRED_ANTI_AFFINITY = "preferredAntiAffinity"


@dataclass(slots=True)
class TermRows:
    """One distinct term of existing pods: how many pods carrying it are on each row."""

    term: AffinityTerm
    weight: int
    rows: Int64Array
    total: int = 0


@dataclass(slots=True)
class _Counts:
    rows: Int64Array
    position: int
    total: int


@dataclass(slots=True)
class _Indexed:
    """What an existing pod put in the reverse index (taken out again when it leaves)."""

    row: int
    keys: tuple[tuple[TermKind, AffinityTerm, int], ...]


def _term_keys(affinity: PodAffinity) -> tuple[tuple[TermKind, AffinityTerm, int], ...]:
    keys: list[tuple[TermKind, AffinityTerm, int]] = []
    keys.extend((TermKind.REQUIRED_AFFINITY, t, 0) for t in affinity.required)
    keys.extend((TermKind.REQUIRED_ANTI_AFFINITY, t, 0) for t in affinity.anti_required)
    keys.extend((TermKind.PREFERRED_AFFINITY, w.term, w.weight) for w in affinity.preferred)
    keys.extend((TermKind.PREFERRED_ANTI_AFFINITY, w.term, w.weight) for w in affinity.anti_preferred)
    return tuple(keys)


@dataclass(slots=True)
class _Namespaces:
    labels: dict[str, Mapping[str, str]] = field(default_factory=dict)
    generation: int = 0
    matching: dict[LabelSelector, frozenset[str]] = field(default_factory=dict)


class PodIndex:
    """The cluster's bound (and assumed) pods, indexed for label-selector questions (module doc).

    A :class:`~scheduler.cluster.state.ClusterListener` (and ``PodUpdateListener``) of ``cluster`` and
    a listener of ``objects`` (Namespaces); one per scheduler, shared by the plugins that read it
    (``Handle.shared``).
    """

    def __init__(self, cluster: ClusterState, objects: ObjectStore) -> None:
        self._cluster = cluster
        self._journal: list[tuple[PodInfo, int, int]] = []
        self._base = 0
        self._matchers: dict[PodMatcher, _Counts] = {}
        self._terms: dict[TermKind, dict[tuple[AffinityTerm, int], TermRows]] = {k: {} for k in TermKind}
        self._indexed: dict[str, _Indexed] = {}
        # Bumped whenever a distinct term appears or disappears (their TermRows objects stay the same
        # while only their rows change): what matched an incoming pod stays valid until then.
        self.term_set_version = 0
        # Existing pods whose terms could not be read: pod key -> the error (their terms are left out).
        self.invalid: dict[str, str] = {}
        self._namespaces = _Namespaces()
        self._capacity = 16
        self._domains: dict[str, Domains] = {}
        self._domains_validity = (-1, -1)
        for _, name, obj in objects.list(kinds.NAMESPACE):
            self._namespace(name, obj)
        objects.subscribe(self._object_changed)
        cluster.subscribe(self)

    # -- Namespaces -------------------------------------------------------------------------------------
    def _object_changed(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        if kind is kinds.NAMESPACE:
            self._namespace(name, obj)

    def _namespace(self, name: str, obj: Obj | None) -> None:
        state = self._namespaces
        if obj is None:
            state.labels.pop(name, None)
        else:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            state.labels[name] = (
                {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
            )
        state.generation += 1
        state.matching.clear()

    @property
    def namespace_generation(self) -> int:
        return self._namespaces.generation

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """The labels of Namespace ``namespace`` (none when it is not known, as kube assumes)."""
        return self._namespaces.labels.get(namespace, _EMPTY_LABELS)

    def namespaces_matching(self, selector: LabelSelector) -> frozenset[str]:
        """The names of the Namespaces whose labels ``selector`` selects, as they are now."""
        state = self._namespaces
        found = state.matching.get(selector)
        if found is None:
            found = state.matching[selector] = frozenset(
                name for name, labels in state.labels.items() if selector.matches(labels)
            )
        return found

    # -- ClusterListener ----------------------------------------------------------------------------------
    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        if row >= self._capacity:
            self._grow(row + 1)

    def _grow(self, rows: int) -> None:
        capacity = max(rows, 2 * self._capacity)
        for counts in self._matchers.values():
            counts.rows = _grown(counts.rows, capacity)
        for by_term in self._terms.values():
            for entry in by_term.values():
                entry.rows = _grown(entry.rows, capacity)
        self._capacity = capacity

    def _record(self, pod: PodInfo, row: int, delta: int) -> None:
        self._journal.append((pod, row, delta))
        self._trim()

    def _trim(self) -> None:
        journal = self._journal
        if len(journal) > max(_JOURNAL_MIN, 2 * len(self._cluster.pods)):
            drop = len(journal) // 2
            del journal[:drop]
            self._base += drop

    def pod_added(self, pod: PodInfo, row: int) -> None:
        if row >= self._capacity:
            self._grow(row + 1)
        self._record(pod, row, 1)
        if has_pod_affinity(pod.affinity):
            self._index_terms(pod, row)

    def pods_added(self, pods: Sequence[PodInfo], rows: Sequence[int]) -> None:
        """:meth:`pod_added` of each (a BulkPodListener: the start's bound pods a page at a time)."""
        if max(rows, default=0) >= self._capacity:
            self._grow(max(rows) + 1)
        journal = self._journal
        for pod, row in zip(pods, rows, strict=True):
            journal.append((pod, row, 1))
            if has_pod_affinity(pod.affinity):
                self._index_terms(pod, row)
        self._trim()

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        self._record(pod, row, -1)
        indexed = self._indexed.pop(pod.key, None)
        self.invalid.pop(pod.key, None)
        if indexed is not None:
            self._unindex(indexed)

    def pod_updated(self, old: PodInfo, new: PodInfo, row: int) -> None:
        self._record(old, row, -1)
        self._record(new, row, 1)
        if old.affinity != new.affinity:
            self.invalid.pop(old.key, None)
            indexed = self._indexed.pop(old.key, None)
            if indexed is not None:
                self._unindex(indexed)
            if has_pod_affinity(new.affinity):
                self._index_terms(new, row)

    # -- the reverse index: existing pods' terms ----------------------------------------------------------
    def _index_terms(self, pod: PodInfo, row: int) -> None:
        try:
            affinity = parse_pod_affinity(pod.namespace, pod.affinity, pod.ref)
        except InvalidValue as err:
            self.invalid[pod.key] = str(err)
            affinity = NO_AFFINITY
        keys = _term_keys(affinity)
        if not keys:
            return
        previous = self._indexed.pop(pod.key, None)
        if previous is not None:
            self._unindex(previous)
        for kind, term, weight in keys:
            by_term = self._terms[kind]
            entry = by_term.get((term, weight))
            if entry is None:
                entry = by_term[(term, weight)] = TermRows(term, weight, np.zeros(self._capacity, np.int64))
                self.term_set_version += 1
            entry.rows[row] += 1
            entry.total += 1
        self._indexed[pod.key] = _Indexed(row, keys)

    def _unindex(self, indexed: _Indexed) -> None:
        for kind, term, weight in indexed.keys:
            by_term = self._terms[kind]
            entry = by_term[(term, weight)]
            entry.rows[indexed.row] -= 1
            entry.total -= 1
            if entry.total == 0:
                del by_term[(term, weight)]
                self.term_set_version += 1

    def existing_terms(self, kind: TermKind) -> Iterable[TermRows]:
        """Every distinct term of this kind the existing pods carry, with its rows (read-only)."""
        return self._terms[kind].values()

    def has_existing_terms(self, kind: TermKind) -> bool:
        return bool(self._terms[kind])

    # -- questions ------------------------------------------------------------------------------------------
    def counts(self, matcher: PodMatcher) -> tuple[Int64Array, int]:
        """Pods matching ``matcher`` per node row ``[:n]`` (the index's own array: read it, never write
        it) and their total."""
        n = self._cluster.n
        if n > self._capacity:
            self._grow(n)
        counts = self._matchers.pop(matcher, None)
        position = self._base + len(self._journal)
        if counts is None or counts.position < self._base:
            counts = self._count(matcher, position)
        elif counts.position != position:
            matches = matcher.matches
            rows = counts.rows
            total = counts.total
            for pod, row, delta in self._journal[counts.position - self._base :]:
                if matches(pod):
                    rows[row] += delta
                    total += delta
            counts.total = total
            counts.position = position
        self._matchers[matcher] = counts  # most recently asked last
        if len(self._matchers) > max(_MIN_MATCHERS, _MATCHER_BYTES // (8 * self._capacity)):
            del self._matchers[next(iter(self._matchers))]
        return counts.rows[:n], counts.total

    def _count(self, matcher: PodMatcher, position: int) -> _Counts:
        rows = np.zeros(self._capacity, dtype=np.int64)
        cluster = self._cluster
        matches = matcher.matches
        total = 0
        for row in range(cluster.n):
            for pod in cluster.pods_on[row].values():
                if matches(pod):
                    rows[row] += 1
                    total += 1
        return _Counts(rows, position, total)

    # -- topology domains -----------------------------------------------------------------------------------
    def domains(self, key: str, n: int) -> Domains:
        """The ``key`` domains of the rows ``[:n]``, kept until a node's labels change or a node comes
        or goes."""
        cluster = self._cluster
        validity = (cluster.static_generation, n)
        if validity != self._domains_validity:
            self._domains.clear()
            self._domains_validity = validity
        found = self._domains.get(key)
        if found is None:
            found = self._domains[key] = _domains_of(cluster, key, n)
        return found

    def has_key(self, key: str, n: int) -> BoolArray:
        """The rows whose node has the label ``key`` (read-only)."""
        return self.domains(key, n).has

    def in_domain(self, row_counts: Int64Array, key: str) -> tuple[Int64Array, BoolArray, bool]:
        """Per row, the sum of ``row_counts`` over the rows in the same ``key`` domain (0 where the
        node has no ``key`` label), the rows that have it, and whether any domain's sum is positive.
        The arrays may be ``row_counts`` itself or the index's own: read them, never write them."""
        domains = self.domains(key, row_counts.shape[0])
        if domains.unique:  # one row per value (kubernetes.io/hostname): a domain is its row
            at_node: Int64Array = row_counts if domains.every else np.where(domains.has, row_counts, 0)
            return at_node, domains.has, bool(at_node.any())
        sums = np.bincount(domains.shifted, weights=row_counts, minlength=domains.slots)
        sums[0] = 0.0  # the slot of the rows without the key
        summed: Int64Array = sums.astype(np.int64)[domains.shifted]
        return summed, domains.has, bool(sums.any())


@dataclass(frozen=True, slots=True)
class Domains:
    """The rows' topology domains for one node label key: ``shifted`` is the value code plus one per row
    (0: no such label), so ``bincount(shifted, weights)`` sums per domain in one pass, slot 0 holding
    the rows without the key; ``unique``: no two rows share a value (each domain is one row)."""

    shifted: npt.NDArray[np.intp]
    slots: int
    has: BoolArray
    every: bool
    unique: bool


def _domains_of(cluster: ClusterState, key: str, n: int) -> Domains:
    found = cluster.labels.codes(key, n)
    if found is None:
        none = np.zeros(n, dtype=np.bool_)
        return Domains(np.zeros(n, dtype=np.intp), 1, none, False, True)
    codes, size = found
    shifted = codes.astype(np.intp) + 1
    has: BoolArray = shifted > 0
    per_value = np.bincount(shifted, minlength=size + 1)
    unique = bool(per_value[1:].max(initial=0) <= 1)
    return Domains(shifted, size + 1, has, bool(has.all()), unique)


def _grown(array: Int64Array, rows: int) -> Int64Array:
    grown = np.zeros(rows, dtype=array.dtype)
    grown[: array.shape[0]] = array
    return grown
