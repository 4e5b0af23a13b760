"""``drf``: job order by dominant resource share (Volcano's drf job order), glue over
:func:`common.model.drf.dominant_share`.

A pod's key is its job's dominant share (its PodGroup's bound pods over the cluster's allocatable;
a pod without a PodGroup is a job of its own, with nothing placed yet), then creation time and
namespace/name, so equal shares order as the priority plugin's tie-break does and the same input
always schedules in the same order.

Shares move as pods are placed: the key is *live* (``QueueSortPlugin.live``), so the scheduling queue
reads it again when a pod reaches the head and puts the pod back behind a job whose share is now
smaller. That is Volcano's allocate action, which pushes a job back into its queue after placing a
task, so two jobs on one node get one pod each (``allocate_test.go``, "two Jobs on one node").

drf is also a preemptable plugin (Volcano's drf preemptableFn, on unless ``enablePreemptable:
false``): it lets a preemptor evict only pods of jobs whose dominant share, without them, stays at or
above the preemptor job's share with the preemptor (:meth:`DRF.victims`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.annotations import GROUP_NAME
from gpuq_k8s.common.model.drf import dominant_share, preemptable
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.interfaces import Handle, PreemptablePlugin, QueueSortPlugin
from gpuq_k8s.scheduler.framework.registry import PluginSettings


class DRF(QueueSortPlugin, PreemptablePlugin):
    name = plugin_names.DRF
    live: ClassVar[bool] = True

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        self._allocated: dict[str, dict[str, int]] = {}  # PodGroup key -> what its placed pods hold
        self._total: dict[str, int] | None = None
        handle.cluster.subscribe(self)

    # -- ClusterListener ----------------------------------------------------------------------------
    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        self._total = None

    def pod_added(self, pod: PodInfo, row: int) -> None:
        self._charge(pod, 1)

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        self._charge(pod, -1)

    def _charge(self, pod: PodInfo, sign: int) -> None:
        group = pod.annotations.get(GROUP_NAME)
        if not group:
            return
        key = f"{pod.namespace}/{group}"
        held = self._allocated.setdefault(key, {})
        for resource, amount in pod.requests_with_pod_count.items():
            held[resource] = held.get(resource, 0) + sign * amount
        if not any(held.values()):
            del self._allocated[key]  # nothing placed: forget the job (a deleted group leaves no entry)

    # -- the share ------------------------------------------------------------------------------------
    def total(self) -> dict[str, int]:
        """The cluster's allocatable, summed over the live nodes."""
        if self._total is None:
            cluster = self.handle.cluster
            n = cluster.n
            column = cluster.allocatable[:n][cluster.alive[:n]].sum(axis=0)
            self._total = {r: int(column[c]) for c, r in enumerate(cluster.columns.names)}
        return self._total

    def share(self, pod: PodInfo) -> float:
        """The dominant share of ``pod``'s job."""
        group = pod.annotations.get(GROUP_NAME)
        if not group:
            return 0.0  # a job of its own: nothing of it is placed while it waits
        held = self._allocated.get(f"{pod.namespace}/{group}")
        if not held:
            return 0.0
        return dominant_share(held, self.total())[1]

    def _held(self, pod: PodInfo) -> dict[str, int]:
        """What ``pod``'s job holds: its PodGroup's placed pods, or the pod itself if placed."""
        group = pod.annotations.get(GROUP_NAME)
        if group:
            return dict(self._allocated.get(f"{pod.namespace}/{group}", {}))
        return dict(pod.requests_with_pod_count) if pod.key in self.handle.cluster.pods else {}

    def victims(self, preemptor: PodInfo, preemptees: Sequence[PodInfo]) -> list[PodInfo]:
        """Volcano's drf preemptable function: of ``preemptees`` (placed pods), those whose job's share
        without them (taken one after another, per job) stays at or above the preemptor job's share
        with the preemptor (:func:`common.model.drf.preemptable`)."""
        total = self.total()
        mine = self._held(preemptor)
        for resource, amount in preemptor.requests_with_pod_count.items():
            mine[resource] = mine.get(resource, 0) + amount
        share = dominant_share(mine, total)[1]
        remaining: dict[str, dict[str, int]] = {}
        out: list[PodInfo] = []
        for victim in preemptees:
            job = victim.annotations.get(GROUP_NAME)
            key = f"{victim.namespace}/{job}" if job else victim.key
            held = remaining.setdefault(key, self._held(victim))
            for resource, amount in victim.requests_with_pod_count.items():
                held[resource] = held.get(resource, 0) - amount
            if preemptable(share, dominant_share(held, total)[1]):
                out.append(victim)
        return out

    def preemptable(self, preemptor: PodInfo, candidates: Sequence[PodInfo]) -> Sequence[PodInfo] | None:
        return self.victims(preemptor, candidates)

    def job_order_key(self, pod: PodInfo) -> tuple[Any, ...]:
        """drf's own criterion (for combining job orders across plugins): smaller share first."""
        return (self.share(pod),)

    def sort_key(self, pod: PodInfo) -> tuple[Any, ...]:
        # The framework breaks ties by creation time, then namespace/name.
        return (self.share(pod),)
