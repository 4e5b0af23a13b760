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
# the five designs (design.md "The five designs")
CAPACITY_CARD: Final = "capacity-card"
CROSSQUOTA: Final = "crossquota"
RESOURCE_STRATEGY_FIT: Final = "resource-strategy-fit"
CAPACITY_SCHEDULING: Final = "capacity-scheduling"
GPU_QUOTA: Final = "gpu-quota"

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
)
