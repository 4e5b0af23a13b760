"""Generate docs/configuration.md from the code, so the reference cannot drift from what gpuq accepts.

    python -m gpuq_k8s.docs            # rewrite docs/configuration.md
    python -m gpuq_k8s.docs --check    # exit 1 when the committed file is stale

Every documented plugin argument is parsed by the plugin's argument model (``Args.parse``) with its
example value (the models refuse unknown keys, so a renamed key fails the generation), every field of
the argument models must be documented, and every annotation constant of ``common.model.annotations``
must have a description. The plugins documented are exactly those of ``common.model.plugin_names``
(the names the configuration accepts and the scheduler registers), each with the model
``common.model.config.ARGUMENTS`` reads its arguments with: a plugin added, renamed or given arguments
without its documentation following fails the generation.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gpuq_k8s.common.model import annotations as keys
from gpuq_k8s.common.model import (
    binpack,
    gang,
    nodeorder,
    overcommit,
    plugin_names,
    predicates,
    reservation,
    strategy_fit,
)
from gpuq_k8s.common.model.capacity_card.args import CapacityCardArgs
from gpuq_k8s.common.model.config import ARGUMENTS, DEFAULT_CONFIG_YAML
from gpuq_k8s.common.model.crossquota import args as crossquota_args
from gpuq_k8s.common.model.elastic import args as elastic_args
from gpuq_k8s.common.model.gpu_share.args import GPUQuotaArgs
from gpuq_k8s.common.model.placement import pod_affinity
from gpuq_k8s.common.model.plugin_args import PluginArgs
from gpuq_k8s.docs_volcano import volcano_sections
from gpuq_k8s.scheduler.plugins import default_registry

TARGET = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


@dataclass(frozen=True)
class Argument:
    key: str
    fields: tuple[str, ...]  # the model fields it sets
    example: Any
    meaning: str
    default: str


@dataclass(frozen=True)
class Plugin:
    name: str  # a common.model.plugin_names constant
    spec: str
    model: type[PluginArgs]
    parse: Callable[[Mapping[str, Any]], BaseModel]  # the model's parse
    required: Mapping[str, Any]  # the minimum a valid argument map holds
    arguments: tuple[Argument, ...]
    notes: str = ""  # semantics and what is refused, printed under the table


_MAPPING_EXAMPLE = [{"name": "nvidia.com/gpu", "deviceClassNames": ["gpu.nvidia.com", "mig.nvidia.com"]}]
_MAPPING_MEANING = (
    "Kueue's `deviceClassMappings`: a pod's DRA claims count as `name`, one unit per device its "
    "`ExactCount` requests ask of a listed DeviceClass (a `firstAvailable` request: its first "
    "subrequest; `adminAccess` and `All` requests not counted); each DeviceClass in one entry only "
    '(design.md "Quota over devices").'
)

PLUGINS: tuple[Plugin, ...] = (
    Plugin(
        plugin_names.PROPORTION,
        "Volcano pkg/scheduler/plugins/proportion",
        elastic_args.ProportionArgs,
        elastic_args.ProportionArgs.parse,
        {},
        (
            Argument(
                "deviceClassMappings",
                ("device_class_mappings",),
                _MAPPING_EXAMPLE,
                _MAPPING_MEANING + " The devices of the mapped classes join the cluster total shares "
                "are computed from.",
                "none (claims not counted)",
            ),
        ),
        "A queue's deserved share from its weight, capability and guarantee: queue order by share, "
        "overused queues get nothing new, allocatable and enqueue within capability, reclaimable from "
        "queues above their share.",
    ),
    Plugin(
        plugin_names.CAPACITY_SCHEDULING,
        "capacity-scheduling.md",
        elastic_args.CapacitySchedulingArgs,
        elastic_args.CapacitySchedulingArgs.parse,
        {},
        (
            Argument(
                "deviceClassMappings",
                ("device_class_mappings",),
                _MAPPING_EXAMPLE,
                _MAPPING_MEANING + " Checked against ElasticQuota max and the sum of min in PreFilter, "
                "charged with the pod; a preemption victim frees its mapped devices.",
                "none (claims not counted)",
            ),
        ),
        "ElasticQuota min/max, borrowing, preemption.",
    ),
    Plugin(
        plugin_names.GANG,
        "Volcano pkg/scheduler/plugins/gang; scheduler-plugins coscheduling's Permit timeout",
        gang.GangArgs,
        gang.GangArgs.parse,
        {},
        (
            Argument(
                "permitWaitingTimeSeconds",
                ("permit_waiting_time",),
                30,
                "The longest a gang holds its reserved pods in Permit waiting for its quorum; then they "
                "are rolled back and the pods their release can help are retried at once.",
                str(int(gang.DEFAULT_PERMIT_WAITING_SECONDS)),
            ),
        ),
        "PodGroup `minMember`: a group binds all together or not at all; with `minTaskMember` (when "
        "minMember is at least the sum of its values) every task (`volcano.sh/task-spec`) needs its "
        "minimum of pods to be valid and of placed pods to be ready. Preemptable and reclaimable: a "
        "running gang keeps minMember pods; a job starves below minMember.",
    ),
    Plugin(
        plugin_names.CAPACITY_CARD,
        "capacity-card.md",
        CapacityCardArgs,
        CapacityCardArgs.parse,
        {},
        (
            Argument(
                "cardUnlimitedCpuMemory",
                ("card_unlimited_cpu_memory",),
                True,
                "Pods that request cards are not checked against the queue's cpu and memory capability.",
                "false",
            ),
            Argument(
                "nodeOrderWeight",
                ("node_order_weight",),
                2.0,
                "Multiplier of the node score `100 * 0.5^index` (index of the node's card type in `A|B|C`). "
                "gpuq's default configuration sets 100.0: the preference then outweighs "
                "resource-strategy-fit (at most 10 x 100) for up to four alternatives.",
                "1.0",
            ),
            Argument(
                "autoscaledCardTypes",
                ("autoscaled_card_types",),
                False,
                "gpuq's own. A card type no node offers right now may come with a node a node autoscaler "
                "adds: a pod asking for it is admitted while its queue's quota holds the request and waits "
                "for a node offering it. `false` (clusters without autoscaling) refuses such a pod as "
                "never fitting (design.md Semantics 16).",
                "true",
            ),
            Argument(
                "deviceNaming",
                ("device_naming",),
                {"accel.example.com": {"productName": "model", "memory": "hbm", "migTypes": ["partition"]}},
                "gpuq's own. Per DRA driver, the device attributes (`productName`, `type`, `migProfile`, "
                "`migTypes`: the `type` values of a MIG partition) and capacities (`memory`, `tflops`) that "
                "give a device's card type and amounts, for every quota over devices and the webhook's "
                'claim checks (design.md "Quota over devices").',
                "NVIDIA's gpu.nvidia.com names for every driver (productName, type, profile, memory)",
            ),
        ),
    ),
    Plugin(
        plugin_names.CROSSQUOTA,
        "crossquota.md",
        crossquota_args.CrossQuotaArgs,
        crossquota_args.CrossQuotaArgs.parse,
        {crossquota_args.GPU_RESOURCE_NAMES: "nvidia.com/gpu"},
        (
            Argument(
                crossquota_args.GPU_RESOURCE_NAMES,
                ("gpu_resource_patterns",),
                "nvidia.com/gpu,amd.com/gpu",
                "Comma-separated regular expressions: a node with a matching allocatable resource is a GPU "
                "node; a pod requesting one is a GPU pod. Required. gpuq's default configuration lists "
                "`nvidia.com/gpu,nvidia.com/mig-.+,.+/gpu$`: every GPU resource card discovery knows "
                "(whole cards of any vendor, MIG instances, MPS replicas).",
                "(required)",
            ),
            Argument(
                crossquota_args.QUOTA_RESOURCES,
                ("quota_resources",),
                "cpu,memory",
                "Resources that non-GPU pods are limited in on GPU nodes.",
                ",".join(crossquota_args.DEFAULT_QUOTA_RESOURCES),
            ),
            Argument(
                f"{crossquota_args.QUOTA_PREFIX}<resource>",
                ("quotas",),
                "32",
                "Absolute quota per GPU node for non-GPU pods (a quantity). Overridden per node by the "
                f"`{keys.CROSSQUOTA_PREFIX}<resource>` annotation.",
                "none",
            ),
            Argument(
                f"{crossquota_args.QUOTA_PERCENTAGE_PREFIX}<resource>",
                ("quota_percentages",),
                "50",
                "Quota as a percentage of the node's allocatable, in (0, 100].",
                "none (100%)",
            ),
            Argument(
                f"{crossquota_args.WEIGHT_PREFIX}<resource>",
                ("resource_weights",),
                3,
                "Weight of the resource in the node score.",
                ", ".join(f"{k}: {v}" for k, v in crossquota_args.DEFAULT_RESOURCE_WEIGHTS.items())
                + f"; others {crossquota_args.DEFAULT_OTHER_WEIGHT}",
            ),
            Argument(
                crossquota_args.CROSS_QUOTA_WEIGHT,
                ("plugin_weight",),
                5,
                "Multiplier of the plugin's node score `sum(score*w)/sum(w)`; 0 switches the plugin's "
                "scoring off (its filter stays).",
                str(crossquota_args.DEFAULT_CROSS_QUOTA_WEIGHT),
            ),
        ),
    ),
    Plugin(
        plugin_names.RESOURCE_STRATEGY_FIT,
        "resource-strategy-fit.md",
        strategy_fit.ResourceStrategyFitArgs,
        strategy_fit.ResourceStrategyFitArgs.parse,
        {},
        (
            Argument(
                strategy_fit.PLUGIN_WEIGHT_KEY,
                ("plugin_weight",),
                10,
                "Multiplier of the node score `sum(score*w)/sum(w) * 100`; 0 switches the plugin's "
                "scoring off.",
                str(strategy_fit.DEFAULT_PLUGIN_WEIGHT),
            ),
            Argument(
                strategy_fit.RESOURCES_KEY,
                ("resources",),
                {"nvidia.com/*": {"type": "MostAllocated", "weight": 2}},
                "Map of resource name (or `prefix*` wildcard) to `{type: MostAllocated|LeastAllocated, "
                "weight: positive integer}`. Other wildcard forms (`*`, `*x`, `a*b`) are errors.",
                "cpu and memory, LeastAllocated, weight 1",
            ),
        ),
    ),
)


def field_of(model: type[PluginArgs], key: str) -> str:
    """The model field an argument key sets."""
    return next(name for name, field in model.model_fields.items() if field.alias == key)


def _scorer(key: str, example: int, meaning: str) -> Argument:
    """A nodeorder weight argument, with its model field and Volcano's default."""
    field = field_of(nodeorder.NodeOrderArgs, key)
    return Argument(key, (field,), example, meaning, str(nodeorder.DEFAULTS[key]))


