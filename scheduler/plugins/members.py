"""The members each Volcano plugin entry runs: kube-scheduler's filter plugins for ``predicates``, its
score plugins for ``nodeorder`` (volcano-sh/volcano ``pkg/scheduler/plugins/{predicates,nodeorder}``).

A member is a plugin of gpuq's framework in its own right (its own module, its own ``name`` from
:mod:`common.model.plugin_names`, its verdicts reported under that name), built before (``LEADING``) or
after (``MEMBERS``) its entry's own plugin in the order listed here (kube-scheduler's default profile
order, which decides the reason a node is reported under), placed in the entry's tier and governed by
the entry's switches (:mod:`scheduler.framework.registry`). Whether it is built at all is the entry's
arguments' call: ``predicates``' ``predicate.<X>Enable``
(:class:`~common.model.predicates.PredicatesArgs`), ``nodeorder``'s ``<x>.weight`` (a weight of 0
builds no scorer, as Volcano registers no node-order function for it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Final

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.nodeorder import NodeOrderArgs
from gpuq_k8s.common.model.predicates import PredicatesArgs
from gpuq_k8s.scheduler.framework.interfaces import Handle, Plugin
from gpuq_k8s.scheduler.framework.registry import MemberFactory, PluginSettings, plugin_args
from gpuq_k8s.scheduler.plugins.dynamic_resources import DynamicResources
from gpuq_k8s.scheduler.plugins.gpu_share import GPUShare
from gpuq_k8s.scheduler.plugins.image_locality import ImageLocality
from gpuq_k8s.scheduler.plugins.inter_pod_affinity import InterPodAffinity, InterPodAffinityScore
from gpuq_k8s.scheduler.plugins.node_name import NodeName
from gpuq_k8s.scheduler.plugins.node_ports import NodePorts
from gpuq_k8s.scheduler.plugins.node_volume_limits import NodeVolumeLimits
from gpuq_k8s.scheduler.plugins.pod_topology_spread import PodTopologySpread, PodTopologySpreadScore
from gpuq_k8s.scheduler.plugins.scheduling_gates import SchedulingGates
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


def scorer(build: Callable[[Handle, NodeOrderArgs], Plugin | None]) -> MemberFactory:
    """A member of ``nodeorder`` built from its arguments (:class:`NodeOrderArgs`); ``build`` returns
    None for a weight of 0 (Volcano then registers no score for it)."""

    def factory(handle: Handle, settings: PluginSettings) -> Plugin | None:
        args = plugin_args(settings, NodeOrderArgs) or NodeOrderArgs.parse({})
        return build(handle, args)

    return factory


def _pod_affinity_score(handle: Handle, args: NodeOrderArgs) -> Plugin | None:
    if not args.pod_affinity:
        return None
    return InterPodAffinityScore(handle, args.pod_affinity, args.hard_pod_affinity)


def _pod_topology_spread_score(handle: Handle, args: NodeOrderArgs) -> Plugin | None:
    return PodTopologySpreadScore(handle, args.pod_topology_spread) if args.pod_topology_spread else None


def _image_locality(handle: Handle, args: NodeOrderArgs) -> Plugin | None:
    return ImageLocality(handle, args.image_locality) if args.image_locality else None


# Entry -> the members built before its own plugin, in order: the filters kube-scheduler's default
# profile runs before NodeResourcesFit (the base plugin's last check), so that a node failing both is
# reported under the member, as kube-scheduler reports it.
LEADING: Final[Mapping[str, tuple[MemberFactory, ...]]] = {
    plugin_names.PREDICATES: (
        predicate(None, NodeName),
        predicate(lambda a: a.node_ports, NodePorts),
    ),
}

# Entry -> its members after its own plugin, in order. Each placement rule adds its member here
# (design.md "Placement rules").
MEMBERS: Final[Mapping[str, tuple[MemberFactory, ...]]] = {
    plugin_names.PREDICATES: (
        # VolumeRestrictions has no switch: Volcano's predicates does not run it; kube-scheduler's
        # default profile always does (design.md "Placement rules").
        predicate(None, VolumeRestrictions),
        predicate(lambda a: a.node_volume_limits, NodeVolumeLimits),
        _volume_binding,
        predicate(lambda a: a.volume_zone, VolumeZone),
        predicate(lambda a: a.pod_topology_spread, PodTopologySpread),
        predicate(lambda a: a.pod_affinity, InterPodAffinity),
        predicate(lambda a: a.dynamic_resource_allocation, DynamicResources),
    ),
    plugin_names.NODEORDER: (
        scorer(_pod_topology_spread_score),
        scorer(_pod_affinity_score),
        scorer(_image_locality),
    ),
    # tensor-fusion pods on shared GPUs (design.md Semantics 19): placement beside gpu-quota's charge.
    plugin_names.GPU_QUOTA: (GPUShare.member,),
}


def with_safety_rules(plugins: Iterable[Plugin], handle: Handle) -> list[Plugin]:
    """``plugins`` and the rules no configuration can do without (design.md "Placement rules"):
    SchedulingGates always (the apiserver refuses to bind a gated pod), and the DynamicResources guard
    when no ``predicates`` entry is configured (a pod whose claims gpuq cannot allocate would never
    start where it is bound; a ``predicates`` entry decides itself with
    ``predicate.DynamicResourceAllocationEnable``)."""
    built = list(plugins)
    out: list[Plugin] = [SchedulingGates(handle), *built]
    if not any(plugin.config_name == plugin_names.PREDICATES for plugin in built):
        out.append(DynamicResources(handle))
    return out
