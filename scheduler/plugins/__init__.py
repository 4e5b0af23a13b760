"""The plugins gpuq ships, by configuration name."""

from __future__ import annotations

from typing import Final

from gpuq_k8s.scheduler.framework.interfaces import Plugin
from gpuq_k8s.scheduler.framework.registry import Registry
from gpuq_k8s.scheduler.plugins.binpack import Binpack
from gpuq_k8s.scheduler.plugins.capacity_card import CapacityCardPlugin
from gpuq_k8s.scheduler.plugins.capacity_scheduling import CapacityScheduling
from gpuq_k8s.scheduler.plugins.conformance import Conformance
from gpuq_k8s.scheduler.plugins.crossquota import CrossQuota
from gpuq_k8s.scheduler.plugins.drf import DRF
from gpuq_k8s.scheduler.plugins.gang import Gang
from gpuq_k8s.scheduler.plugins.gpu_quota import GPUQuota
from gpuq_k8s.scheduler.plugins.members import LEADING, MEMBERS
from gpuq_k8s.scheduler.plugins.nodeorder import NodeOrder
from gpuq_k8s.scheduler.plugins.overcommit import Overcommit
from gpuq_k8s.scheduler.plugins.predicates import Predicates
from gpuq_k8s.scheduler.plugins.priority import Priority
from gpuq_k8s.scheduler.plugins.proportion import Proportion
from gpuq_k8s.scheduler.plugins.reservation import Reservation
from gpuq_k8s.scheduler.plugins.strategy_fit import ResourceStrategyFit

# Every plugin the scheduler provides; each is registered under its own ``name`` (a
# common.model.plugin_names constant), so the registry, the configuration and docs/configuration.md
# agree on one spelling (tests/unit/test_docs.py).
PLUGINS: Final[tuple[type[Plugin], ...]] = (
    Priority,
    Gang,
    Predicates,
    CrossQuota,
    ResourceStrategyFit,
    CapacityScheduling,
    CapacityCardPlugin,
    GPUQuota,
    Conformance,
    Proportion,
    # sunset by Volcano in 2022, run with the reserve action (design.md Semantics 15)
    Reservation,
    # Volcano's default configuration
    Overcommit,
    DRF,
    NodeOrder,
    Binpack,
)


def default_registry() -> Registry:
    registry = Registry()
    for plugin in PLUGINS:
        registry.register(plugin.name, plugin)
    for entry, members in LEADING.items():
        for member in members:
            registry.register_member(entry, member, leading=True)
    for entry, members in MEMBERS.items():
        for member in members:
            registry.register_member(entry, member)
    return registry
