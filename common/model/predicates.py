"""Volcano's ``predicates`` plugin: which of kube-scheduler's filters it runs (its ``predicate.*Enable``
switches, volcano-sh/volcano ``pkg/scheduler/plugins/predicates/predicates.go``).

In Volcano one plugin, ``predicates``, runs kube-scheduler's filter plugins (NodeAffinity, NodePorts,
TaintToleration, InterPodAffinity, NodeVolumeLimits, VolumeZone, PodTopologySpread, VolumeBinding,
DynamicResources, and the node checks it always runs: NodeUnschedulable and the resource fit). gpuq keeps
that configuration surface: a tier's ``predicates`` entry expands into member plugins, one per
kube-scheduler filter (``scheduler/plugins/__init__.py`` lists them), each switched by the argument
below that Volcano reads for it (default on, as in Volcano), and all of them governed by the switches
set on the ``predicates`` entry (``enablePredicate``) and placed in its tier.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final

from pydantic import Field

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.plugin_args import PluginArgs, ZeroWeight, expect

NODE_AFFINITY_ENABLE: Final = "predicate.NodeAffinityEnable"
NODE_PORTS_ENABLE: Final = "predicate.NodePortsEnable"
TAINT_TOLERATION_ENABLE: Final = "predicate.TaintTolerationEnable"
POD_AFFINITY_ENABLE: Final = "predicate.PodAffinityEnable"
NODE_VOLUME_LIMITS_ENABLE: Final = "predicate.NodeVolumeLimitsEnable"
VOLUME_ZONE_ENABLE: Final = "predicate.VolumeZoneEnable"
POD_TOPOLOGY_SPREAD_ENABLE: Final = "predicate.PodTopologySpreadEnable"
VOLUME_BINDING_ENABLE: Final = "predicate.VolumeBindingEnable"
DYNAMIC_RESOURCE_ALLOCATION_ENABLE: Final = "predicate.DynamicResourceAllocationEnable"
CACHE_ENABLE: Final = "predicate.CacheEnable"
# VolumeBinding's arguments (Volcano's predicates/helper.go; kube-scheduler's VolumeBindingArgs)
VOLUME_BINDING_TIMEOUT: Final = "volumebinding.bindTimeoutSeconds"
VOLUME_BINDING_WEIGHT: Final = "volumebinding.weight"
DEFAULT_BIND_TIMEOUT_SECONDS: Final = 600
MAX_BIND_TIMEOUT_SECONDS: Final = 86_400

Switch = Annotated[bool, expect("true or false")]
Seconds = Annotated[
    int,
    Field(ge=1, le=MAX_BIND_TIMEOUT_SECONDS),
    expect(f"an integer number of seconds from 1 to {MAX_BIND_TIMEOUT_SECONDS}"),
]


class PredicatesArgs(PluginArgs):
    """The ``predicates`` arguments: Volcano's switches, one per kube-scheduler filter it runs.

    ``predicate.CacheEnable`` is Volcano's per-session cache of predicate results: gpuq's filters keep
    their own per-pod-class caches whatever it says (a cache changes no decision), so it is accepted
    and has no effect on what is decided.

    ``volumebinding.bindTimeoutSeconds`` bounds VolumeBinding's PreBind wait for the PV controller
    (Volcano's and kube-scheduler's default: 600). ``volumebinding.weight`` is accepted and scores
    nothing: VolumeBinding scores only under kube-scheduler's alpha StorageCapacityScoring gate, off
    by default, as in Volcano (``volumebinding.shape``, that gate's argument, is refused).
    """

    PLUGIN: ClassVar[str] = plugin_names.PREDICATES

    node_affinity: Switch = Field(True, alias=NODE_AFFINITY_ENABLE)
    node_ports: Switch = Field(True, alias=NODE_PORTS_ENABLE)
    taint_toleration: Switch = Field(True, alias=TAINT_TOLERATION_ENABLE)
    pod_affinity: Switch = Field(True, alias=POD_AFFINITY_ENABLE)
    node_volume_limits: Switch = Field(True, alias=NODE_VOLUME_LIMITS_ENABLE)
    volume_zone: Switch = Field(True, alias=VOLUME_ZONE_ENABLE)
    pod_topology_spread: Switch = Field(True, alias=POD_TOPOLOGY_SPREAD_ENABLE)
    volume_binding: Switch = Field(True, alias=VOLUME_BINDING_ENABLE)
    dynamic_resource_allocation: Switch = Field(True, alias=DYNAMIC_RESOURCE_ALLOCATION_ENABLE)
    cache: Switch = Field(False, alias=CACHE_ENABLE)
    volume_binding_timeout: Seconds = Field(DEFAULT_BIND_TIMEOUT_SECONDS, alias=VOLUME_BINDING_TIMEOUT)
    volume_binding_weight: ZeroWeight = Field(1, alias=VOLUME_BINDING_WEIGHT)