VOLCANO_PLUGINS: tuple[Plugin, ...] = (
    Plugin(
        plugin_names.PREDICATES,
        "Volcano pkg/scheduler/plugins/predicates",
        predicates.PredicatesArgs,
        predicates.PredicatesArgs.parse,
        {},
        (
            *(
                Argument(key, (field,), False, meaning, default)
                for key, field, meaning, default in (
                    (
                        predicates.NODE_AFFINITY_ENABLE,
                        "node_affinity",
                        "nodeSelector and required node affinity (kube-scheduler's NodeAffinity filter).",
                        "true",
                    ),
                    (
                        predicates.NODE_PORTS_ENABLE,
                        "node_ports",
                        "host ports of containers and sidecars, by protocol and hostIP with the `0.0.0.0` "
                        "wildcard (NodePorts).",
                        "true",
                    ),
                    (
                        predicates.TAINT_TOLERATION_ENABLE,
                        "taint_toleration",
                        "NoSchedule and NoExecute taints (TaintToleration).",
                        "true",
                    ),
                    (
                        predicates.POD_AFFINITY_ENABLE,
                        "pod_affinity",
                        "required inter-pod affinity and anti-affinity (InterPodAffinity).",
                        "true",
                    ),
                    (
                        predicates.NODE_VOLUME_LIMITS_ENABLE,
                        "node_volume_limits",
                        "CSI volume counts per node (NodeVolumeLimits).",
                        "true",
                    ),
                    (
                        predicates.VOLUME_ZONE_ENABLE,
                        "volume_zone",
                        "a bound volume's zone (VolumeZone).",
                        "true",
                    ),
                    (
                        predicates.POD_TOPOLOGY_SPREAD_ENABLE,
                        "pod_topology_spread",
                        "topology spread constraints with DoNotSchedule (PodTopologySpread).",
                        "true",
                    ),
                    (
                        predicates.VOLUME_BINDING_ENABLE,
                        "volume_binding",
                        "PersistentVolumeClaims: bound, bindable or provisionable on the node "
                        "(VolumeBinding).",
                        "true",
                    ),
                    (
                        predicates.DYNAMIC_RESOURCE_ALLOCATION_ENABLE,
                        "dynamic_resource_allocation",
                        "pods with `spec.resourceClaims` (DynamicResources): their ResourceClaims are "
                        "allocated from the ResourceSlices' devices and written before the binding "
                        '(design.md "DRA devices"); `false` places them as if they had none (no device is '
                        "allocated for them). Volcano master never reads this key (its DRA filter follows "
                        "the feature gate, on since 1.34).",
                        "true",
                    ),
                    (
                        predicates.CACHE_ENABLE,
                        "cache",
                        "Volcano's per-session cache of predicate results: "
                        "accepted, no effect on decisions (gpuq's filters cache per pod class whatever "
                        "it says).",
                        "false",
                    ),
                )
            ),
            Argument(
                predicates.VOLUME_BINDING_TIMEOUT,
                ("volume_binding_timeout",),
                300,
                "Seconds VolumeBinding's PreBind waits for the PV controller to bind a pod's claims "
                "before the pod is unreserved and retried; 1 to 86400.",
                str(predicates.DEFAULT_BIND_TIMEOUT_SECONDS),
            ),
            Argument(
                predicates.VOLUME_BINDING_WEIGHT,
                ("volume_binding_weight",),
                1,
                "Accepted, scores nothing: VolumeBinding scores only under kube-scheduler's alpha "
                "StorageCapacityScoring gate, off by default (as in Volcano).",
                "1",
            ),
        ),
        "Runs kube-scheduler's filters as Volcano's predicates plugin does, each a member plugin named as "
        "in kube-scheduler (its verdicts are reported under that name), placed in the `predicates` "
        "entry's tier and governed by the switches set on it (`enablePredicate: false` turns them all "
        "off). Always on: node readiness, `spec.unschedulable`, `spec.nodeName` (NodeName) and the "
        "resource fit; SchedulingGates runs whatever the configuration says. Each argument "
        'switches one filter off with `false` (design.md "Placement rules").',
    ),
    Plugin(
        plugin_names.OVERCOMMIT,
        "Volcano pkg/scheduler/plugins/overcommit",
        overcommit.OvercommitArgs,
        overcommit.OvercommitArgs.parse,
        {},
        (
            Argument(
                overcommit.FACTOR_KEY,
                ("factor",),
                1.5,
                "The cluster's allocatable is multiplied by it for the enqueue check; at least 1.0.",
                str(overcommit.DEFAULT_FACTOR),
            ),
        ),
        "Enqueue: a PodGroup with `spec.minResources` enters the queue when, on every resource it asks "
        "for, the minResources of the Inqueue PodGroups (and what Running ones hold beyond their pods) "
        "plus its own stay within `allocatable * factor - used`; one without minResources always enters. "
        "A refusal leaves it Pending with a Normal `Unschedulable` event on the PodGroup: `resource in "
        "cluster is overused: overused cpu`. Refused: a factor below 1 (Volcano warns and uses 1.2).",
    ),
    Plugin(
        plugin_names.GPU_QUOTA,
        "gpu-resource-quota.md; tensor-fusion's GpuAllocator (internal/gpuallocator)",
        GPUQuotaArgs,
        GPUQuotaArgs.parse,
        {},
        (
            Argument(
                "gpuPlacement",
                ("placement",),
                "LowLoadFirst",
                "Which of a node's GPUs a tensor-fusion pod shares: `CompactFirst` the most used that "
                "has room (packs), `LowLoadFirst` the least used (spreads), tensor-fusion's placement "
                "modes.",
                "CompactFirst",
            ),
        ),
        "GPUResourceQuota totals and single limits. Its member GPUShare places a pod carrying "
        "tensor-fusion's annotations and no GPU resource on `gpu-count` shared GPUs with its TFLOPS and "
        "VRAM request left, charges the quota with the allocation and writes "
        "`tensor-fusion.ai/gpu-ids` before the binding (design.md Semantics 19).",
    ),
    Plugin(
        plugin_names.NODEORDER,
        "Volcano pkg/scheduler/plugins/nodeorder (kube-scheduler 1.36's scorers)",
        nodeorder.NodeOrderArgs,
        nodeorder.NodeOrderArgs.parse,
        {},
        (
            _scorer(
                nodeorder.LEAST_REQUESTED,
                2,
                "NodeResourcesFit LeastAllocated over cpu and memory (non-zero requests: 100m / 200Mi "
                "for a pod that sets none).",
            ),
            _scorer(nodeorder.MOST_REQUESTED, 1, "NodeResourcesFit MostAllocated over cpu and memory."),
            _scorer(
                nodeorder.BALANCED_RESOURCE,
                1,
                "NodeResourcesBalancedAllocation over cpu, memory and nvidia.com/gpu.",
            ),
            _scorer(
                nodeorder.NODE_AFFINITY,
                1,
                "NodeAffinity: the pod's preferred node affinity terms, normalised over the candidates.",
            ),
            _scorer(
                nodeorder.TAINT_TOLERATION,
                1,
                "TaintToleration: fewer untolerated PreferNoSchedule taints score higher.",
            ),
            _scorer(
                nodeorder.POD_AFFINITY,
                2,
                "InterPodAffinity: the pod's preferred pod (anti-)affinity terms and the existing pods' "
                "preferred terms (and required affinity, below) that match it, per topology domain, "
                "normalised over the candidates (a member plugin named InterPodAffinity).",
            ),
            Argument(
                nodeorder.HARD_POD_AFFINITY,
                ("hard_pod_affinity",),
                0,
                "kube-scheduler's hardPodAffinityWeight (0-100): the weight of an existing pod's required "
                "affinity term the incoming pod matches. Volcano builds InterPodAffinity with zero-valued "
                "arguments: 0 gives its scores exactly.",
                str(pod_affinity.DEFAULT_HARD_POD_AFFINITY_WEIGHT),
            ),
            _scorer(
                nodeorder.IMAGE_LOCALITY,
                2,
                "ImageLocality: the pod's images a node holds (`status.images`), by size and by how many "
                "nodes hold them (a member plugin of its own, reported as `ImageLocality`).",
            ),
            _scorer(
                nodeorder.POD_TOPOLOGY_SPREAD,
                2,
                "PodTopologySpread: the pod's ScheduleAnyway constraints, or the system defaults "
                "(hostname maxSkew 3, zone maxSkew 5, selecting the pods of its Services and controller), "
                "emptier domains scoring higher (a member plugin named PodTopologySpread).",
            ),
        ),
        "Each scorer gives a candidate node 0-100 by kube-scheduler's formula (integer arithmetic as "
        "kube's), times its weight; the plugin's score is the sum. A weight of 0 switches a scorer off; "
        "all 0 switch the plugin's scoring off (podaffinity, podtopologyspread and imagelocality are member "
        "plugins, each scoring on its own weight). Refused: a "
        "negative or fractional weight, an unknown argument, a non-zero weight for a scorer gpuq does not "
        "compute. Deviation: a multi-container pod's non-zero request is taken from its total.",
    ),
    Plugin(
        plugin_names.BINPACK,
        "Volcano pkg/scheduler/plugins/binpack",
        binpack.BinpackArgs,
        binpack.BinpackArgs.parse,
        {binpack.RESOURCES_KEY: "nvidia.com/gpu"},
        (
            Argument(
                binpack.WEIGHT_KEY,
                ("weight",),
                10,
                "Multiplier of the node score; 0 switches the plugin's scoring off.",
                str(binpack.DEFAULT_WEIGHT),
            ),
            Argument(binpack.CPU_KEY, ("cpu",), 5, "Weight of cpu.", str(binpack.DEFAULT_WEIGHT)),
            Argument(binpack.MEMORY_KEY, ("memory",), 1, "Weight of memory.", str(binpack.DEFAULT_WEIGHT)),
            Argument(
                binpack.RESOURCES_KEY,
                ("resources",),
                "nvidia.com/gpu, example.com/foo",
                "Comma-separated extended resources to pack too (each weighs 1 unless given below).",
                "none",
            ),
            Argument(
                binpack.RESOURCE_PREFIX + "nvidia.com/gpu",
                ("listed_weights",),
                2,
                "`binpack.resources.<name>`: weight of a resource listed in `binpack.resources`.",
                str(binpack.DEFAULT_WEIGHT),
            ),
        ),
        "Node score `sum((used + request) * weight / allocatable) / sum(weights) * 100 * binpack.weight` "
        "over the weighted resources the pod requests (its pod count included, weighted only if `pods` "
        "is listed); a resource the node has none of scores 0 and keeps its weight; one that would go "
        "over the node's allocatable makes the node 0. Refused (Volcano replaces or ignores them): a "
        "negative or fractional weight, a weight for an unlisted resource, cpu or memory in "
        "`binpack.resources`, an unknown argument.",
    ),
    Plugin(
        plugin_names.RESERVATION,
        "Volcano pkg/scheduler/plugins/reservation (sunset by Volcano in 2022, PR #2236; last at b27b4bbe7^)",
        reservation.ReservationArgs,
        reservation.ReservationArgs.parse,
        {},
        (
            Argument(
                "lockTimeoutSeconds",
                ("lock_timeout",),
                600,
                "gpuq's own: seconds the nodes stay locked for one target job that is not ready; the job "
                "then goes behind the other candidates. 0 < value <= 86400.",
                str(int(reservation.DEFAULT_LOCK_TIMEOUT_SECONDS)),
            ),
        ),
        "Runs only with the `reserve` action (refused without it, as reserve is without the plugin). "
        "TargetJob (`enableTargetJob`): of the jobs with a pod refused for want of room, the highest "
        "priority, then the longest waiting, then the first key. ReservedNodes (`enableReservedNodes`): "
        "one more node per reserve step, the unlocked one with the most idle resources. Its Filter "
        "refuses the locked nodes to every other job's pods (`node(s) locked for the target job "
        "PodGroup/ns/name (reservation)`) until the target job is ready, gone, or its lock times out "
        "(design.md Semantics 15).",
    ),
)

