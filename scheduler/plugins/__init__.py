"""The plugins gpuq ships, by configuration name."""

from __future__ import annotations

from scheduler.framework.registry import Registry
from scheduler.plugins.binpack import Binpack
from scheduler.plugins.capacity_card import CapacityCardPlugin
from scheduler.plugins.capacity_scheduling import CapacityScheduling
from scheduler.plugins.conformance import Conformance
from scheduler.plugins.crossquota import CrossQuota
from scheduler.plugins.drf import DRF
from scheduler.plugins.gang import Gang
from scheduler.plugins.gpu_quota import GPUQuota
from scheduler.plugins.nodeorder import NodeOrder
from scheduler.plugins.overcommit import Overcommit
from scheduler.plugins.predicates import Predicates
from scheduler.plugins.priority import Priority
from scheduler.plugins.proportion import Proportion
from scheduler.plugins.strategy_fit import ResourceStrategyFit


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
