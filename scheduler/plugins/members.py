"""The members each Volcano plugin entry runs: kube-scheduler's filter plugins for ``predicates``, its
score plugins for ``nodeorder`` (volcano-sh/volcano ``pkg/scheduler/plugins/{predicates,nodeorder}``).

A member is a plugin of gpuq's framework in its own right (its own module, its own ``name`` from
:mod:`common.model.plugin_names`, its verdicts reported under that name), built after its entry's own
plugin in the order listed here (kube-scheduler's default profile order, which decides the reason a node
is reported under), placed in the entry's tier and governed by the entry's switches
(:mod:`scheduler.framework.registry`). Whether it is built at all is the entry's arguments' call:
``predicates``' ``predicate.<X>Enable`` (:class:`~common.model.predicates.PredicatesArgs`), ``nodeorder``'s
``<x>.weight`` (a weight of 0 builds no scorer, as Volcano registers no node-order function for it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.predicates import PredicatesArgs
from gpuq_k8s.scheduler.framework.interfaces import Handle, Plugin
from gpuq_k8s.scheduler.framework.registry import MemberFactory, PluginSettings, plugin_args
from gpuq_k8s.scheduler.plugins.node_volume_limits import NodeVolumeLimits
from gpuq_k8s.scheduler.plugins.volume_binding import VolumeBinding
from gpuq_k8s.scheduler.plugins.volume_restrictions import VolumeRestrictions
from gpuq_k8s.scheduler.plugins.volume_zone import VolumeZone

PredicateSwitch = Callable[[PredicatesArgs], bool]


def predicate(enabled: PredicateSwitch | None, build: Callable[[Handle], Plugin]) -> MemberFactory:
    """A member of ``predicates`` built unless ``enabled`` (its ``predicate.<X>Enable``) is false;
    ``enabled`` None: always built (a filter Volcano's predicates runs unconditionally)."""

    def factory(handle: Handle, settings: PluginSettings) -> Plugin | None:
        args = plugin_args(settings, PredicatesArgs) or PredicatesArgs()
        return build(handle) if enabled is None or enabled(args) else None

    return factory


def _volume_binding(handle: Handle, settings: PluginSettings) -> Plugin | None:
    """VolumeBinding, with ``volumebinding.bindTimeoutSeconds``, unless predicate.VolumeBindingEnable
    is false."""
    args = plugin_args(settings, PredicatesArgs) or PredicatesArgs()
    return VolumeBinding(handle, args.volume_binding_timeout) if args.volume_binding else None


# Entry -> its members, in order. Each placement rule adds its member here (design.md "Placement rules").
MEMBERS: Final[Mapping[str, tuple[MemberFactory, ...]]] = {
    plugin_names.PREDICATES: (
        # VolumeRestrictions has no switch: Volcano's predicates does not run it; kube-scheduler's
        # default profile always does (design.md "Placement rules").
        predicate(None, VolumeRestrictions),
        predicate(lambda a: a.node_volume_limits, NodeVolumeLimits),
        _volume_binding,
        predicate(lambda a: a.volume_zone, VolumeZone),
    ),
    plugin_names.NODEORDER: (),
}