# Plugins that take no arguments (the scheduler configuration refuses any).
PLAIN_PLUGINS: Mapping[str, str] = {
    plugin_names.PRIORITY: "Queue order by PriorityClass value, then creation time; job order by the "
    "PodGroup's PriorityClass; preemptable: only lower-priority pods; a job starves while some pod is "
    "not running.",
    plugin_names.CONFORMANCE: "Preempt and reclaim never evict critical pods (system-cluster-critical, "
    "system-node-critical) or kube-system pods.",
    plugin_names.DRF: "Volcano's drf job order: pods of the job (PodGroup, else the pod) with the smallest "
    "dominant resource share (largest of allocated / cluster allocatable over the resources, the pod "
    "count included) go first, re-read as pods are placed; then creation time, namespace/name. Not "
    "implemented: the hierarchical mode (`enableHierarchy`); drf does not yet take part in choosing "
    "preemption victims.",
}

ANNOTATIONS: Mapping[str, tuple[str, str]] = {
    "CARD_QUOTA": ("Queue", "JSON object card type -> non-negative integer: the queue's card quota."),
    "CARD_REQUEST": ("PodGroup", "JSON object card type (or `A|B`) -> count, checked at enqueue."),
    "CARD_NAME": ("Pod", "Card type, or `A|B|C` alternatives, left = preferred."),
    "GROUP_NAME": ("Pod", "The pod's PodGroup."),
    "QUEUE_NAME": ("Pod", "The pod's Queue when it has no PodGroup."),
    "PREEMPTABLE": ("Pod", '`"false"` (annotation, else label): never a preempt or reclaim victim.'),
    "TASK_SPEC": (
        "Pod",
        "(annotation, else label) The pod's task in its PodGroup: the key of `minTaskMember`.",
    ),
    "DEFAULT_QUEUE": ("-", "The queue of a pod that names none (a value, not a key)."),
    "CROSSQUOTA_PREFIX": ("Node", "`<prefix><resource>`: absolute cross-quota override for the node."),
    "CROSSQUOTA_PERCENTAGE_PREFIX": ("Node", "`<prefix><resource>`: percentage cross-quota override."),
    "CROSSQUOTA_SCORING_STRATEGY": ("Pod", "`most-allocated` or `least-allocated` for crossquota scoring."),
    "RESOURCE_STRATEGY_SCORING_TYPE": ("Pod", "Per-pod MostAllocated/LeastAllocated override."),
    "RESOURCE_STRATEGY_WEIGHT": ("Pod", "Per-pod resource-strategy-fit weight override."),
    "TF_TFLOPS_REQUEST": ("Pod", "GPUResourceQuota request: TFLOPS."),
    "TF_VRAM_REQUEST": ("Pod", "GPUResourceQuota request: VRAM (a quantity)."),
    "TF_TFLOPS_LIMIT": ("Pod", "GPUResourceQuota limit: TFLOPS."),
    "TF_VRAM_LIMIT": ("Pod", "GPUResourceQuota limit: VRAM."),
    "TF_GPU_COUNT": ("Pod", "GPUs per worker."),
    "TF_GPU_IDS": ("Pod", "Written by the scheduler: the shared GPUs a tensor-fusion pod was given."),
}


