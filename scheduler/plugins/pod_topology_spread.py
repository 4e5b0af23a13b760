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
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.placement import topology_spread as rules
from gpuq_k8s.common.model.placement.label_selector import LabelSelector
from gpuq_k8s.common.model.placement.topology_spread import SpreadConstraint
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.cluster.pod_index import Domains, Int64Array, PodIndex, PodMatcher
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
from gpuq_k8s.scheduler.plugins.node_selection import (
    NodeSelection,
    compile_selection,
    selection_mask,
    untolerated_taints,
)

# kube's EventsToRegister: an assigned pod added, relabelled or deleted; a node added, deleted,
# relabelled or retainted.
EVENTS: Final = frozenset(
    {
        ClusterEvent.POD_BOUND,
        ClusterEvent.POD_LABELS_CHANGED,
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
    """Per pod class, the rows topology spread counts for a constraint: every constraint's key (the
    eligible nodes), and what the inclusion policies admit, the pod's nodeSelector and required node
    affinity (``nodeAffinityPolicy: Honor``) and the taints it tolerates (``nodeTaintsPolicy: Honor``);
    and which domains those rows hold. Kept until a node's labels or taints change, or a node comes or
    goes."""

    def __init__(self, handle: Handle) -> None:
        self._handle = handle
        self._masks: dict[tuple[object, ...], BoolArray] = {}
        self._present: dict[tuple[object, ...], BoolArray] = {}
        self._validity = (-1, -1)

    def _valid(self) -> None:
        cluster = self._handle.cluster
        validity = (cluster.static_generation, cluster.n)
        if validity != self._validity or len(self._masks) + len(self._present) >= _MAX_CLASSES:
            self._masks.clear()
            self._present.clear()
            self._validity = validity

    def policy(self, pod: PodInfo, constraint: SpreadConstraint) -> tuple[object, BoolArray | None]:
        """The rows the constraint's policies admit (None: every row), and a key naming that set."""
        affinity = constraint.node_affinity_policy == rules.HONOR and bool(pod.node_selector or pod.affinity)
        taints = constraint.node_taints_policy == rules.HONOR
        if not (affinity or taints):
            return None, None
        self._valid()
        cluster = self._handle.cluster
        n = cluster.n
        try:
            selection: object = compile_selection(pod) if affinity else None
        except InvalidValue:
            selection = "unreadable"  # kube ignores the error and matches no node
        taint_ids = tuple(untolerated_taints(cluster, pod)) if taints else ()
        key = ("policy", selection, taint_ids)
        found = self._masks.get(key)
        if found is None:
            mask = np.ones(n, dtype=np.bool_)
            if selection == "unreadable":
                mask[:] = False
            elif isinstance(selection, NodeSelection) and not selection.unconstrained:
                mask &= selection_mask(cluster, selection, n)
            if taint_ids:
                mask &= ~cluster.node_taints[:n, list(taint_ids)].any(axis=1)
            found = self._masks[key] = mask
        return key, found

    def eligible(
        self, keys: tuple[str, ...], domains: list[Domains], policy_key: object, policy: BoolArray | None
    ) -> BoolArray:
        """Rows with every key of ``keys`` (their ``domains``) that ``policy`` admits."""
        self._valid()
        key = ("eligible", keys, policy_key)
        found = self._masks.get(key)
        if found is None:
            mask = domains[0].has.copy()
            for more in domains[1:]:
                mask &= more.has
            if policy is not None:
                mask &= policy
            found = self._masks[key] = mask
        return found

    def present(self, key: tuple[object, ...], domains: Domains, eligible: BoolArray) -> BoolArray:
        """Per domain slot of ``domains``, whether an ``eligible`` row is in it (slot 0 never)."""
        self._valid()
        found = self._present.get(key)
        if found is None:
            found = np.bincount(domains.shifted[eligible], minlength=domains.slots) > 0
            found[0] = False
            self._present[key] = found
        return found


def _counts(index: PodIndex, constraint: SpreadConstraint, pod: PodInfo, n: int) -> tuple[Int64Array, int]:
    """Matching pods per row and their total (kube counts none for an empty selector)."""
    if constraint.selector.empty:
        return np.zeros(n, dtype=np.int64), 0
    return index.counts(_matcher(constraint, pod))


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
            rules.pod_constraints(pod.topology_spread_constraints, pod.labels, pod.ref),
            rules.DO_NOT_SCHEDULE,
        )
        if not constraints:
            return Status.skip()
        state.write(_FILTER_STATE, _FilterState(constraints))
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
        keys = tuple(c.topology_key for c in pre.constraints)
        domains = [index.domains(key, n) for key in keys]
        missing = np.zeros(n, dtype=np.bool_)
        skewed = np.zeros(n, dtype=np.bool_)
        decided = np.zeros(n, dtype=np.bool_)
        for constraint, of_key in zip(pre.constraints, domains, strict=True):
            lacks = ~of_key.has & ~decided
            missing |= lacks
            decided |= lacks
            counts, total = _counts(index, constraint, pod, n)
            if not total:
                continue  # no matching pod anywhere: every domain at 0, within any maxSkew
            policy_key, policy = self.policies.policy(pod, constraint)
            eligible = self.policies.eligible(keys, domains, policy_key, policy)
            present = self.policies.present((constraint.topology_key, keys, policy_key), of_key, eligible)
            weights = np.where(eligible, counts, 0)
            summed = np.bincount(of_key.shifted, weights=weights, minlength=of_key.slots)
            in_domain = summed.astype(np.int64)
            in_domain[0] = 0
            minimum = rules.global_minimum(in_domain[present], constraint.min_domains)
            self_match = constraint.selector.matches(pod.labels)
            fits = rules.skew_passes(in_domain[of_key.shifted], self_match, minimum, constraint.max_skew)
            over = of_key.has & ~fits & ~decided
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
            explicit = rules.pod_constraints(pod.topology_spread_constraints, pod.labels, pod.ref)
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
        n = feasible.shape[0]
        if pre is None:
            return np.zeros(n, dtype=np.float64)
        index = self.index
        cluster = self.handle.cluster
        keys = tuple(c.topology_key for c in pre.constraints)
        domains = [index.domains(key, n) for key in keys]
        ignored: BoolArray | None = None
        counted: BoolArray | None = None  # None: every row
        if pre.require_all:
            # Nodes missing a key of explicit constraints are ignored; only nodes with every key count.
            counted = self.policies.eligible(keys, domains, None, None)
            ignored = feasible & ~counted
            scored = feasible & counted
        else:  # the system defaults: a node without a zone is a domain of its own (kube's "")
            if cluster.node_count != n:
                counted = cluster.alive[:n]  # not the ghost rows of deleted nodes
            scored = feasible
        total = np.zeros(n, dtype=np.float64)
        for constraint, of_key in zip(pre.constraints, domains, strict=True):
            counts, matched = _counts(index, constraint, pod, n)
            if constraint.topology_key == rules.HOSTNAME:
                size = int(np.count_nonzero(scored))
                # kube counts the node's own pods, whatever the policies
                part: FloatArray = counts.astype(np.float64)
            else:
                present = np.bincount(of_key.shifted, weights=scored, minlength=of_key.slots)
                size = int(np.count_nonzero(present))
                if matched:
                    _, policy = self.policies.policy(pod, constraint)
                    eligible = counted if policy is None else policy if counted is None else counted & policy
                    weights: Int64Array = counts if eligible is None else np.where(eligible, counts, 0)
                    sums = np.bincount(of_key.shifted, weights=weights, minlength=of_key.slots)
                    part = np.asarray(sums, dtype=np.float64)[of_key.shifted]
                else:
                    part = np.zeros(n, dtype=np.float64)
            # kube's scoreForCount, count * log(domains + 2) + (maxSkew - 1), where the node has the key
            part *= rules.topology_normalizing_weight(size)
            part += float(constraint.max_skew - 1)
            if not of_key.every:
                part *= of_key.has
            total += part
        raw = rules.round_scores(total)
        normalized = rules.normalize_scores(raw, feasible, ignored)
        scores: FloatArray = normalized.astype(np.float64) * float(self.weight)
        return scores
