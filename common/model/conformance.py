"""Volcano's ``conformance``: pods an eviction must never touch (volcano-sh/volcano
``pkg/scheduler/plugins/conformance``): critical pods (PriorityClass ``system-cluster-critical`` or
``system-node-critical``) and every pod of ``kube-system``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from gpuq_k8s.common.model.pods import PodInfo

CRITICAL_CLASSES: Final = frozenset({"system-cluster-critical", "system-node-critical"})
SYSTEM_NAMESPACE: Final = "kube-system"


def evictable(pod: PodInfo) -> bool:
    return pod.priority_class_name not in CRITICAL_CLASSES and pod.namespace != SYSTEM_NAMESPACE


def evictable_pods(pods: Iterable[PodInfo]) -> list[PodInfo]:
    return [pod for pod in pods if evictable(pod)]