class DocsError(RuntimeError):
    pass


def annotation_constants() -> dict[str, str]:
    """Every string constant of common.model.annotations (its keys and values)."""
    return {
        name: value
        for name, value in vars(keys).items()
        if name.isupper() and not name.startswith("_") and isinstance(value, str)
    }


def check_names() -> None:
    """The documented plugins are exactly the names the configuration accepts, each documented once,
    and each plugin documented with arguments is the one whose arguments the configuration reads with
    that model (a plugin without arguments documented as such)."""
    with_arguments = [p.name for p in (*PLUGINS, *VOLCANO_PLUGINS)]
    documented = [*with_arguments, *PLAIN_PLUGINS]
    repeated = sorted({name for name in documented if documented.count(name) > 1})
    if repeated:
        raise DocsError(f"plugins documented twice: {repeated}")
    undocumented = sorted(set(plugin_names.ALL) - set(documented))
    if undocumented:
        raise DocsError(f"plugins without documentation in gpuq_k8s/docs.py: {undocumented}")
    unknown = sorted(set(documented) - set(plugin_names.ALL))
    if unknown:
        raise DocsError(f"documented plugins that common.model.plugin_names does not name: {unknown}")
    registered = set(default_registry().names)
    if registered != set(plugin_names.ALL):
        drift = sorted(registered ^ set(plugin_names.ALL))
        raise DocsError(
            f"the scheduler registers other plugins than common.model.plugin_names names: {drift}"
        )
    for plugin in (*PLUGINS, *VOLCANO_PLUGINS):
        if ARGUMENTS.get(plugin.name) is not plugin.model:
            read = ARGUMENTS.get(plugin.name)
            raise DocsError(f"{plugin.name}: documented with {plugin.model.__name__}, read with {read}")
    for name in PLAIN_PLUGINS:
        if name in ARGUMENTS:
            raise DocsError(
                f"{name}: documented without arguments, but {ARGUMENTS[name].__name__} reads some"
            )


