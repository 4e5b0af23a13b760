"""ElasticQuota: min/max per namespace, borrowing, and quota-aware preemption (capacity-scheduling.md).

The reference is scheduler-plugins' ``pkg/capacityscheduling``. gpuq keeps its structure (a live
ledger mutated only in Reserve/Unreserve and by pod events, a snapshot taken in PreFilter that the
rest of the cycle reads) and deliberately differs where upstream is a trap; each difference is told
in the module whose rule it changes:

* :mod:`.quota`: the ElasticQuota object, its admission validation, and one namespace's quota with
  its usage (absent ``min``/``max`` keys, design.md Semantics 4);
* :mod:`.ledger`: every quota and the pods charged to them (reserve / unreserve / rebuild, the
  per-cycle snapshot, ``status.used``) and the KEP's two PreFilter checks (which resources are
  compared; namespaces without a quota);
* :mod:`.preemption`: who may be preempted and the victims on one node (who is a borrower; gangs).

Everything here is synchronous and pure over explicit state; the scheduler is single-threaded
asyncio, so the live state needs no lock (upstream's RWMutex guards informer goroutines).
"""
