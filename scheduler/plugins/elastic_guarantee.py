"""capacity-scheduling's guaranteed pool (design.md Semantics 4, "The guaranteed pool"): the glue over
the pure rule :mod:`common.model.elastic.guarantee`.

When the sum of every ElasticQuota's ``min`` exceeds what the live nodes have allocatable, the quotas
involved get the ``GuaranteeOvercommitted`` condition and a Warning event at the batched status sync,
and ``gpuq_elastic_quota_min_over_capacity`` says by how much. :class:`GuaranteedPool` keeps what that
needs between syncs: the nodes' allocatable total and, per namespace, the condition last written (or
found on the object after a restart), so it keeps its lastTransitionTime and the event fires once.
:class:`~scheduler.plugins.capacity_scheduling.CapacityScheduling` owns one over its ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from gpuq_k8s.common.model.elastic import guarantee
from gpuq_k8s.common.model.elastic.ledger import ElasticQuotaInfos
from gpuq_k8s.common.model.events import EventRecord
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.framework.handle import Handle


class GuaranteedPool:
    """The guaranteed pool of the ElasticQuotas in ``infos`` against the nodes of ``handle``."""

    def __init__(self, handle: Handle, infos: ElasticQuotaInfos) -> None:
        self.handle = handle
        self.infos = infos
        self._capacity: dict[str, int] | None = None  # None: to be summed again after a node change
        self._conditions: dict[str, dict[str, str]] = {}
        self._changed = True

    def quota_changed(self, namespace: str, obj: Obj | None) -> None:
        """The ElasticQuota of ``namespace`` was added, changed or deleted (None)."""
        self._changed = True
        if obj is None:
            self._conditions.pop(namespace, None)
        elif namespace not in self._conditions:
            written = guarantee.written_condition(obj)
            if written is not None:
                self._conditions[namespace] = written

    def nodes_changed(self) -> None:
        """A node came, went or changed its allocatable."""
        self._capacity = None
        self._changed = True

    def capacity(self) -> dict[str, int]:
        """What the live nodes have allocatable, per resource (summed again after a node change)."""
        if self._capacity is None:
            cluster = self.handle.cluster
            n = cluster.n
            totals = cluster.allocatable[:n][cluster.alive[:n]].sum(axis=0)
            self._capacity = {
                name: int(totals[column])
                for column, name in enumerate(cluster.columns.names)
                if totals[column]
            }
        return self._capacity

    def _mins(self) -> dict[str, Mapping[str, int]]:
        return {ns: info.min for ns in self.infos.namespaces() if (info := self.infos.get(ns)) is not None}

    def overcommits(self) -> list[guarantee.Overcommit]:
        """The resources whose sum of ElasticQuota min exceeds the nodes' allocatable."""
        return guarantee.overcommitted(self._mins(), self.capacity())

    def min_over_capacity(self) -> dict[str, int]:
        """Per resource some min lists: by how much the sum of min exceeds the nodes' allocatable (0:
        it fits), for ``gpuq_elastic_quota_min_over_capacity``."""
        return guarantee.over_capacity(self._mins(), self.capacity())

    def condition(self, namespace: str) -> dict[str, str] | None:
        """The GuaranteeOvercommitted condition of the namespace's ElasticQuota, as last written."""
        return self._conditions.get(namespace)

    def take_conditions(self, now: datetime) -> tuple[set[str], list[EventRecord]]:
        """The namespaces whose GuaranteeOvercommitted condition changed since the last call, and the
        Warning events of those that became involved
        (:func:`~common.model.elastic.guarantee.update_conditions`)."""
        if not self._changed:
            return set(), []
        self._changed = False
        quotas = {ns: info.ref for ns in self.infos.namespaces() if (info := self.infos.get(ns)) is not None}
        stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return guarantee.update_conditions(quotas, self.overcommits(), self._conditions, stamp)
