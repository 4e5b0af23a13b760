"""The capacity-card engine: per-queue quotas per card type (capacity-card.md, design.md Semantics 1,
3, 7), one module per concept:

* :mod:`.args`: the plugin arguments (``cardUnlimitedCpuMemory``, ``nodeOrderWeight``);
* :mod:`.quota`: a Queue's quota (``spec.capability`` and the ``volcano.sh/card.quota`` annotation);
* :mod:`.demand`: what a pod asks of the card quotas and what it is charged on a node (Semantics 1);
* :mod:`.ledger`: a queue's ``allocated``, ``inqueue`` and ``elastic`` usage, kept per pod and job;
* :mod:`.refusals`: how the checks say no, with the upstream event reasons;
* :mod:`.enqueue`: job mode, the "Job Enqueueable Check" of a PodGroup;
* :mod:`.task`: task mode, the "Task Allocatable Check" per card type and node;
* :mod:`.ordering`: the "Node Ordering" score;
* :mod:`.metrics`: the per-queue card metrics and share;
* :mod:`.engine`: :class:`~common.model.capacity_card.engine.CapacityCard`, all of it over the
  cluster state the scheduler and the simulator keep.

Importers name the concept module (``from common.model.capacity_card.engine import CapacityCard``).
"""
