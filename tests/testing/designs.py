"""Scheduler configurations quoted verbatim: the designs' own blocks (capacity-card.md,
resource-strategy-fit.md), Volcano's default volcano-scheduler.conf and the tier of Volcano's
allocate_test.go. Unit tests start gpuq with them; tests/e2e/test_scheduler_actions.py starts
``gpuq scheduler`` on them against a real apiserver."""

from __future__ import annotations

# Volcano's default volcano-scheduler.conf (installer/helm/chart/volcano/config/volcano-scheduler.conf).
VOLCANO_DEFAULT = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


# capacity-card.md "Configuration" (the plugin's options) and its worked example's ConfigMap
# (volcano-scheduler.conf), verbatim.
CAPACITY_CARD_CONFIGURATION = """\
actions: "enqueue, allocate, backfill"
tiers:
  - plugins:
      - name: capacity-card
        arguments:
          cardUnlimitedCpuMemory: true  # Optional: if true, card resources don't need CPU/memory quotas
          nodeOrderWeight: 1.0 # Optional, node ordering weight coefficient
"""
CAPACITY_CARD_CONFIGMAP = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: capacity-card
    arguments:
      cardUnlimitedCpuMemory: false
      nodeOrderWeight: 2.0    # Increase card type priority influence
"""
# resource-strategy-fit.md "config", verbatim.
RESOURCE_STRATEGY_FIT_CONFIGURATION = """\
actions: "enqueue, allocate, backfill, reclaim, preempt"
tiers:
- plugins:
 - name: resource-strategy-fit
    arguments:
      resourceStrategyFitWeight: 10
      resources:
        nvidia.com/gpu:
          type: MostAllocated
          weight: 2
        cpu:
          type: LeastAllocated
          weight: 1
"""


def designs_configurations() -> list[str]:
    """The configuration blocks of the designs (resource-strategy-fit's with its one line re-indented)
    and Volcano's default file, unchanged."""
    fixed = RESOURCE_STRATEGY_FIT_CONFIGURATION.replace("\n - name:", "\n  - name:")
    return [CAPACITY_CARD_CONFIGURATION, CAPACITY_CARD_CONFIGMAP, fixed, VOLCANO_DEFAULT]


# allocate_test.go TestAllocate's one tier.
ALLOCATE_CONF = """\
actions: "enqueue, allocate"
tiers:
- plugins:
  - name: gang
    enableJobOrder: true
    enableJobReady: true
    enableJobPipelined: true
    enableJobStarving: true
  - name: drf
    enablePreemptable: true
    enableJobOrder: true
  - name: proportion
    enableQueueOrder: true
    enableReclaimable: true
    enabledAllocatable: true
  - name: predicates
    enablePredicate: true
  - name: nodeorder
    enableNodeOrder: true
"""
