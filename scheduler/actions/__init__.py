"""Volcano's actions beyond enqueue and allocate, as gpuq's pod-at-a-time cycle runs them
(design.md "Semantics", the actions): backfill (pods without requests, after the others), preempt
(within a queue) and reclaim (between queues). Preempt and reclaim share the node walk of
:mod:`.victims`; the cycle's :class:`~scheduler.preemption.Preemption` runs them, in the order the
configuration lists them, for a pod no node fits, and evicts what they name."""
