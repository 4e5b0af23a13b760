"""PodTopologySpread (kube-scheduler's ``podtopologyspread``): glue over
:mod:`common.model.placement.topology_spread` and the :class:`~scheduler.cluster.pod_index.PodIndex`.

Two members, as Volcano splits it: :class:`PodTopologySpread`, the PreFilter and Filter of the
``DoNotSchedule`` constraints that ``predicates`` runs (``predicate.PodTopologySpreadEnable``), and
:class:`PodTopologySpreadScore`, the PreScore and Score of the ``ScheduleAnyway`` ones (or the system
defaults, ``defaultingType: System`` as Volcano's nodeorder builds it) that ``nodeorder`` runs with
``podtopologyspread.weight``.

Per attempt and constraint: the matching pods per row (the index's count, brought up to date), the
eligible rows (every constraint's key, and the inclusion policies: the pod's node selection, cached
per selection and taint set until a node's labels or taints change), then one ``bincount`` per
constraint for the domain sums.

The system defaults select by the pod's Services and controller (ReplicationController, ReplicaSet,
StatefulSet), read from the scheduler's object store: the selector is kept per (namespace, labels,
controller) until one of those objects changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.placement import topology_spread as rules
from gpuq_k8s.common.model.placement.label_selector import LabelSelector
from gpuq_k8s.common.model.placement.topology_spread import SpreadConstraint
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.cluster.pod_index import Int64Array, PodIndex, PodMatcher
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
from gpuq_k8s.scheduler.plugins.inter_pod_affinity import pod_index
from gpuq_k8s.scheduler.plugins.node_selection import compile_selection, selection_mask, untolerated_taints

# kube's EventsToRegister: an assigned pod added, relabelled or deleted; a node added, deleted,
# relabelled or retainted.
EVENTS: Final = frozenset(
    {
        ClusterEvent.POD_BOUND,
        ClusterEvent.POD_UPDATED,
        ClusterEvent.POD_DELETED,
        ClusterEvent.NODE_ADDED,
        ClusterEvent.NODE_CHANGED,
    }
)
_MAX_CLASSES: Final = 4096
_FILTER_STATE: Final = "PreFilter" + plugin_names.POD_TOPOLOGY_SPREAD
_SCORE_STATE: Final = "PreScore" + plugin_names.POD_TOPOLOGY_SPREAD
_OWNER_KINDS: Final = (kinds.SERVICE, kinds.REPLICATION_CONTROLLER, kinds.REPLICA_SET, kinds.STATEFUL_SET)
_BY_OWNER: Final = {
    rules.REPLICATION_CONTROLLER: kinds.REPLICATION_CONTROLLER,
    rules.REPLICA_SET: kinds.REPLICA_SET,
    rules.STATEFUL_SET: kinds.STATEFUL_SET,
}


class DefaultSelectors:
    """The system default constraints' selector of a pod (kube's ``helper.DefaultSelector``) from the
    Services, ReplicationControllers, ReplicaSets and StatefulSets in the object store."""

    def __init__(self, objects: ObjectStore) -> None:
        self._objects = objects
        self._selectors: dict[tuple[object, ...], LabelSelector] = {}
        self._services: dict[str, list[Mapping[str, str] | None]] | None = None
        objects.subscribe(self._changed)

    def _changed(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        if kind in _OWNER_KINDS:
            self._selectors.clear()
            if kind is kinds.SERVICE:
                self._services = None

    def _service_selectors(self, namespace: str) -> list[Mapping[str, str] | None]:
        if self._services is None:
            services: dict[str, list[Mapping[str, str] | None]] = {}
            for ns, _, obj in self._objects.list(kinds.SERVICE):
                selector = (obj.get("spec") or {}).get("selector")
                services.setdefault(ns, []).append(
                    {str(k): str(v) for k, v in selector.items()} if isinstance(selector, Mapping) else None
                )
            self._services = services
        return self._services.get(namespace, [])

    def of(self, pod: PodInfo) -> LabelSelector:
        owner = rules.controller_of(pod.owner_references)
        key = (pod.namespace, frozenset(pod.labels.items()), owner)
        found = self._selectors.get(key)
        if found is not None:
            return found
        if len(self._selectors) >= _MAX_CLASSES:
            self._selectors.clear()
        owner_kind: tuple[str, str] | None = None
        owner_selector: Any = None
        if owner is not None:
            owner_kind = (owner.api_version, owner.kind)
            kind = _BY_OWNER.get(owner_kind)
            if kind is not None:
                obj = self._objects.get(kind, pod.namespace, owner.name)
                if obj is not None:
                    owner_selector = (obj.get("spec") or {}).get("selector")
        found = self._selectors[key] = rules.default_selector(
            pod.labels, self._service_selectors(pod.namespace), owner_kind, owner_selector
        )
        return found


def _matcher(constraint: SpreadConstraint, pod: PodInfo) -> PodMatcher:
    return PodMatcher(((constraint.selector, frozenset({pod.namespace})),), live_only=True)


class _Policies:
    """Per pod class, the rows topology spread's inclusion policies admit: the pod's nodeSelector and
    required node affinity (``nodeAffinityPolicy: Honor``), the taints it tolerates
    (``nodeTaintsPolicy: Honor``); kept until a node's labels or taints change."""

    def __init__(self, handle: Handle) -> None:
        self._handle = handle
        self._masks: dict[tuple[object, ...], BoolArray] = {}
        self._generation = -1

    def mask(self, pod: PodInfo, constraint: SpreadConstraint) -> BoolArray | None:
        """None: every row (both policies Ignore, or nothing to honour)."""
        affinity = constraint.node_affinity_policy == rules.HONOR and bool(pod.node_selector or pod.affinity)
        taints = constraint.node_taints_policy == rules.HONOR
        if not (affinity or taints):
            return None
        cluster = self._handle.cluster
        n = cluster.n
        if self._generation != cluster.static_generation or len(self._masks) >= _MAX_CLASSES:
            self._masks.clear()
            self._generation = cluster.static_generation
        selection = compile_selection(pod) if affinity else None
        taint_ids = tuple(untolerated_taints(cluster, pod)) if taints else ()
        key = (selection, taint_ids, n)
        found = self._masks.get(key)
        if found is None:
            mask = np.ones(n, dtype=np.bool_)
            if selection is not None and not selection.unconstrained:
                mask &= selection_mask(cluster, selection, n)
            if taint_ids:
                mask &= ~cluster.node_taints[:n, list(taint_ids)].any(axis=1)
            found = self._masks[key] = mask
        return found


