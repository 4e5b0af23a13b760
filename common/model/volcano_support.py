"""What gpuq does with each of Volcano's actions, plugins and configuration keys: one table, read by the
configuration loader (:mod:`common.model.config`: the refusal of anything gpuq does not run says whether
gpuq will *never* support it, and why, or does *not yet*) and by ``gpuq_k8s/docs_volcano.py``
(docs/configuration.md, "Volcano compatibility").

Compared with Volcano's master at commit ed72c7c (2026-08-20): its registered actions
(``pkg/scheduler/actions/factory.go``) and plugins (``pkg/scheduler/plugins/factory.go``), plus the
``elect`` and ``reserve`` actions and the ``reservation`` plugin that Volcano sunset in May 2022
(commit b27b4bbe7, PR #2236; design.md Semantics 15) and that gpuq runs.

``NEVER`` is a decision (the reason says why gpuq is the wrong place for it); ``NOT_YET`` is work gpuq
has not done (the reason says what gpuq offers meanwhile, when it offers something).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from gpuq_k8s.common.model import plugin_names

# The Volcano commit the table was compared with (docs/migration.md, README).
VOLCANO_COMMIT: Final = "ed72c7c"
VOLCANO_COMMIT_DATE: Final = "2026-08-20"


class Support(StrEnum):
    SUPPORTED = "supported"
    NOT_YET = "not yet"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class Entry:
    """One of Volcano's names: gpuq's status and its reason (empty for a supported one, unless a note)."""

    name: str
    status: Support
    reason: str = ""

    def refusal(self, what: str) -> str:
        """The expectation a refused use of it is told: ``what`` is "a plugin gpuq runs" or the like."""
        if self.status is Support.NEVER:
            return f"{what} (gpuq will never support Volcano's {self.name!r}: {self.reason})"
        if self.status is Support.NOT_YET:
            return f"{what} (gpuq does not yet support Volcano's {self.name!r}: {self.reason})"
        return what


def _table(*entries: Entry) -> Mapping[str, Entry]:
    return {entry.name: entry for entry in entries}


S, N, Y = Support.SUPPORTED, Support.NEVER, Support.NOT_YET
_DESCHEDULING: Final = (
    "it evicts running pods to rebalance nodes, a descheduler's job (kubernetes-sigs/descheduler); gpuq "
    "evicts only to place a pending pod (preempt, reclaim)"
)

ACTIONS: Final[Mapping[str, Entry]] = _table(
    Entry("enqueue", S),
    Entry("allocate", S),
    Entry("backfill", S),
    Entry("preempt", S),
    Entry("reclaim", S),
    Entry("reserve", S, "sunset by Volcano in 2022 (PR #2236); gpuq runs it, with elect folded in"),
    Entry("elect", S, "sunset by Volcano in 2022 (PR #2236); gpuq's reserve elects, so elect needs reserve"),
    Entry(
        "gangpreempt",
        Y,
        "gang-aware preemption of whole jobs; gpuq's preempt keeps a victim job's minMember (gang's "
        "preemptable rule) meanwhile",
    ),
    Entry("gangreclaim", Y, "gang-aware reclaim of whole jobs; gpuq's reclaim keeps minMember meanwhile"),
    Entry("shuffle", N, _DESCHEDULING),
)

PLUGINS: Final[Mapping[str, Entry]] = _table(
    *(
        Entry(name, S)
        for name in (
            plugin_names.PRIORITY,
            plugin_names.GANG,
            plugin_names.CONFORMANCE,
            plugin_names.DRF,
            plugin_names.PREDICATES,
            plugin_names.PROPORTION,
            plugin_names.NODEORDER,
            plugin_names.BINPACK,
            plugin_names.OVERCOMMIT,
            plugin_names.RESOURCE_STRATEGY_FIT,
        )
    ),
    Entry(plugin_names.RESERVATION, S, "sunset by Volcano in 2022 (PR #2236); gpuq runs it with reserve"),
    Entry(
        "capacity",
        Y,
        "queue capability, deserved and guarantee in Volcano's capacity plugin; proportion's deserved "
        "share and capacity-card's card quotas are what gpuq runs meanwhile",
    ),
    Entry("cdp", Y, "cooldown protection of preemptable pods"),
    Entry(
        "deviceshare",
        N,
        "it shares GPUs through Volcano's vGPU device plugin (HAMi) annotations, which gpuq neither "
        "writes nor reads; gpuq's GPU sharing is MIG and MPS card types (capacity-card) and "
        "tensor-fusion's vGPU (gpu-quota)",
    ),
    Entry(
        "extender",
        N,
        "it calls an HTTP scheduler extender; gpuq's extension mechanism is a plugin in its registry",
    ),
    Entry("network-topology-aware", Y, "HyperNode network topology; gpuq has no HyperNode model yet"),
    Entry("nodegroup", Y, "queue-to-node-group affinity; a nodeSelector or node affinity does it meanwhile"),
    Entry("numaaware", Y, "NUMA placement from Volcano's Numatopology objects, which gpuq does not read yet"),
    Entry("pdb", Y, "PodDisruptionBudgets as a preempt and reclaim victim rule"),
    Entry("rescheduling", N, _DESCHEDULING),
    Entry("resourcequota", Y, "namespace ResourceQuota at enqueue; the apiserver enforces it at create"),
    Entry("sla", Y, "a job's waiting-time SLA at enqueue and in job order"),
    Entry("task-topology", Y, "affinity between a job's tasks; the pods' own pod affinity does it meanwhile"),
    Entry(
        "tdm",
        N,
        "time-division multiplexing of revocable nodes needs Volcano's colocation agent on the nodes",
    ),
    Entry(
        "usage",
        N,
        "it scores nodes by metrics from a metrics source (Prometheus); gpuq schedules by requests, never "
        "by measured load",
    ),
)

# The switches whose ``true`` asks for what gpuq does not run (a switch's ``false`` always works).
SWITCHES_WHEN_TRUE: Final[Mapping[str, Entry]] = _table(
    Entry("enableHierarchy", Y, "hierarchical queues (Queue.spec.parent); gpuq's queues are flat"),
)

# Volcano's ``configurations:`` arguments gpuq refuses (the ones it honours: common.model.action_args).
ACTION_ARGUMENTS: Final[Mapping[str, Entry]] = _table(
    Entry("gateRemovalWorkerNum", N, "gpuq removes no scheduling gates: their owners do"),
)

# Top-level sections of Volcano's file other than actions, tiers and configurations.
SECTIONS: Final[Mapping[str, Entry]] = _table(
    Entry("metrics", N, "gpuq reads no metrics source (the input of Volcano's usage plugin)"),
)