def _check(plugin: Plugin) -> None:
    documented = {f for a in plugin.arguments for f in a.fields}
    undocumented = set(plugin.model.model_fields) - documented
    if undocumented:
        raise DocsError(f"{plugin.name}: model fields without a documented argument: {sorted(undocumented)}")
    for arg in plugin.arguments:
        key = arg.key.replace("<resource>", "cpu")
        try:
            plugin.parse({**plugin.required, key: arg.example})
        except Exception as err:
            raise DocsError(
                f"{plugin.name}: documented argument {key}={arg.example!r} is refused: {err}"
            ) from err


def _cell(text: str) -> str:
    """A Markdown table cell: a literal ``|`` would split it."""
    return text.replace("|", "\\|")


def render() -> str:
    constants = annotation_constants()
    missing = sorted(set(constants) - set(ANNOTATIONS))
    if missing:
        raise DocsError(f"annotation constants without a description in gpuq/docs.py: {missing}")
    unknown = sorted(set(ANNOTATIONS) - set(constants))
    if unknown:
        raise DocsError(f"described annotation constants that no longer exist: {unknown}")
    check_names()
    out = [
        "<!-- GENERATED by `python -m gpuq_k8s.docs` from the argument models and"
        " common/model/annotations.py. Do not edit. -->",
        "# Configuration reference",
        "",
        "The scheduler and the webhook read one Volcano-format configuration (`gpuq scheduler --config "
        "CONF.yaml`, `gpuq webhook --config CONF.yaml`; the Helm value `scheduler.config`, the ConfigMap "
        "`gpuq-scheduler-config` mounted into both Deployments). The webhook applies a plugin's admission "
        "rules only when that plugin is enabled, with its arguments (design.md Semantics 10). An unknown "
        "plugin, an unknown argument or a value of the wrong type is a start-up error naming the key and "
        "the value; every problem of the file is reported at once, one line each with its path "
        "(`tiers[1].plugins[3].arguments.nodeOrderWeight: invalid value -1: expected a positive number "
        "such as 1.0`), and the command exits 2. Both read the file once, at start: a changed "
        "configuration takes effect when both "
        "restart, which the `checksum/config` annotation on both pod templates does on `helm upgrade` "
        '(docs/operations.md, "Change the configuration").',
        "",
        "## Default configuration",
        "",
        "```yaml",
        DEFAULT_CONFIG_YAML.rstrip(),
        "```",
        "",
        "## Plugin arguments",
        "",
    ]
    for plugin in (*PLUGINS, *VOLCANO_PLUGINS):
        _check(plugin)
        out += [
            f"### {plugin.name}",
            "",
            f"Spec: `{plugin.spec}`. Model: `{plugin.model.__module__}.{plugin.model.__name__}`.",
            "",
            "| argument | default | example | meaning |",
            "|---|---|---|---|",
        ]
        for arg in plugin.arguments:
            example = arg.example if isinstance(arg.example, str) else repr(arg.example)
            example = _cell(str(example))
            out.append(f"| `{arg.key}` | {arg.default} | `{example}` | {_cell(arg.meaning)} |")
        out.append("")
        if plugin.notes:
            out += [plugin.notes, ""]
    out += ["### Plugins without arguments", "", "| plugin | what it does |", "|---|---|"]
    out += [f"| `{name}` | {text} |" for name, text in PLAIN_PLUGINS.items()]
    out += volcano_sections()
    out += ["", "## Annotations and labels", "", "| key | on | meaning |", "|---|---|---|"]
    for name, value in sorted(constants.items(), key=lambda kv: kv[1]):
        on, text = ANNOTATIONS[name]
        out.append(f"| `{value}` | {on} | {_cell(text)} |")
    out += [
        "",
        "Card discovery node labels: `<prefix>/<type>.product`, `.count`, `.memory` (MiB), `.replicas` "
        "(capacity-card.md; design.md Semantics 2 and 9).",
        "",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpuq_k8s.docs", description="generate docs/configuration.md"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/configuration.md is stale")
    args = parser.parse_args(argv)
    try:
        text = render()
    except DocsError as err:
        print(f"gpuq.docs: {err}", file=sys.stderr)
        return 2
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
    if args.check:
        if current != text:
            print(f"{TARGET} is stale: run `python -m gpuq_k8s.docs`", file=sys.stderr)
            return 1
        return 0
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
