"""Volcano's ``allocate`` action: the resource fit it checks itself.

Volcano's allocate tests a task's request against the node's idle resources before it asks the
predicate plugins (``predicateFn`` in pkg/scheduler/actions/allocate/allocate.go), so a node is never
filled past its allocatable whatever plugins the configuration names. In gpuq that fit is part of the
``predicates`` plugin; a configuration without an enabled ``predicates`` (``enablePredicate: false``,
or not listed: the capacity-card design's own blocks) gets :class:`NodeResourcesFit` on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpuq_k8s.common.model import switches as sw
from gpuq_k8s.scheduler.framework.interfaces import Handle, Plugin
from gpuq_k8s.scheduler.plugins.resource_fit import NodeResourcesFit


def with_resource_fit(
    plugins: Iterable[Plugin], handle: Handle, plugin_switches: Mapping[str, Mapping[str, bool]]
) -> list[Plugin]:
    """``plugins``, plus the allocate action's own resource fit when no enabled plugin checks it."""
    built = list(plugins)
    for plugin in built:
        if isinstance(plugin, NodeResourcesFit) and plugin_switches.get(plugin.name, {}).get(
            sw.PREDICATE, True
        ):
            return built
    return [*built, NodeResourcesFit(handle)]