def _codes(handle: Handle, key: str, n: int) -> tuple[np.ndarray, int]:
    found = handle.cluster.labels.codes(key, n)
    if found is None:
        return np.full(n, -1, dtype=np.int32), 0
    return found


def _counts(index: PodIndex, constraint: SpreadConstraint, pod: PodInfo, n: int) -> Int64Array:
    """Matching pods per row (kube counts none for an empty selector)."""
    if constraint.selector.empty:
        return np.zeros(n, dtype=np.int64)
    return index.counts(_matcher(constraint, pod))[0]


@dataclass(frozen=True, slots=True)
class _FilterState:
    constraints: tuple[SpreadConstraint, ...]


class PodTopologySpread(PreFilterPlugin, FilterPlugin):
    """The DoNotSchedule constraints (module doc)."""

    name = plugin_names.POD_TOPOLOGY_SPREAD
    events = EVENTS

    def __init__(self, handle: Handle) -> None:
        super().__init__(handle)
        self.index = pod_index(handle)
        self.defaults = handle.shared(DefaultSelectors, lambda: DefaultSelectors(handle.objects))
        self.policies = handle.shared(_Policies, lambda: _Policies(handle))

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        if not pod.topology_spread_constraints:
            # The system defaults are all ScheduleAnyway: nothing to filter.
            return Status.skip()
        constraints = rules.of_action(
            rules.parse_constraints(list(pod.topology_spread_constraints), pod.labels, pod.ref),
            rules.DO_NOT_SCHEDULE,
        )
        if not constraints:
            return Status.skip()
        state.write(_FILTER_STATE, _FilterState(constraints))
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        pre = state.read(_FILTER_STATE, _FilterState)
        handle = self.handle
        n = handle.cluster.n
        if pre is None:
            if self.pre_filter(state, pod).is_skip:
                return FilterResult.all_pass(n)
            pre = state.read(_FILTER_STATE, _FilterState)
            assert pre is not None
        codes = [_codes(handle, c.topology_key, n) for c in pre.constraints]
        has_all = np.ones(n, dtype=np.bool_)
        for code, _ in codes:
            has_all &= code >= 0
        missing = np.zeros(n, dtype=np.bool_)
        skewed = np.zeros(n, dtype=np.bool_)
        decided = np.zeros(n, dtype=np.bool_)
        for constraint, (code, size) in zip(pre.constraints, codes, strict=True):
            has = code >= 0
            eligible = has_all
            policy = self.policies.mask(pod, constraint)
            if policy is not None:
                eligible = eligible & policy
            counts = _counts(self.index, constraint, pod, n)
            # One slot more than the key has values: a row without the key (code -1) reads it, 0.
            in_domain = np.bincount(code[eligible], weights=counts[eligible], minlength=size + 1).astype(
                np.int64
            )
            present = np.bincount(code[eligible], minlength=size + 1) > 0
            minimum = rules.global_minimum(in_domain[present], constraint.min_domains)
            at_node = np.where(has, in_domain[code], 0)
            fits = rules.skew_passes(
                at_node, constraint.selector.matches(pod.labels), minimum, constraint.max_skew
            )
            lacks = ~has & ~decided
            missing |= lacks
            decided |= lacks
            over = has & ~fits & ~decided
            skewed |= over
            decided |= over
        passed: BoolArray = ~decided

        def reasons() -> ReasonMasks:
            out: list[tuple[BoolArray, str]] = []
            if missing.any():
                out.append((missing, rules.NODE_LABEL_NOT_MATCH))
            if skewed.any():
                out.append((skewed, rules.CONSTRAINTS_NOT_MATCH))
            return out

        return FilterResult(passed, reasons, unresolvable=missing)


