"""Volcano's per-plugin switches, with Volcano's own YAML spelling (``PluginOption`` in volcano-sh/volcano
``pkg/scheduler/conf/scheduler_conf.go``), and which of gpuq's extension points each one gates.

Volcano spells most of them ``enable...`` and a few ``enabled...``; gpuq once accepted an ``enabled...``
spelling for all of them. Those old spellings are refused with a message naming Volcano's key (a
switch that silently did nothing is worse than a start-up error that says what to write). A switch
left out is on, as Volcano's ``isEnabled(nil)`` is.

The framework honours the switches centrally, by extension point (``scheduler/framework/session.py``):
a plugin never reads its own switches. Switches that gate a function no gpuq plugin provides
(``enableJobReady``, ``enableBestNode``, ...) are accepted and, as in Volcano for a plugin that
registers no such function, change nothing; ``enableHierarchy: true`` is refused, because it turns
on hierarchical queues, which gpuq does not implement.
"""

from __future__ import annotations

from typing import Final

from gpuq_k8s.common.model.quoting import quote

JOB_ORDER: Final = "enableJobOrder"
TASK_ORDER: Final = "enableTaskOrder"
PREEMPTABLE: Final = "enablePreemptable"
RECLAIMABLE: Final = "enableReclaimable"
QUEUE_ORDER: Final = "enableQueueOrder"
PREDICATE: Final = "enablePredicate"
NODE_ORDER: Final = "enableNodeOrder"
JOB_ENQUEUED: Final = "enableJobEnqueued"
JOB_STARVING: Final = "enableJobStarving"
VICTIM: Final = "enabledVictim"
OVERUSED: Final = "enabledOverused"
ALLOCATABLE: Final = "enabledAllocatable"
HIERARCHY: Final = "enableHierarchy"
JOB_READY: Final = "enableJobReady"
TARGET_JOB: Final = "enableTargetJob"
RESERVED_NODES: Final = "enableReservedNodes"

# Every switch of Volcano's PluginOption (enableNamespaceOrder kept: older Volcano files carry it).
VOLCANO_SWITCHES: Final = frozenset(
    {
        JOB_ORDER,
        "enableNamespaceOrder",
        HIERARCHY,
        JOB_READY,
        "enableJobPipelined",
        TASK_ORDER,
        PREEMPTABLE,
        RECLAIMABLE,
        "enablePreemptive",
        QUEUE_ORDER,
        "enabledClusterOrder",
        PREDICATE,
        "enableBestNode",
        NODE_ORDER,
        TARGET_JOB,
        RESERVED_NODES,
        JOB_ENQUEUED,
        VICTIM,
        JOB_STARVING,
        OVERUSED,
        ALLOCATABLE,
        "enabledHyperNodeOrder",
        "enabledSubJobReady",
        "enabledSubJobPipelined",
        "enabledSubJobOrder",
        "enabledHyperNodeGradient",
    }
)

# gpuq's former misspellings -> Volcano's key.
LEGACY_SPELLINGS: Final = {
    "enabledJobOrder": JOB_ORDER,
    "enabledNamespaceOrder": "enableNamespaceOrder",
    "enabledHierarchy": HIERARCHY,
    "enabledJobReady": JOB_READY,
    "enabledJobPipelined": "enableJobPipelined",
    "enabledTaskOrder": TASK_ORDER,
    "enabledPreemptable": PREEMPTABLE,
    "enabledReclaimable": RECLAIMABLE,
    "enabledQueueOrder": QUEUE_ORDER,
    "enabledPredicate": PREDICATE,
    "enabledBestNode": "enableBestNode",
    "enabledNodeOrder": NODE_ORDER,
    "enabledTargetJob": TARGET_JOB,
    "enabledReservedNodes": RESERVED_NODES,
    "enabledJobEnqueued": JOB_ENQUEUED,
    "enabledJobStarving": JOB_STARVING,
}

# Switches whose ``true`` asks for what gpuq does not run: common.model.volcano_support.SWITCHES_WHEN_TRUE.


def switch_problem(key: str) -> str | None:
    """Why ``key`` is not a switch (an expectation naming the right key), or None when it is one."""
    if key in VOLCANO_SWITCHES:
        return None
    right = LEGACY_SPELLINGS.get(key)
    if right is not None:
        return f"Volcano's spelling {right!r} (gpuq's former {quote(key)} is no longer accepted)"
    return "'name', 'arguments' or one of Volcano's plugin switches (enablePredicate, enableNodeOrder, ...)"
