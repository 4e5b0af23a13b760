"""NodePorts (kube-scheduler's plugin of that name, PreFilter and Filter): a node fits a pod only if
none of the pod's host ports conflicts with one held there (:mod:`common.model.placement.node_ports`).

The ports held per node row are kept in a :class:`~common.model.placement.node_ports.PortIndex`, fed as a
:class:`~scheduler.cluster.state.ClusterListener`: bound pods, and assumed ones, which the cluster state
counts from Reserve on, so a burst never puts two pods on one port. A pod without host ports skips the
filter in PreFilter (kube's Skip). A conflict is Unschedulable: evicting the pod that holds the port
would free it.

Retried (kube-scheduler's EventsToRegister with queueing hints, as 1.36 runs them) when a node is added,
and when a pod that held a port the parked pod asks for leaves its node (``isSchedulableAfterPodDeleted``:
the deletion of a pod without such a port is no reason to try again). A member of ``predicates``
switched by ``predicate.NodePortsEnable``.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.placement.node_ports import NO_FREE_PORTS, PortIndex, fits
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    FilterPlugin,
    FilterResult,
    Handle,
    PreFilterPlugin,
)
from gpuq_k8s.scheduler.framework.status import Status


class NodePorts(PreFilterPlugin, FilterPlugin):
    name = plugin_names.NODE_PORTS
    events = frozenset({ClusterEvent.POD_DELETED, ClusterEvent.NODE_ADDED})

    def __init__(self, handle: Handle) -> None:
        super().__init__(handle)
        self.ports = PortIndex()
        handle.cluster.subscribe(self)

    # -- ClusterListener ----------------------------------------------------------------------------
    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        self.ports.grow(row + 1)

    def pod_added(self, pod: PodInfo, row: int) -> None:
        if pod.host_ports:
            self.ports.add(row, pod.host_ports)

    def pods_added(self, pods: Sequence[PodInfo], rows: Sequence[int]) -> None:
        for pod, row in zip(pods, rows, strict=True):
            if pod.host_ports:
                self.ports.add(row, pod.host_ports)

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        if pod.host_ports:
            self.ports.remove(row, pod.host_ports)

    # -- the filter ---------------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        return Status.success() if pod.host_ports else Status.skip()

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        cluster = self.handle.cluster
        n = cluster.n
        alive = cluster.alive[:n]
        taken = self.ports.conflicts(pod.host_ports, n)
        passed: BoolArray = alive & ~taken
        rejected = alive & taken
        return FilterResult(passed, lambda: [(rejected, NO_FREE_PORTS)])

    def queueing_hint(self, event: ClusterEvent, pod: PodInfo, old: object, new: object) -> bool:
        if event is ClusterEvent.POD_DELETED and isinstance(old, PodInfo):
            # Only a pod that held one of the ports asked can have freed it.
            return bool(old.host_ports) and not fits(pod.host_ports, old.host_ports)
        return True
