"""Every plugin name the scheduler configuration accepts, defined once (the counterpart of kube-scheduler's
``pkg/scheduler/framework/plugins/names/names.go``).

The configuration checks names against :data:`ALL` (:mod:`common.model.config`), each plugin class takes
its ``name`` from here (``scheduler/plugins``), the webhook asks the configuration for a plugin by these
constants (``webhook/options.py``), and ``gpuq_k8s/docs.py`` documents exactly these names (a unit test
fails when a registered plugin and its documentation drift apart). The names are Volcano's and the
designs' own spellings, so existing configuration files keep working.
"""

from __future__ import annotations

from typing import Final

# Volcano's plugins (volcano-sh/volcano pkg/scheduler/plugins)
PRIORITY: Final = "priority"
GANG: Final = "gang"
PREDICATES: Final = "predicates"
CONFORMANCE: Final = "conformance"
PROPORTION: Final = "proportion"
OVERCOMMIT: Final = "overcommit"
DRF: Final = "drf"
NODEORDER: Final = "nodeorder"
BINPACK: Final = "binpack"
# sunset by Volcano in 2022 (PR #2236); gpuq runs it with the reserve action (design.md Semantics 15)
RESERVATION: Final = "reservation"
# the five designs (design.md "The five designs")
CAPACITY_CARD: Final = "capacity-card"
CROSSQUOTA: Final = "crossquota"
RESOURCE_STRATEGY_FIT: Final = "resource-strategy-fit"
CAPACITY_SCHEDULING: Final = "capacity-scheduling"
GPU_QUOTA: Final = "gpu-quota"

# Members: kube-scheduler's filter and score plugins (``names.go``), each of which a configuration
# reaches through a Volcano plugin entry (``predicates`` for the filters, ``nodeorder`` for the scores;
# common/model/predicates.py, scheduler/plugins/__init__.py). They are not configuration names: a
# tier names ``predicates``, never ``NodePorts``. Their names label their verdicts (explanations,
# metrics, FitError reasons and the events that retry a pod), as in kube-scheduler.
NODE_NAME: Final = "NodeName"
NODE_PORTS: Final = "NodePorts"
INTER_POD_AFFINITY: Final = "InterPodAffinity"
POD_TOPOLOGY_SPREAD: Final = "PodTopologySpread"
VOLUME_RESTRICTIONS: Final = "VolumeRestrictions"
VOLUME_ZONE: Final = "VolumeZone"
NODE_VOLUME_LIMITS: Final = "NodeVolumeLimits"
VOLUME_BINDING: Final = "VolumeBinding"
DYNAMIC_RESOURCES: Final = "DynamicResources"
SCHEDULING_GATES: Final = "SchedulingGates"
IMAGE_LOCALITY: Final = "ImageLocality"
# gpu-quota's member: tensor-fusion pods placed on shared GPUs (design.md Semantics 19).
GPU_SHARE: Final = "GPUShare"

# Every name, in the order messages list them.
ALL: Final = (
    PRIORITY,
    GANG,
    PREDICATES,
    CAPACITY_CARD,
    CROSSQUOTA,
    RESOURCE_STRATEGY_FIT,
    CAPACITY_SCHEDULING,
    GPU_QUOTA,
    CONFORMANCE,
    PROPORTION,
    OVERCOMMIT,
    DRF,
    NODEORDER,
    BINPACK,
    RESERVATION,
)
