"""The second table of docs/configuration.md's plugin arguments, :data:`VOLCANO_PLUGINS` (predicates,
overcommit, gpu-quota, nodeorder, binpack, reservation), and :data:`PLAIN_PLUGINS`, the plugins that
take no arguments; the entries' types are :mod:`gpuq_k8s.docs_plugins`'."""

from __future__ import annotations

from collections.abc import Mapping

from gpuq_k8s.common.model import (
    binpack,
    nodeorder,
    overcommit,
    plugin_names,
    predicates,
    reservation,
)
from gpuq_k8s.common.model.gpu_share.args import GPUQuotaArgs
from gpuq_k8s.common.model.placement import pod_affinity
from gpuq_k8s.docs_plugins import Argument, Plugin, field_of


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
