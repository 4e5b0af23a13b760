"""The plugins gpuq ships, by configuration name."""

from __future__ import annotations

from gpuq_k8s.scheduler.framework.registry import Registry
from gpuq_k8s.scheduler.plugins.binpack import Binpack
from gpuq_k8s.scheduler.plugins.capacity_card import CapacityCardPlugin
from gpuq_k8s.scheduler.plugins.capacity_scheduling import CapacityScheduling
from gpuq_k8s.scheduler.plugins.conformance import Conformance
from gpuq_k8s.scheduler.plugins.crossquota import CrossQuota
from gpuq_k8s.scheduler.plugins.drf import DRF
from gpuq_k8s.scheduler.plugins.gang import Gang
from gpuq_k8s.scheduler.plugins.gpu_quota import GPUQuota
from gpuq_k8s.scheduler.plugins.nodeorder import NodeOrder
from gpuq_k8s.scheduler.plugins.overcommit import Overcommit
from gpuq_k8s.scheduler.plugins.predicates import Predicates
from gpuq_k8s.scheduler.plugins.priority import Priority
from gpuq_k8s.scheduler.plugins.proportion import Proportion
from gpuq_k8s.scheduler.plugins.strategy_fit import ResourceStrategyFit


def default_registry() -> Registry:
    registry = Registry()
    registry.register(Priority.name, Priority)
    registry.register(Gang.name, Gang)
    registry.register(Predicates.name, Predicates)
    registry.register(CrossQuota.name, CrossQuota)
    registry.register(ResourceStrategyFit.name, ResourceStrategyFit)
    registry.register(CapacityScheduling.name, CapacityScheduling)
    registry.register(CapacityCardPlugin.name, CapacityCardPlugin)
    registry.register(GPUQuota.name, GPUQuota)
    registry.register(Conformance.name, Conformance)
    registry.register(Proportion.name, Proportion)
    # Volcano's default configuration
    for plugin in (Overcommit, DRF, NodeOrder, Binpack):
        registry.register(plugin.name, plugin)
    return registry
