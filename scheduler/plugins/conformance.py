"""``conformance``: preemption and reclaim never evict critical or kube-system pods (Volcano's
conformance plugin; the rule is :mod:`common.model.conformance`)."""

from __future__ import annotations

from collections.abc import Sequence

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.conformance import evictable_pods
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.interfaces import Handle, PreemptablePlugin, ReclaimablePlugin
from gpuq_k8s.scheduler.framework.registry import PluginSettings


class Conformance(PreemptablePlugin, ReclaimablePlugin):
    name = plugin_names.CONFORMANCE

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)

    def preemptable(self, preemptor: PodInfo, candidates: Sequence[PodInfo]) -> Sequence[PodInfo] | None:
        return evictable_pods(candidates)

    def reclaimable(self, reclaimer: PodInfo, candidates: Sequence[PodInfo]) -> Sequence[PodInfo] | None:
        return evictable_pods(candidates)
