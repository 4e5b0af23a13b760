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
from gpuq_k8s.common.model.nodeorder import NodeOrderArgs
from gpuq_k8s.common.model.predicates import PredicatesArgs
from gpuq_k8s.scheduler.framework.interfaces import Handle, Plugin
from gpuq_k8s.scheduler.framework.registry import MemberFactory, PluginSettings, plugin_args
from gpuq_k8s.scheduler.plugins.inter_pod_affinity import InterPodAffinity, InterPodAffinityScore
from gpuq_k8s.scheduler.plugins.pod_topology_spread import PodTopologySpread, PodTopologySpreadScore

PredicateSwitch = Callable[[PredicatesArgs], bool]


def predicate(enabled: PredicateSwitch | None, build: Callable[[Handle], Plugin]) -> MemberFactory:
    """A member of ``predicates`` built unless ``enabled`` (its ``predicate.<X>Enable``) is false;
    ``enabled`` None: always built (a filter Volcano's predicates runs unconditionally)."""

    def factory(handle: Handle, settings: PluginSettings) -> Plugin | None:
        args = plugin_args(settings, PredicatesArgs) or PredicatesArgs()
        return build(handle) if enabled is None or enabled(args) else None

    return factory


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


# Entry -> its members, in order. Each placement rule adds its member here (design.md "Placement rules").
MEMBERS: Final[Mapping[str, tuple[MemberFactory, ...]]] = {
    plugin_names.PREDICATES: (
        predicate(lambda a: a.pod_topology_spread, PodTopologySpread),
        predicate(lambda a: a.pod_affinity, InterPodAffinity),
    ),
    plugin_names.NODEORDER: (
        scorer(_pod_affinity_score),
        scorer(_pod_topology_spread_score),
    ),
}
