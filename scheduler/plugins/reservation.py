"""``reservation``: Volcano's starvation prevention plugin (sunset by Volcano in 2022, run by gpuq with
the ``reserve`` action; design.md Semantics 15), glue over :mod:`common.model.reservation`.

It answers the reserve action's two session points, as Volcano's plugin did: *TargetJob* (gated by
``enableTargetJob``) elects the job of the highest priority that has waited longest, *ReservedNodes*
(gated by ``enableReservedNodes``) picks the unlocked node with the most idle resources. It also keeps
the lock: its Filter refuses the locked nodes to every pod of another job than the target
(unresolvable: no preemption unlocks a node; retried when the reserve action releases its lock). In
Volcano that check sat in the allocate action, which read the target job once at program start and so,
in the code that shipped, never applied it; gpuq applies the design's meaning. Being a Filter, it is
switched off with the entry's ``enablePredicate: false`` as every Filter is.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

import numpy as np

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.reservation import Candidate, Lock, ReservationArgs, elect, max_idle_node
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    DEFAULT_EVENTS,
    BoolArray,
    ClusterEvent,
    FilterPlugin,
    FilterResult,
    Handle,
    PreFilterPlugin,
    ReservedNodesPlugin,
    TargetJobPlugin,
)
from gpuq_k8s.scheduler.framework.registry import PluginSettings, plugin_args
from gpuq_k8s.scheduler.framework.status import Status


class Reservation(TargetJobPlugin, ReservedNodesPlugin, PreFilterPlugin, FilterPlugin):
    name = plugin_names.RESERVATION
    events = DEFAULT_EVENTS | {ClusterEvent.NODES_UNLOCKED}

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        self.args = plugin_args(settings, ReservationArgs) or ReservationArgs.parse({})
        self.lock_timeout = self.args.lock_timeout

    # -- the reserve action's session points -------------------------------------------------------
    def target_job(self, candidates: Sequence[Candidate], passed_over: Container[str]) -> Candidate | None:
        return elect(candidates, passed_over)

    def reserved_node(self, lock: Lock) -> str | None:
        cluster = self.handle.cluster
        rows = sorted(cluster.live_rows(), key=lambda row: cluster.names[row])
        free = cluster.free
        return max_idle_node(((cluster.names[row], free[row].tolist()) for row in rows), lock.nodes)

    # -- the lock ----------------------------------------------------------------------------------
    def _refused(self, pod: PodInfo) -> Lock | None:
        lock = self.handle.reservation_lock
        if lock is None:
            return None
        group = self.handle.group_of(pod)
        job = group.ref if group is not None else pod.ref  # as scheduler/actions/reserve.py names it
        return lock if lock.refuses(job) else None

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        return Status.success() if self._refused(pod) is not None else Status.skip()

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        cluster = self.handle.cluster
        n = cluster.n
        lock = self._refused(pod)
        if lock is None:
            return FilterResult.all_pass(n)
        locked: BoolArray = np.zeros(n, dtype=np.bool_)
        for node in lock.nodes:
            row = cluster.row_of.get(node)
            if row is not None and row < n:
                locked[row] = True
        locked &= cluster.alive[:n]
        message = f"node(s) locked for the target job {lock.target} (reservation)"
        return FilterResult(cluster.alive[:n] & ~locked, lambda: [(locked, message)], unresolvable=locked)