@dataclass(frozen=True, slots=True)
class _ScoreState:
    constraints: tuple[SpreadConstraint, ...]
    require_all: bool


class PodTopologySpreadScore(PreScorePlugin, ScorePlugin):
    """The ScheduleAnyway constraints, or the system defaults for a pod with none, scored and
    normalised over the candidate nodes; times ``weight`` (nodeorder's ``podtopologyspread.weight``)."""

    name = plugin_names.POD_TOPOLOGY_SPREAD
    events = EVENTS

    def __init__(self, handle: Handle, weight: int) -> None:
        super().__init__(handle)
        self.weight = weight
        self.index = pod_index(handle)
        self.defaults = handle.shared(DefaultSelectors, lambda: DefaultSelectors(handle.objects))
        self.policies = handle.shared(_Policies, lambda: _Policies(handle))

    def constraints(self, pod: PodInfo) -> tuple[tuple[SpreadConstraint, ...], bool]:
        """The pod's ScheduleAnyway constraints and whether nodes must have every key (explicit
        constraints), or the system defaults (nodes without a zone still spread by hostname)."""
        if pod.topology_spread_constraints:
            explicit = rules.parse_constraints(list(pod.topology_spread_constraints), pod.labels, pod.ref)
            return rules.of_action(explicit, rules.SCHEDULE_ANYWAY), True
        selector = self.defaults.of(pod)
        if selector.empty:
            return (), False
        return tuple(
            SpreadConstraint(c.max_skew, c.topology_key, c.when_unsatisfiable, selector)
            for c in rules.SYSTEM_DEFAULTS
        ), False

    def pre_score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> Status:
        constraints, require_all = self.constraints(pod)
        if not constraints:
            return Status.skip()
        state.write(_SCORE_STATE, _ScoreState(constraints, require_all))
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> FloatArray:
        pre = state.read(_SCORE_STATE, _ScoreState)
        handle = self.handle
        n = feasible.shape[0]
        if pre is None:
            return np.zeros(n, dtype=np.float64)
        codes = [_codes(handle, c.topology_key, n) for c in pre.constraints]
        has_all = np.ones(n, dtype=np.bool_)
        for code, _ in codes:
            has_all &= code >= 0
        ignored = feasible & ~has_all if pre.require_all else np.zeros(n, dtype=np.bool_)
        scored = feasible & ~ignored
        # The nodes whose pods count (kube's processAllNode): every live node, with every key when
        # the constraints are explicit.
        counted = has_all if pre.require_all else handle.cluster.alive[:n]
        total = np.zeros(n, dtype=np.float64)
        for constraint, (code, size) in zip(pre.constraints, codes, strict=True):
            counts = _counts(self.index, constraint, pod, n)
            has = code >= 0
            if constraint.topology_key == rules.HOSTNAME:
                domains = int(np.count_nonzero(scored))
                at_node = counts
            else:
                shifted = code.astype(np.int64) + 1  # 0: no such label (the "" domain of kube's map)
                domains = int(np.count_nonzero(np.bincount(shifted[scored], minlength=size + 1)))
                eligible = counted
                policy = self.policies.mask(pod, constraint)
                if policy is not None:
                    eligible = eligible & policy
                in_domain = np.bincount(shifted[eligible], weights=counts[eligible], minlength=size + 1)
                at_node = in_domain.astype(np.int64)[shifted]
            weight = rules.topology_normalizing_weight(domains)
            total += np.where(has, rules.constraint_scores(at_node, constraint.max_skew, weight), 0.0)
        raw = rules.round_scores(total)
        normalized = rules.normalize_scores(raw, feasible, ignored)
        scores: FloatArray = normalized.astype(np.float64) * float(self.weight)
        return scores
