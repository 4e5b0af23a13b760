"""The plugin documentation entries of docs/configuration.md (:class:`Plugin`, :class:`Argument`) and
the first table of them, :data:`PLUGINS`: the quota and gang plugins with their arguments.
``python -m gpuq_k8s.docs`` checks every entry against its argument model and renders it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from gpuq_k8s.common.model import annotations as keys
from gpuq_k8s.common.model import (
    gang,
    plugin_names,
    strategy_fit,
)
from gpuq_k8s.common.model.capacity_card.args import CapacityCardArgs
from gpuq_k8s.common.model.crossquota import args as crossquota_args
from gpuq_k8s.common.model.elastic import args as elastic_args
from gpuq_k8s.common.model.plugin_args import PluginArgs


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


def field_of(model: type[PluginArgs], key: str) -> str:
    """The model field an argument key sets."""
    return next(name for name, field in model.model_fields.items() if field.alias == key)


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
