"""``capacity-scheduling``: ElasticQuota min/max and quota-aware preemption, thin glue over
:mod:`common.model.elastic` (spec ``capacity-scheduling.md``, DESIGN Semantics 4).

Usage is the engine's :class:`~common.model.elastic.ElasticQuotaInfos`, charged per pod key by cluster
events (bind, assume, release), so Reserve/Unreserve are idempotent and an informer re-list cannot
double-count. PostFilter asks the engine for victims node by node (single-node preemption, as the
KEP) on the nodes whose rejection preemption can resolve, and nominates the best one.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from common.model import elastic as engine
from common.model.nodes import NodeInfo
from common.model.pods import PodInfo
from common.model.quantity import PODS
from scheduler.cluster.objects import ELASTIC_QUOTA, Obj
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interfaces import (
    ClusterEvent,
    FilterOutcome,
    Handle,
    PostFilterPlugin,
    PostFilterResult,
    PreFilterPlugin,
    ReservePlugin,
)
from scheduler.framework.registry import PluginSettings
from scheduler.framework.status import Status

NAME: Final = "capacity-scheduling"


class CapacityScheduling(PreFilterPlugin, PostFilterPlugin, ReservePlugin):
    name = NAME
    events = frozenset({ClusterEvent.POD_DELETED, ClusterEvent.QUOTA_CHANGED, ClusterEvent.NODE_ADDED})

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        self.infos = engine.ElasticQuotaInfos()
        for namespace, name, obj in handle.objects.list(ELASTIC_QUOTA):
            self._object(ELASTIC_QUOTA, namespace, name, obj)
        handle.objects.subscribe(self._object)
        handle.cluster.subscribe(self)

    def _object(self, kind: str, namespace: str, name: str, obj: Obj | None) -> None:
        if kind != ELASTIC_QUOTA:
            return
        if obj is None:
            self.infos.remove(namespace)
        else:
            self.infos.upsert(engine.validate_elastic_quota(obj))

    # -- ClusterListener --------------------------------------------------------------------------
    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        return

    def pod_added(self, pod: PodInfo, row: int) -> None:
        self.infos.reserve_pod(pod)

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        self.infos.unreserve_pod(pod)

    # -- extension points -------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        decision = self.infos.prefilter(pod.namespace, pod.requests, "")
        if decision.ok:
            return Status.success()
        return Status.unschedulable(decision.message)

    def reserve(self, state: CycleState, pod: PodInfo, row: int) -> Status:
        self.infos.reserve_pod(pod)
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, row: int) -> None:
        self.infos.unreserve_pod(pod)

    def post_filter(self, state: CycleState, pod: PodInfo, outcome: FilterOutcome) -> PostFilterResult:
        cluster = self.handle.cluster
        n = cluster.n
        candidates = cluster.alive[:n].copy()
        for _, result, _first in outcome.results:
            if result.unresolvable is not None:
                candidates &= ~result.unresolvable
        rows = [int(r) for r in np.flatnonzero(candidates)]
        if not rows:
            return PostFilterResult(
                Status.unschedulable(), message="preemption: no node can be helped by preemption."
            )
        request = pod.requests
        keys = [k for k, v in request.items() if v > 0] + [PODS]
        best: tuple[tuple[int, int, int, int], str, engine.VictimSelection] | None = None
        last_reason = ""
        ranks = cluster.ranks()
        for row in rows:
            free: dict[str, int] = {}
            for key in keys:
                column = cluster.columns.get(key)
                free[key] = (
                    0
                    if column is None
                    else int(cluster.allocatable[row, column] - cluster.requested[row, column])
                )
            node_pods = list(cluster.pods_on[row].values())
            selection = engine.select_victims_on_node(pod, node_pods, free, self.infos)
            if not selection.ok:
                last_reason = selection.reason
                continue
            prios = [v.priority or 0 for v in selection.victims]
            rank = (max(prios, default=-(2**31)), sum(prios), len(selection.victims), int(ranks[row]))
            if best is None or rank < best[0]:
                best = (rank, cluster.names[row], selection)
        if best is None:
            return PostFilterResult(
                Status.unschedulable(), message=f"preemption: {last_reason or 'no victims found'}."
            )
        _, node, selection = best
        victims = ", ".join(v.key for v in selection.victims)
        return PostFilterResult(
            Status.success(),
            nominated_node=node,
            victims=selection.victims,
            message=f"preemption: nominated node {node}, preempting {victims}.",
        )

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
                }
            )
        return {"elasticQuotas": rows}

    def pod_fields(self, pod: PodInfo) -> dict[str, object]:
        return {}
