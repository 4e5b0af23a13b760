"""``capacity-scheduling``: ElasticQuota min/max and quota-aware preemption, thin glue over
:mod:`common.model.elastic` (spec ``capacity-scheduling.md``, design.md Semantics 4).

It also watches the guaranteed pool (:mod:`~scheduler.plugins.elastic_guarantee`, over
:mod:`common.model.elastic.guarantee`): when the sum of every ElasticQuota's ``min`` exceeds what the
nodes have allocatable, the quotas involved get the ``GuaranteeOvercommitted`` condition and a Warning
event, at the batched status sync.

Usage is the engine's :class:`~common.model.elastic.ledger.ElasticQuotaInfos`, charged per pod key by cluster
events (bind, assume, release), so Reserve/Unreserve are idempotent and an informer re-list cannot
double-count. PostFilter asks the engine for victims node by node (single-node preemption, as the
KEP) on the nodes whose rejection preemption can resolve, and nominates the best one.

Job mode (Volcano's enqueue action): a PodGroup enters its queue only if its namespace's ElasticQuota
can hold it, counting what the namespace's jobs already Inqueue reserve; the plugin answers the
framework's enqueue calls with :class:`~scheduler.plugins.elastic_enqueue.ElasticEnqueue`, the glue over
the pure rule :mod:`common.model.elastic.enqueue`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from datetime import datetime
from typing import ClassVar, Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.elastic.args import CapacitySchedulingArgs
from gpuq_k8s.common.model.elastic.ledger import ElasticQuotaInfos, request_items
from gpuq_k8s.common.model.elastic.preemption import (
    VictimScope,
    select_victims_on_node,
    spare_gang_members,
    victim_scope,
)
from gpuq_k8s.common.model.elastic.quota import validate_elastic_quota
from gpuq_k8s.common.model.events import EventRecord
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quantity import PODS
from gpuq_k8s.common.model.victim_selection import Candidate, Victims, best_first
from gpuq_k8s.common.model.wire import Obj, section
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    EnqueuePlugin,
    FilterOutcome,
    GroupInfo,
    Handle,
    PostFilterPlugin,
    PostFilterResult,
    PreFilterPlugin,
    ReservePlugin,
    StatusPatch,
)
from gpuq_k8s.scheduler.framework.registry import PluginSettings, plugin_args
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.plugins.device_charges import ClassRequests
from gpuq_k8s.scheduler.plugins.elastic_enqueue import ElasticEnqueue
from gpuq_k8s.scheduler.plugins.elastic_guarantee import GuaranteedPool
from gpuq_k8s.scheduler.plugins.resource_fit import dra_served_columns

Int64Array = npt.NDArray[np.int64]
_UNBOUNDED: Final = 1 << 62
# Pending freeable-array updates applied at once; bounds the list when PostFilter never runs.
_MAX_PENDING: Final = 4096


# A gang whose minMember pods the quota can never hold at once: only its quota, its PodGroup or its
# members (one that asks less) can change that.
GANG: Final = f"{plugin_names.CAPACITY_SCHEDULING}:gang"


class CapacityScheduling(PreFilterPlugin, PostFilterPlugin, ReservePlugin, EnqueuePlugin):
    name = plugin_names.CAPACITY_SCHEDULING
    events = frozenset({ClusterEvent.POD_DELETED, ClusterEvent.QUOTA_CHANGED, ClusterEvent.NODE_ADDED})
    event_groups: ClassVar[Mapping[str, frozenset[ClusterEvent]]] = {
        GANG: frozenset({ClusterEvent.QUOTA_CHANGED, ClusterEvent.PODGROUP_CHANGED, ClusterEvent.POD_ADDED})
    }

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        args = plugin_args(settings, CapacitySchedulingArgs) or CapacitySchedulingArgs()
        # DRA claims counted as the resources deviceClassMappings names (docs/design.md "Quota over
        # devices"): every pod this plugin reads goes through ``self.devices.pod``.
        self.devices = ClassRequests(handle, args.classes)
        self.infos = ElasticQuotaInfos()
        # What bound pods request per node row, per namespace with an ElasticQuota and summed over the
        # namespaces without one: the upper bound of what preemption can free on each node, so
        # PostFilter only asks the engine about nodes where evicting every eligible pod could help.
        self._freeable: dict[str, Int64Array] = {}
        self._unquoted: Int64Array = np.zeros((0, 0), dtype=np.int64)
        # Pod events not yet applied to those arrays, as (namespace, row, pod, sign, items): only
        # PostFilter reads them, so a bind costs an append instead of a numpy row update (_flush).
        # ``items`` is the engine's memoised tuple of the pod's request: pods asking the same share
        # it, so the flush builds one vector per distinct request, found by identity.
        self._pending: list[tuple[str, int, PodInfo, int, tuple[tuple[str, int], ...]]] = []
        # The pod this plugin's Reserve charged last: the cluster's add of the same pod follows, and
        # is recognised without asking the engine (which would answer "already charged" anyway).
        self._reserved: str | None = None
        # Priorities of bound pods per namespace (value -> count): a preemptor with no lower-priority
        # pod in reach is answered without looking at any node.
        self._priorities: dict[str, Counter[int]] = {}
        # The guaranteed pool: the sum of min against the nodes' allocatable, its conditions.
        self.pool = GuaranteedPool(handle, self.infos)
        # Job mode's enqueue check over this ledger (Volcano's enqueue action).
        self.enqueue_check = ElasticEnqueue(handle, self.infos, self.devices)
        for namespace, name, obj in handle.objects.list(kinds.ELASTIC_QUOTA):
            self._object(kinds.ELASTIC_QUOTA, namespace, name, obj)
        handle.objects.subscribe(self._object)
        handle.cluster.subscribe(self)

    def _object(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        if kind == kinds.NAMESPACE:
            # A Namespace's deletion starting (or a re-created one) changes whether its quota counts.
            for quota_namespace, quota_name, quota in list(self.handle.objects.list(kinds.ELASTIC_QUOTA)):
                if quota_namespace == name:
                    self._object(kinds.ELASTIC_QUOTA, quota_namespace, quota_name, quota)
            return
        if kind != kinds.ELASTIC_QUOTA:
            return
        self.pool.quota_changed(namespace, obj)
        had = namespace in self.infos
        if (
            obj is None
            or _deleting(obj)
            or _deleting(self.handle.objects.get(kinds.NAMESPACE, "", namespace))
        ):
            # A quota being deleted, or in a Terminating namespace, guarantees nothing any more: no
            # new pod can be created there, and counting its min in "the sum of all min" would let
            # every other namespace borrow that much more, unreclaimably (the namespace controller
            # deletes it anyway, which may take long; without a controller, never).
            self.infos.remove(namespace)
        else:
            self.infos.upsert(validate_elastic_quota(obj))
        if had != (namespace in self.infos):
            self._rebuild_freeable()

    # -- freeable arrays --------------------------------------------------------------------------
    def _array(self, namespace: str) -> Int64Array:
        """The freeable array of ``namespace`` (the shared one if it has no quota), sized to the
        cluster; the caller flushes pending events first if it reads the values."""
        if namespace not in self.infos:
            return self._array_unquoted()
        rows, cols = self.handle.cluster.allocatable.shape
        array = self._freeable.get(namespace)
        if array is None or array.shape != (rows, cols):
            array = self._freeable[namespace] = _resized(array, rows, cols)
        return array

    def _array_unquoted(self) -> Int64Array:
        rows, cols = self.handle.cluster.allocatable.shape
        if self._unquoted.shape != (rows, cols):
            self._unquoted = _resized(self._unquoted, rows, cols)
        return self._unquoted

    def _rebuild_freeable(self) -> None:
        self._freeable = {}
        self._unquoted = np.zeros((0, 0), dtype=np.int64)
        cluster = self.handle.cluster
        # The cluster's pods already include every pending event.
        self._pending = [
            (pod.namespace, cluster.pod_row(pod.node_name), pod, 1, request_items(pod.requests))
            for pod in cluster.pods.values()
        ]
        self._flush()

    def _flush(self) -> None:
        """Apply the pending pod events, one ``np.add.at`` per array (integer sums: order-free)."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        pod_vector = self.handle.cluster.pod_vector
        infos = self.infos
        quoted: dict[str, bool] = {}
        # Distinct request vectors (signed), by the id of their items tuple: pending keeps every
        # tuple alive, so an id cannot be reused during the flush.
        index: dict[tuple[int, int], int] = {}
        vectors: list[Int64Array] = []
        # Keyed by the namespace with a quota, None for the namespaces without (one shared array):
        # the rows and, per row, the index of its vector.
        groups: dict[str | None, tuple[list[int], list[int]]] = {}
        for namespace, row, pod, sign, items in pending:
            has_quota = quoted.get(namespace)
            if has_quota is None:
                has_quota = quoted[namespace] = namespace in infos
            target = namespace if has_quota else None
            group = groups.get(target)
            if group is None:
                group = groups[target] = ([], [])
            group[0].append(row)
            which = (id(items), sign)
            at = index.get(which)
            if at is None:
                vector = pod_vector(pod)
                at = index[which] = len(vectors)
                vectors.append(vector if sign > 0 else -vector)
            group[1].append(at)
        matrix = np.array(vectors)
        for target, (rows, picks) in groups.items():
            array = self._array_unquoted() if target is None else self._array(target)
            np.add.at(array, np.asarray(rows, dtype=np.intp), matrix[picks, : array.shape[1]])

    # -- ClusterListener --------------------------------------------------------------------------
    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        if old is None or new is None or old.allocatable != new.allocatable:
            self.pool.nodes_changed()

    def pod_added(self, pod: PodInfo, row: int) -> None:
        namespace = pod.namespace
        key = pod.key
        if key == self._reserved:
            self._reserved = None
        else:
            self.infos.reserve(namespace, key, self.devices.pod(pod).requests)
        pending = self._pending
        pending.append((namespace, row, pod, 1, request_items(pod.requests)))
        if len(pending) >= _MAX_PENDING:
            self._flush()
        counts = self._priorities.get(namespace)
        if counts is None:
            counts = self._priorities[namespace] = Counter()
        counts[pod.priority or 0] += 1

    def pods_added(self, pods: Sequence[PodInfo], rows: Sequence[int]) -> None:
        """:meth:`pod_added` of each (a BulkPodListener: the start's bound pods a page at a time): the
        same charges, pending events and priority counts, the counts added together and the pending
        events flushed once a page (integer sums: the arrays end the same)."""
        reserved, reserve, charged = self._reserved, self.infos.reserve, self.devices.pod
        pending = self._pending
        added: Counter[tuple[str, int]] = Counter()
        try:
            for pod, row in zip(pods, rows, strict=True):
                namespace = pod.namespace
                key = pod.key
                if key == reserved:
                    reserved = self._reserved = None
                else:
                    reserve(namespace, key, charged(pod).requests)
                pending.append((namespace, row, pod, 1, request_items(pod.requests)))
                added[namespace, pod.priority or 0] += 1
        finally:  # an error of gpuq's own: the pods before it counted as pod_added counts them
            priorities = self._priorities
            for (namespace, priority), count in added.items():
                counts = priorities.get(namespace)
                if counts is None:
                    counts = priorities[namespace] = Counter()
                counts[priority] += count
            if len(pending) >= _MAX_PENDING:
                self._flush()

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        self._reserved = None
        self.infos.unreserve_pod(pod)
        pending = self._pending
        pending.append((pod.namespace, row, pod, -1, request_items(pod.requests)))
        if len(pending) >= _MAX_PENDING:
            self._flush()
        counts = self._priorities.get(pod.namespace)
        if counts is not None:
            counts[pod.priority or 0] -= 1
            if counts[pod.priority or 0] <= 0:
                del counts[pod.priority or 0]

    def audit_ledger(self) -> Callable[[Iterable[PodInfo], int], Generator[None, None, list[str]]]:
        """The ledger's audit against the scheduler's bound pods (scheduler/cache_debugger.py), of a
        copy taken now (copy-on-write: a few dicts) and compared in the debugger's later steps."""
        return self.infos.snapshot().audit_steps

    # -- extension points -------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        pod = self.devices.pod(pod)
        group = self.handle.group_of(pod)
        if group is not None and group.min_member > 1 and pod.namespace in self.infos:
            # The gang's minMember pods are held at once: a quota that can never hold them all is
            # "never" for each, before any of them is reserved or waits in Permit.
            requests = [self.devices.pod(member).requests for member in self.handle.group_members(group)]
            gang = self.infos.gang_refusal(pod.namespace, requests, group.min_member, f"PodGroup {group.key}")
            if gang is not None:
                return Status.unresolvable(gang.message, plugin=GANG)
        refusal = self.infos.prefilter(pod.namespace, pod.requests, "")
        if refusal is None:
            return Status.success()
        if refusal.unresolvable:
            # Asked more than max (or the guaranteed pool) itself: nothing to preempt for.
            return Status.unresolvable(refusal.message)
        return Status.unschedulable(refusal.message)

    def reserve(self, state: CycleState, pod: PodInfo, row: int) -> Status:
        pod = self.devices.pod(pod)
        key = pod.key
        self.infos.reserve(pod.namespace, key, pod.requests)
        self._reserved = key
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, row: int) -> None:
        self._reserved = None
        self.infos.unreserve_pod(pod)

    # -- enqueue (job mode): scheduler/plugins/elastic_enqueue.py ------------------------------------
    def enqueue(self, group: GroupInfo) -> Status:
        return self.enqueue_check.enqueue(group)

    def enqueued(self, group: GroupInfo) -> None:
        self.enqueue_check.enqueued(group)

    def dequeued(self, group: GroupInfo) -> None:
        self.enqueue_check.dequeued(group)

    def enqueue_pass(self, began: bool) -> None:
        self.enqueue_check.enqueue_pass(began)

    def _has_lower(self, namespaces: Iterable[str], priority: int) -> bool:
        return any(p < priority for ns in namespaces for p in self._priorities.get(ns, ()))

    def _reachable(self, pod: PodInfo, scope: VictimScope) -> Int64Array | None:
        """Per node, an upper bound of what evicting every eligible pod frees; None if nothing is."""
        self._flush()
        priority = pod.priority or 0
        if scope is VictimScope.SAME_NAMESPACE:
            if not self._has_lower((pod.namespace,), priority):
                return None
            return self._array(pod.namespace)
        if scope is VictimScope.NO_QUOTA:
            if not self._has_lower((ns for ns in self._priorities if ns not in self.infos), priority):
                return None
            return self._array(pod.namespace)
        guaranteed = self.infos.guaranteed
        borrowers = [
            ns
            for ns in self.infos.namespaces()
            if ns != pod.namespace
            and ns in self._freeable
            and (info := self.infos.get(ns)) is not None
            and info.over_min(guaranteed)
        ]
        if not borrowers:
            return None
        total = self._array(borrowers[0]).copy()
        for ns in borrowers[1:]:
            total += self._array(ns)
        return total

    def _candidates(self, pod: PodInfo, outcome: FilterOutcome) -> tuple[BoolArray, str]:
        """Nodes where preemption may help, vectorised; with none, why (the PostFilter message)."""
        cluster = self.handle.cluster
        n = cluster.n
        candidates = cluster.alive[:n].copy()
        for _, result, _first in outcome.results:
            if result.unresolvable is not None:
                candidates &= ~result.unresolvable
        if not candidates.any():
            return candidates, "no node can be helped by preemption"
        scope = victim_scope(pod, self.infos)
        if scope is VictimScope.NONE:
            return np.zeros(n, dtype=np.bool_), f"{pod.ref}: not eligible to preempt (preemptionPolicy=Never)"
        freeable = self._reachable(pod, scope)
        if freeable is None:
            return np.zeros(n, dtype=np.bool_), f"{pod.ref}: no eligible victims on any node ({scope.value})"
        request = cluster.pod_vector(pod)
        columns = np.flatnonzero(request)
        free = freeable[:n, columns]
        room = cluster.requested[:n, columns] - free + request[columns] <= cluster.allocatable[:n, columns]
        served = dra_served_columns(self.handle, columns.tolist())
        for i, asked in enumerate(columns.tolist()):
            if asked in served:  # DRA's where none is allocatable: no node room to free there
                room[:, i] |= cluster.allocatable[:n, asked] <= 0
        candidates &= room.all(axis=1)
        own = self.infos.get(pod.namespace)
        if own is not None and candidates.any():
            # The engine's quota checks, with the most any single node can free (a necessary condition).
            own_freed = scope is VictimScope.SAME_NAMESPACE
            guaranteed = self.infos.guaranteed
            total_used, total_min = self.infos.total_used, self.infos.total_min
            for key, amount in pod.requests.items():
                column = cluster.columns.get(key)
                if amount <= 0 or key == PODS or column is None:
                    continue
                freed = freeable[:n, column]
                if key in own.max:
                    used = own.used.amount(key) - (freed if own_freed else 0) + amount
                    candidates &= used <= own.max[key]
                if key in guaranteed:
                    candidates &= total_used.amount(key) - freed + amount <= total_min.amount(key)
        return candidates, (
            f"{pod.ref}: preempting every eligible pod on any single node would not make room "
            "within the node and the elastic quotas"
        )

    def _gang_of(self, pod: PodInfo) -> tuple[str, int] | None:
        """A running pod's gang and how many members it runs beyond minMember (victim selection
        leaves it at least minMember)."""
        group = self.handle.group_of(pod)
        if group is None or group.min_member <= 1:
            return None
        return group.key, self.handle.ready_members(group) - group.min_member

    def post_filter(self, state: CycleState, pod: PodInfo, outcome: FilterOutcome) -> PostFilterResult:
        """Single-node preemption (design.md "Preemption"). Every candidate node gets its victims from
        the engine on its room and the quotas (scheduler-plugins' capacityscheduling dry-runs every
        node, with no offset); the candidates are then taken best first by kube's
        ``pickOneNodeForPreemption`` (full ties: the first name) and each is checked with the real
        filters with its victims gone; one they reject gets its victims chosen again with them."""
        handle = self.handle
        cluster = handle.cluster
        candidates, why_not = self._candidates(pod, outcome)
        original = pod
        pod = self.devices.pod(pod)  # its DRA claims as mapped resources, for the quota checks
        originals: dict[str, PodInfo] = {}
        rows = [int(r) for r in cluster.rank_order() if r < cluster.n and candidates[r]]
        if not rows:
            return PostFilterResult(Status.unschedulable(), message=f"preemption: {why_not}.")
        request = pod.requests
        keys = [k for k, v in request.items() if v > 0] + [PODS]
        asked = [c for c in (cluster.columns.get(k) for k in keys) if c is not None]
        served = {cluster.columns.names[c] for c in dra_served_columns(handle, asked)}
        budgets = handle.disruption_budgets()
        found: list[Candidate] = []
        # node -> its row, the pods the engine may take there and what it has free
        where: dict[str, tuple[int, list[PodInfo], dict[str, int]]] = {}
        chosen: dict[int, tuple[PodInfo, ...]] = {}  # id(candidate) -> its victims, least important first
        last_reason = ""
        for row in rows:
            free: dict[str, int] = {}
            for key in keys:
                column = cluster.columns.get(key)
                free[key] = (
                    # A mapped DRA resource is no node column: the devices' room is DynamicResources'
                    # to judge (fits_without), the quota's is counted here.
                    _UNBOUNDED
                    if (column is None and key in self.devices.resources)
                    # An extended resource DRA serves on this node (none allocatable): likewise.
                    or (key in served and column is not None and cluster.allocatable[row, column] <= 0)
                    else 0
                    if column is None
                    else int(cluster.allocatable[row, column] - cluster.requested[row, column])
                )
            running = []
            for p in self.handle.running_on(row):
                originals[p.key] = p
                running.append(self.devices.pod(p))
            node_pods = spare_gang_members(running, self._gang_of)
            selection = select_victims_on_node(pod, node_pods, free, self.infos, budgets=budgets)
            if not selection.ok:
                last_reason = selection.reason
                continue
            node = cluster.names[row]
            candidate = Candidate(node, Victims(selection.victims, selection.violations))
            found.append(candidate)
            chosen[id(candidate)] = selection.victims
            where[node] = (row, node_pods, free)

        def verify(candidate: Candidate) -> Candidate | None:
            nonlocal last_reason
            row, node_pods, free = where[candidate.node]
            victims = chosen[id(candidate)]
            if victims and handle.fits_without(original, row, [originals[v.key] for v in victims]):
                return candidate

            def fits(removed: Sequence[PodInfo]) -> bool:
                return handle.fits_without(original, row, [originals[v.key] for v in removed])

            exact = select_victims_on_node(pod, node_pods, free, self.infos, fits=fits, budgets=budgets)
            if not exact.ok:
                last_reason = exact.reason
                return None
            if not exact.victims:
                # The filters pass without evicting anyone: what rejected the pod is not about this
                # node any more. A nomination here would evict nobody and retry the pod at once.
                last_reason = (
                    f"node {candidate.node} has room and quota for {pod.ref} already; "
                    "what rejected it is not helped by evicting pods"
                )
                return None
            again = Candidate(candidate.node, Victims(exact.victims, exact.violations))
            chosen[id(again)] = exact.victims
            return again

        best = best_first(found, verify)
        if best is None:
            return PostFilterResult(
                Status.unschedulable(), message=f"preemption: {last_reason or 'no victims found'}."
            )
        victims = tuple(originals[v.key] for v in chosen[id(best)])
        victims_text = ", ".join(v.key for v in victims)
        return PostFilterResult(
            Status.success(),
            nominated_node=best.node,
            victims=victims,
            message=f"preemption: nominated node {best.node}, preempting {victims_text}.",
        )

    # -- the guaranteed pool: scheduler/plugins/elastic_guarantee.py ---------------------------------
    def min_over_capacity(self) -> dict[str, int]:
        """``gpuq_elastic_quota_min_over_capacity`` (:meth:`GuaranteedPool.min_over_capacity`)."""
        return self.pool.min_over_capacity()

    # -- status -----------------------------------------------------------------------------------
    def take_status(self, now: datetime) -> tuple[list[StatusPatch], list[EventRecord]]:
        """``status.used`` of every ElasticQuota whose usage changed since the last sync, and its
        GuaranteeOvercommitted condition once it has one."""
        patches: list[StatusPatch] = []
        pool, events = self.pool.take_conditions(now)
        for namespace in sorted(self.infos.take_dirty() | pool):
            info = self.infos.get(namespace)
            if info is not None:
                status = self.infos.status(namespace)
                condition = self.pool.condition(namespace)
                if condition is not None:
                    status["conditions"] = [dict(condition)]
                patches.append(StatusPatch(kinds.ELASTIC_QUOTA, namespace, info.name, status))
        return patches, events

    # -- report -----------------------------------------------------------------------------------
    def report(self) -> dict[str, list[dict[str, object]]]:
        rows: list[dict[str, object]] = []
        for namespace in self.infos.namespaces():
            info = self.infos.get(namespace)
            assert info is not None
            rows.append(
                {
                    "namespace": namespace,
                    "name": info.name,
                    "used": self.infos.used_numbers(namespace),
                    "min": info.min.to_numbers(),
                    "max": info.max.to_numbers(),
                    # The GuaranteeOvercommitted condition, as the last status sync wrote it.
                    "conditions": [dict(c) for c in (self.pool.condition(namespace),) if c is not None],
                }
            )
        return {"elasticQuotas": rows}

    def pod_fields(self, pod: PodInfo) -> dict[str, object]:
        return {}


def _resized(array: Int64Array | None, rows: int, cols: int) -> Int64Array:
    grown = np.zeros((rows, cols), dtype=np.int64)
    if array is not None and array.size:
        r, c = min(rows, array.shape[0]), min(cols, array.shape[1])
        grown[:r, :c] = array[:r, :c]
    return grown


def _deleting(obj: Obj | None) -> bool:
    """The object's deletion has started (a Namespace also says so by ``status.phase: Terminating``)."""
    if obj is None:
        return False
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return True
    return bool(section(obj, "status").get("phase") == "Terminating")
